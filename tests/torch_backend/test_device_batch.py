"""Device statistics read back in batches (MSPROBE_FORCE_DEVICE_PATH=1 sends CPU tensors that way).

The direct device path read each tensor's four statistics with one
``torch.stack(...).tolist()``: the batched values must be those, bit for
bit, and the ``*_except_inf_nan`` pair that of the direct rule. Host reads
are counted: one per batch, plus one per tensor whose extremes are inf or
nan. A killed process keeps every entry up to the last read-back.
"""

import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from msprobe.core.dump.numbers import json_number
from msprobe.core.dump.reader import read_dump
from msprobe.core.recording.live_diff import value_summaries
from msprobe.pytorch.dump import device_batch, measuring, tensors
from msprobe.pytorch.dump.device_batch import DeviceBatch
from msprobe.pytorch.dump.measuring import extremes_except_inf_nan


def _direct(tensor):
    """The per-tensor device path: the four statistics read back with one tolist() each."""
    data = tensor.detach()
    data = data if data.dtype in (torch.float32, torch.float64) else data.float()
    low, high = torch.aminmax(data)
    values = torch.stack((high, low, data.mean(), torch.linalg.vector_norm(data))).tolist()
    extremes = extremes_except_inf_nan(data, values[0], values[1]) if not all(map(math.isfinite, values[:2])) else {}
    return values, extremes


def _same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _assert_four_statistics(summary, values, tensor):
    """The batched Max, Min, Mean and Norm are the direct path's ``values``, bit for bit."""
    got = [summary[key].resolve() for key in ("Max", "Min", "Mean", "Norm")]
    assert all(_same(g, json_number(v)) for g, v in zip(got, values)), (tensor.dtype, got, values)


def _samples():
    generator = torch.Generator().manual_seed(0)
    found = [torch.randn(64, 33, generator=generator, dtype=dtype) for dtype in
             (torch.float32, torch.float64, torch.float16, torch.bfloat16)]  # fmt: skip
    found.append(torch.randint(-50, 50, (17, 3), generator=generator))
    with_inf = torch.randn(40, generator=generator)
    with_inf[3], with_inf[7] = math.inf, -math.inf
    with_nan = torch.randn(5, 5, generator=generator)
    with_nan[2, 2] = math.nan
    found += [with_inf, with_nan, torch.full((4,), math.inf), torch.randn(3, 1000, generator=generator)[:, ::7]]
    found += [with_inf.bfloat16(), with_nan.half()]  # measured in float32, their finite extremes in their own dtype
    return found


@pytest.mark.parametrize("limit", [1, 3, 256])
def test_batched_values_are_the_direct_paths_bit_for_bit(monkeypatch, limit):
    monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    summarizer = tensors.TensorSummarizer("statistics", "statistics")
    summarizer.batch = batch = DeviceBatch(limit)
    samples = _samples()
    summaries = [summarizer(tensor, f"t{index}") for index, tensor in enumerate(samples)]
    batch.read_back()
    nonfinite = 0
    for tensor, summary in zip(samples, summaries):
        values, extremes = _direct(tensor)
        _assert_four_statistics(summary, values, tensor)
        found = {key: summary[key] for key in summary if key.endswith("_except_inf_nan")}
        assert found.keys() == extremes.keys()
        assert all(_same(found[key], json_number(value)) for key, value in extremes.items())
        assert list(summary)[-len(found) or len(summary) :] == list(found) if found else True  # last, as directly
        nonfinite += bool(extremes)
    assert batch.reads == math.ceil(len(samples) / limit) + nonfinite


def test_the_batch_holds_the_tensor_itself_not_a_float32_copy():
    """A bf16 or fp16 tensor is measured through a float32 copy; holding that copy until the read-back would
    take twice the tensor's device memory for every tensor of the batch."""
    batch = DeviceBatch(limit=8)
    tensor = torch.randn(32, 16).bfloat16()
    summary = batch.measure(tensor)
    held = batch.pending[0].data
    assert held.dtype == torch.bfloat16 and held.data_ptr() == tensor.data_ptr()
    batch.read_back()
    assert summary["Max"].resolve() == tensor.float().max().item()
    assert batch.pending == [] and summary["Max"].stats.data is None  # let go once read


def test_a_batch_begun_under_inference_mode_is_written_after_it():
    """The buffer is made on the first measurement: made as an inference tensor, it could not be written
    outside inference_mode again (an evaluation step dumped before a training step)."""
    batch = DeviceBatch(limit=8)
    weight = torch.tensor([[1.0, -3.0], [2.5, 0.5]])
    with torch.inference_mode():
        first = batch.measure(weight)
    second = batch.measure(torch.tensor([4.0, -8.0]))
    batch.read_back()
    with torch.inference_mode():
        third = batch.measure(weight)
        batch.read_back()
    assert [first[key].resolve() for key in ("Max", "Min", "Mean")] == [2.5, -3.0, 0.25]
    assert first["Norm"].resolve() == pytest.approx(math.sqrt(1 + 9 + 6.25 + 0.25), rel=1e-7)
    assert [second[key].resolve() for key in ("Max", "Min", "Mean")] == [4.0, -8.0, -2.0]
    assert second["Norm"].resolve() == pytest.approx(math.sqrt(80), rel=1e-7)
    assert third["Max"].resolve() == 2.5


def test_a_device_without_out_kernels_gets_the_same_values(monkeypatch):
    """Stand-in for a backend whose aminmax has no out= variant: the batch stacks and copies instead."""
    aminmax = torch.aminmax

    def without_out(data, **kwargs):
        if "out" in kwargs:
            raise RuntimeError("aminmax.out is not implemented for this device")
        return aminmax(data, **kwargs)

    monkeypatch.setattr(measuring, "torch_aminmax", without_out)
    batch = DeviceBatch(limit=4)
    samples = _samples()
    summaries = [batch.measure(tensor) for tensor in samples]
    batch.read_back()
    assert not batch.write_out
    for tensor, summary in zip(samples, summaries):
        values, _extremes = _direct(tensor)
        _assert_four_statistics(summary, values, tensor)


def test_checksum_bytes_are_moved_in_bounded_batches():
    batch = DeviceBatch(limit=1000)
    batch.byte_limit = 4096  # bytes joined on the device for one transfer
    tensors_ = [torch.randn(256) for _ in range(12)]  # 1 KiB each
    items = [batch.checksum(tensor) for tensor in tensors_]
    assert batch.reads == 3 and batch.waiting() == 0  # every fourth tensor fills the 4 KiB
    big = torch.randn(4096)  # 16 KiB alone: moved by itself
    items.append(batch.checksum(big))
    assert batch.reads == 4
    assert [item.resolve() for item in items] == [f"{zlib.crc32(t.numpy().tobytes()):08x}" for t in [*tensors_, big]]


def test_statistics_match_numpy(tmp_path):
    """An independent check of the values themselves, with numpy in float64."""
    tensor = torch.randn(128, 9, generator=torch.Generator().manual_seed(3))
    batch = DeviceBatch()
    got = batch.measure(tensor)
    batch.read_back()
    array = tensor.numpy().astype(np.float64)
    assert got["Max"].resolve() == pytest.approx(array.max(), rel=1e-7)
    assert got["Min"].resolve() == pytest.approx(array.min(), rel=1e-7)
    assert got["Mean"].resolve() == pytest.approx(array.mean(), rel=1e-5, abs=1e-7)
    assert got["Norm"].resolve() == pytest.approx(np.linalg.norm(array), rel=1e-6)


RUN = """
import json, os, sys, torch
from msprobe.pytorch import PrecisionDebugger
sys.path.insert(0, {bench!r})
from workload import make_workload
torch.manual_seed(0)
model, train_step = make_workload()
open(sys.argv[1] + ".json", "w").write(json.dumps({{"task": "statistics", "level": sys.argv[2],
                                                     "dump_path": sys.argv[1]}}))
debugger = PrecisionDebugger(config_path=sys.argv[1] + ".json", model=model)
for step in range(2):
    debugger.start(); train_step(); debugger.stop(); debugger.step()
    print(json.dumps({{"reads": debugger._hooks.host_reads, "batch": debugger._hooks.summarizer.batch is not None}}))
"""


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_host_reads_per_step_are_bounded_by_the_batches(tmp_path, level):
    text = RUN.format(bench=str(Path(__file__).parents[2] / "bench"))
    steps = _json_lines(_run(tmp_path, text, tmp_path / "dump", level, batch=64).stdout)
    dump = read_dump(tmp_path / "dump" / "step1" / "rank")
    measured = sum(1 for _ in _tensor_summaries(dump.data))
    bound = math.ceil(measured / 64) + (8 if level == "mix" else 2)  # + top-level module ends and the step's end
    assert all(step["batch"] for step in steps)
    assert 0 < steps[1]["reads"] <= bound, (steps, measured)


def test_the_device_benchmark_runs_on_the_cpu_and_prints_every_column(tmp_path):
    """The GPU benchmark, with --device cpu and the device path forced: what a GPU run will print."""
    bench = Path(__file__).parents[2] / "bench" / "bench_dump.py"
    env = {**os.environ, "MSPROBE_FORCE_DEVICE_PATH": "1", "MSPROBE_STATS_BATCH": "64"}
    command = [sys.executable, str(bench), "--device", "cpu", "--steps", "1", "--only", "statistics L1",
               "--out", str(tmp_path)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("configuration"))
    for column in ("step (ms)", "plain (ms)", "ratio", "middle half", "to floor", "host reads/step",
                   "peak device mem", "target"):  # fmt: skip
        assert column in header, column
    row = next(line for line in lines if line.startswith("statistics L1")).split()
    over_floor, reads, memory = row[6], row[7], row[8]  # after the label's two words, step, plain, ratio, middle half
    assert reads.isdigit() and int(reads) > 0, row  # counted on the device path
    assert memory == "-", row  # no device memory to report on the CPU
    floor = next(line for line in lines if line.startswith("floor ")).split()
    assert floor[5] == "1.000x", floor  # the floor over itself
    expected = float(row[4].rstrip("x")) / float(floor[3].rstrip("x"))  # the printed ratios, rounded to 3 places
    assert abs(float(over_floor.rstrip("x")) - expected) < 0.01, (row, floor)
    assert any(line.startswith("statistics L1: ") and "the floor" in line for line in lines)
    assert (tmp_path / "statistics_L1" / "dump" / "step0" / "rank" / "dump.json").exists()


def test_the_device_path_benchmark_prints_its_floor_and_the_time_in_its_reductions(tmp_path):
    """--device-path: the twin on the device path, the device floor (the three reductions of each dumped tensor,
    nothing recorded), and the dumped step's time split into the reductions and the rest."""
    bench = Path(__file__).parents[2] / "bench" / "bench_dump.py"
    command = [sys.executable, str(bench), "--steps", "1", "--only", "statistics L1", "--device-path",
               "--out", str(tmp_path)]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key != "MSPROBE_FORCE_DEVICE_PATH"}
    lines = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout.splitlines()
    labels = [line.split("  ")[0].strip() for line in lines if line[:1].isalpha() and "x " in line]
    assert labels[:5] == ["none", "floor", "device floor", "statistics L1", "statistics L1 (device path)"], lines
    cpu = next(line for line in lines if line.startswith("statistics L1 ")).split()
    twin = next(line for line in lines if line.startswith("statistics L1 (device path)")).split()
    assert cpu[7] == "0" and int(twin[9]) > 0, (cpu, twin)  # host reads: none on the CPU's path
    split = next(line for line in lines if "its reductions" in line)
    found = re.search(r"the device path ([0-9.]+) ms \(its reductions ([0-9.]+) ms\)", split)
    assert found and 0 < float(found[2]), split  # the reductions ran, and were timed while the step dumped
    assert any("the device floor" in line and "its floor" in line for line in lines)


def test_the_floor_reads_each_distinct_dumped_tensor_once(tmp_path):
    """The floor's list of tensors, against a dump.json whose tensors are counted by hand: an output that is the
    next call's input (same summary, same direction) is one tensor; a gradient equal to it is another."""
    bench = _bench_module()
    summary = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": 1.0, "Min": 0.0,
               "Mean": 0.5, "Norm": 2.0}  # fmt: skip
    other = {**summary, "dtype": "torch.bfloat16", "shape": [4], "Max": 3.0}
    data = {
        "Torch.add.0.forward": {"input_args": [summary, 1.0], "input_kwargs": {}, "output": [other]},
        "Torch.mul.0.forward": {"input_args": [other, other], "input_kwargs": {"out": None}, "output": [summary]},
        "Torch.add.0.backward": {"input": [other], "output": [summary, None]},
    }
    found = [summary for entry in data.values() for summary in bench._summaries(entry)]
    assert len(found) == 7
    assert bench.distinct_tensors(data) == [("float32", 6), ("bfloat16", 4), ("bfloat16", 4), ("float32", 6)]


def _bench_module():
    path = Path(__file__).parents[2] / "bench" / "bench_dump.py"
    spec = importlib.util.spec_from_file_location("bench_dump_under_test", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_large_workload_leaves_the_tensor_dump_out_unless_named(capsys):
    """One step of the large transformer writes about 38 GB of tensors: `--device cuda` must run unchanged on one
    GPU machine, so its defaults leave the tensor task out, and say so."""
    bench = _bench_module()
    labels = [label for label, _ in bench.CONFIGS]
    assert "tensor L1" in labels
    on_large = [label for label, _ in bench.configs_for("large", bench.CONFIGS, named=False)]
    assert on_large == [label for label in labels if label != "tensor L1"]
    assert "tensor L1 left out on the large workload" in capsys.readouterr().out
    assert bench.configs_for("large", bench.CONFIGS, named=True) == bench.CONFIGS  # --only named it
    assert bench.configs_for("W", bench.CONFIGS, named=False) == bench.CONFIGS


def _run(tmp_path, text, *args, batch=None, forced="1", check=True):
    """``text`` run as a script in a process of its own, the device path forced (or not, ``forced="0"``)."""
    script = tmp_path / "script.py"
    script.write_text(text)
    env = {**os.environ, "MSPROBE_FORCE_DEVICE_PATH": forced}
    if batch is not None:
        env["MSPROBE_STATS_BATCH"] = str(batch)
    command = [sys.executable, str(script), *map(str, args)]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=check)


def _json_lines(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _tensor_summaries(data):
    for entry in data.values():
        yield from (summary for summary in value_summaries(entry) if "dtype" in summary)


KILLED = textwrap.dedent("""
    import json, os, signal, sys, torch
    from msprobe.pytorch import PrecisionDebugger
    open(sys.argv[1] + ".json", "w").write(json.dumps({"task": "statistics", "level": "L1", "dump_path": sys.argv[1]}))
    debugger = PrecisionDebugger(config_path=sys.argv[1] + ".json")
    debugger.start()
    x = torch.randn(8, 8)
    for i in range(50):
        x = torch.tanh(x @ torch.randn(8, 8))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_killed_process_keeps_the_entries_up_to_the_last_batch(tmp_path):
    result = _run(tmp_path, KILLED, tmp_path / "dump", batch=16, check=False)
    assert result.returncode == -signal.SIGKILL
    dump = read_dump(tmp_path / "dump" / "step0" / "rank")
    assert dump.recovered
    calls = 100  # 50 each of matmul and tanh (torch.randn is not in the API list)
    kept = len(dump.data)
    assert {name.rsplit(".", 2)[0] for name in dump.data} == {"Tensor.__matmul__", "Torch.tanh"}
    assert calls - 16 <= kept < calls  # the last batch, never read back, is what is lost
    for summary in _tensor_summaries(dump.data):
        assert isinstance(summary["Max"], float) and isinstance(summary["Norm"], float)


KILLED_AFTER_BACKWARD = textwrap.dedent("""
    import json, os, signal, sys, torch
    from msprobe.pytorch import PrecisionDebugger
    open(sys.argv[1] + ".json", "w").write(json.dumps({"task": "statistics", "level": "L1", "dump_path": sys.argv[1]}))
    debugger = PrecisionDebugger(config_path=sys.argv[1] + ".json")
    weight = torch.randn(8, 8, requires_grad=True)
    debugger.start()
    x = torch.randn(4, 8)
    for i in range(5):
        x = torch.tanh(x @ weight)
    x.sum().backward()
    os.kill(os.getpid(), signal.SIGKILL)  # before stop(): only the end of the backward pass has read the batch
""")


def test_the_end_of_a_backward_pass_reads_the_batch_back(tmp_path):
    """A batch far from full is read back, and journaled, when backward() returns: a process killed after it
    keeps every forward and backward entry of the step."""
    result = _run(tmp_path, KILLED_AFTER_BACKWARD, tmp_path / "dump", batch=100000, check=False)
    assert result.returncode == -signal.SIGKILL, result.stderr
    dump = read_dump(tmp_path / "dump" / "step0" / "rank")
    assert dump.recovered
    names = set(dump.data)
    for index in range(5):  # matmul and tanh, five of each, forward and backward (sum's entries are kept too)
        for api in ("Tensor.__matmul__", "Torch.tanh"):
            assert {f"{api}.{index}.forward", f"{api}.{index}.backward"} <= names, sorted(names)
    summaries = list(_tensor_summaries(dump.data))
    assert len(summaries) > 40
    for summary in summaries:
        assert isinstance(summary["Max"], float) and isinstance(summary["Norm"], float)


PLACE = (torch.device("cpu"), torch.float32)  # a buffer's key: device and dtype


def test_a_backward_pass_queues_one_read_back_and_the_buffer_is_reused():
    batch = DeviceBatch(limit=1000)
    ended = []
    batch.after_backward = lambda: ended.append(batch.waiting()) or batch.read_back()
    weight = torch.randn(6, 6, requires_grad=True)
    out = (torch.randn(3, 6) @ weight).tanh()
    out.register_hook(lambda grad: batch.measure(grad) and None)  # measured inside the backward pass
    weight.register_hook(lambda grad: batch.measure(grad) and None)
    buffer = None
    for _ in range(2):
        batch.measure(out)  # outside backward: nothing queued for it
        out.sum().backward(retain_graph=True)
        assert ended[-1] == 3 and batch.waiting() == 0  # read back once, with all three
        assert batch.buffers[PLACE].shape == (1000, 4)  # the rows are allocated once
        buffer = buffer if buffer is not None else batch.buffers[PLACE]
        assert batch.buffers[PLACE] is buffer
    assert len(ended) == 2 and batch.take_reads() == 2
    batch.measure(out)
    assert batch.waiting() == 1 and len(ended) == 2  # no backward pass, no read


MD5_RUN = """
import json, sys, torch
from msprobe.pytorch import PrecisionDebugger
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
open(sys.argv[1] + ".json", "w").write(json.dumps({"task": "statistics", "level": "mix", "dump_path": sys.argv[1],
                                                   "statistics": {"summary_mode": sys.argv[2]}}))
debugger = PrecisionDebugger(config_path=sys.argv[1] + ".json", model=model)
debugger.start()
model(torch.randn(8, 16, generator=torch.Generator().manual_seed(1))).square().mean().backward()
debugger.stop()
debugger.step()
print(json.dumps({"reads": debugger._hooks.host_reads}))
"""


@pytest.mark.parametrize("mode", ["md5", "xor"])
def test_checksums_on_the_device_path_are_read_once_per_batch(tmp_path, mode):
    """CRC-32 and xor depend on the bytes only: the device path's must equal the direct CPU path's, read in
    batches (md5: the bytes moved per batch; xor: one word per tensor, folded on the device)."""
    found = {}
    for name, forced in (("direct", "0"), ("device", "1")):
        result = _run(tmp_path, MD5_RUN, tmp_path / name, mode, batch=8, forced=forced)
        reads = json.loads(result.stdout.strip().splitlines()[-1])["reads"]
        data = read_dump(tmp_path / name / "step0" / "rank").data
        found[name] = (reads, {n: [s.get("md5") for s in value_summaries(e)] for n, e in data.items()})
    assert found["device"][1] == found["direct"][1]  # every checksum, entry by entry
    measured = sum(len([m for m in md5s if m]) for md5s in found["device"][1].values())
    assert measured > 20 and found["direct"][0] == 0
    assert found["device"][0] <= 2 * math.ceil(measured / 8) + 8  # stats and bytes per batch, + module and step ends


def _numpy_xor(tensor):
    """26.x's xor, derived with numpy alone: the bytes as little-endian uint64 words, zero-padded, XORed."""
    raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()  # the bytes as they lie in memory
    raw = np.concatenate([raw, np.zeros(-raw.size % 8, np.uint8)])
    return f"{int(np.bitwise_xor.reduce(raw.view('<u8'))):016x}"


def test_xor_folded_on_the_device_equals_numpy():
    generator = torch.Generator().manual_seed(3)
    samples = [torch.randn(n, generator=generator) for n in (1, 2, 3, 7, 1000, 4097)]
    samples += [torch.randn(3, generator=generator).half(), torch.randn(5, generator=generator).bfloat16(),
                torch.randint(-9, 9, (11,), generator=generator, dtype=torch.int8),
                torch.randn(6, 9, generator=generator).double().t(),
                torch.tensor([-0.0, math.nan, math.inf])]  # fmt: skip
    batch = DeviceBatch(limit=4)
    items = [batch.xor(sample) for sample in samples]
    assert [item.resolve() for item in items] == [_numpy_xor(sample) for sample in samples]
    assert batch.take_reads() == math.ceil(len(samples) / 4)  # one read per batch, none per tensor


FLIGHT = textwrap.dedent("""
    import json, logging, sys, torch
    from msprobe.pytorch import PrecisionDebugger
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    out, written_after = sys.argv[1], sys.argv[2] == "written-after"
    torch.manual_seed(0)
    fc = torch.nn.Linear(4, 4)
    open(out + ".json", "w").write(json.dumps({"task": "flight_recorder", "level": "L1", "dump_path": out,
                                               "flight_recorder": {"window": 3}}))
    debugger = PrecisionDebugger(config_path=out + ".json")
    for step in range(6):
        debugger.start()
        scale = torch.tensor(0.0 if step == 4 else 1.0 / (step + 1))
        h = fc(torch.randn(2, 4)).abs() * scale
        loss = torch.log(h).sum()  # log(0) = -inf at step 4: the first inf, made by Torch.log from finite inputs
        if written_after:
            with torch.no_grad():
                h.add_(1.0)  # the call's input written in place before its batch is read back
        else:
            loss.backward()
        debugger.stop()
        debugger.step()
        print(json.dumps({"step": step, "reads": debugger._hooks.host_reads}))
""")


@pytest.mark.parametrize("case", ["plain", "written-after"])
def test_the_flight_recorder_waits_for_the_batch_to_find_the_first_nan(tmp_path, case):
    """Each call's outputs are looked at for inf or nan when their batch is read back, not with one read per
    call; the trigger, the window and the saved inputs are those the model's arithmetic gives."""
    dump = tmp_path / "dump"
    result = _run(tmp_path, FLIGHT, dump, case, batch=64)
    report = json.loads((dump / "flight_recorder_report.json").read_text())
    first = report["first_nonfinite"]
    assert (first["api"], first["step"], report["last_finite_step"]) == ("Torch.log.0.forward", 4, 3)
    assert [trigger["steps_written"] for trigger in report["triggers"]] == [[2, 3, 4]]
    assert any("torch.log" in frame for frame in first["stack"])
    (saved,) = (dump / "step4" / "rank" / "dump_tensor_data").iterdir()
    assert saved.name == "Torch.log.0.forward.input.0.pt"
    warned = "the inputs of Torch.log.0.forward were written in place after the call" in result.stderr
    if case == "plain":  # the input as the call saw it: |fc(x)| * 0
        assert torch.equal(torch.load(saved, weights_only=True), torch.zeros(2, 4)) and not warned
    else:  # as it was at the read-back, 0 + 1, and the user is told
        assert torch.equal(torch.load(saved, weights_only=True), torch.ones(2, 4)) and warned
    steps = _json_lines(result.stdout)
    data = read_dump(dump / "step3" / "rank").data
    measured = sum(1 for _ in _tensor_summaries(data))
    assert measured > 10 and "Torch.log.0.forward" in data
    for step in steps[:4]:  # all finite: one read per batch and the ends of backward and of the step
        assert 0 < step["reads"] <= math.ceil(measured / 64) + 2, (steps, measured)


OVERFLOW = textwrap.dedent("""
    import json, sys, torch
    from msprobe.pytorch import PrecisionDebugger
    out = sys.argv[1]
    open(out + ".json", "w").write(json.dumps({"task": "overflow_check", "level": "L1", "dump_path": out}))
    debugger = PrecisionDebugger(config_path=out + ".json")
    weight = torch.randn(8, 8)
    for step in range(2):
        debugger.start()
        x = torch.randn(4, 8)
        for i in range(5):
            x = torch.tanh(x @ weight)
        if step == 1:
            torch.exp(x * 1000.0)  # |x| up to 1: e^1000 is inf in float32, from finite inputs
        debugger.stop()
        debugger.step()
        print(json.dumps({"reads": debugger._hooks.host_reads}))
""")


def test_the_overflow_checks_reads_on_a_device_wait_for_the_batch(tmp_path):
    """On a device the overflow check screens each output by its sum, which waits in the batch: a step with no
    overflow costs the batch's one read, and only a call whose sum is not finite is looked into."""
    reads = [step["reads"] for step in _json_lines(_run(tmp_path, OVERFLOW, tmp_path / "dump").stdout)]
    # step 0: ten float outputs (five matmuls, five tanhs), their sums read together at step end (1)
    # step 1: those, the multiplication's and exp's sums (1); exp's sum is inf, so it is looked into: its sum (1)
    # and min and max (1), its input's sum (1); kept, its statistics are read at step end (1) with its output's
    # *_except_inf_nan pair (1)
    assert reads == [1, 1 + 3 + 2]
    assert list(read_dump(tmp_path / "dump" / "step1" / "rank").data) == ["Torch.exp.0.forward"]


def test_the_c_path_writes_a_device_tensors_summary_with_a_token_filled_at_read_back(monkeypatch):
    """The per-call path's summary of a device tensor (fast_path.waiting_summaries): written before the read-back
    with one token for the statistics, cached while the tensor is unchanged (measured once), measured again
    after an in-place write; filled in, it is the summary the Python recorder writes, key for key."""
    from msprobe.core.dump.pending_values import PLACEHOLDERS, TOKEN, WaitingText
    from msprobe.core.dump.writer import _final_text, encode_json

    monkeypatch.setattr(device_batch, "FORCE_DEVICE_PATH", True)
    summarizer = tensors.TensorSummarizer("statistics", "statistics")
    texts = summarizer.waiting_texts
    assert texts is not None
    weight = torch.nn.Parameter(torch.tensor([[1.0, -3.0], [2.5, 0.5]]))
    with_nan = torch.tensor([1.0, math.nan, -math.inf, 4.0], dtype=torch.bfloat16)
    written = [texts.text(weight), texts.text(with_nan), texts.text(weight)]
    assert all(len(TOKEN.findall(text)) == 1 for text in written)
    assert written[0].startswith('{"type":"torch.Tensor","dtype":"torch.float32","shape":[2,2],')
    assert len(summarizer.batch.pending) == 2  # the weight measured once
    assert summarizer.batch.reads == 0
    filled = [_final_text(WaitingText(text)) for text in written]
    assert summarizer.batch.reads == 2  # one read of the batch, one for the nan tensor's finite extremes
    python_way = [summarizer._summary(tensor, "x") for tensor in (weight, with_nan, weight)]
    summarizer.batch.read_back()  # the Python recorder encodes its entries once they are read back
    assert filled == [encode_json(summary) for summary in python_way]
    assert json.loads(filled[0]) == {
        "type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 2], "Max": 2.5, "Min": -3.0, "Mean": 0.25,
        "Norm": pytest.approx(math.sqrt(16.5)), "requires_grad": True,
    }  # fmt: skip
    bf16 = json.loads(filled[1])
    assert list(bf16)[-3:] == ["requires_grad", "Max_except_inf_nan", "Min_except_inf_nan"]
    assert (bf16["Max_except_inf_nan"], bf16["Min_except_inf_nan"]) == (4.0, 1.0)
    assert texts.text(weight) == filled[0]  # read back already: no token
    with torch.no_grad():
        weight.mul_(2)
    again = texts.text(weight)
    assert TOKEN.search(again) and len(summarizer.batch.pending) == 1  # changed: measured anew
    assert json.loads(_final_text(WaitingText(again)))["Max"] == 5.0
    assert texts.text(torch.tensor([True, False])) is None  # bool (Max: any, Min: all): the general way
    assert len(PLACEHOLDERS) == 0

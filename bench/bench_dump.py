"""Step time of workload W with each dump configuration, as a ratio to the untouched step.

    python bench/bench_dump.py [--steps 16] [--out /tmp/msprobe_bench] [--only "statistics L1,statistics mix"]
    python bench/bench_dump.py --device cuda      # W and the large transformer on one GPU (npu: Ascend)

All configurations are measured in one run, one thread, after a warm-up;
each against a plain twin of the workload stepped in turn with it.
Targets on the CPU (docs/performance.md; TARGETS
below): statistics L1 <= 1.25x, mix <= 1.4x, md5 <= 1.5x, tensor L1 within
1.5x of writing the same bytes with numpy.save, overflow_check L1 <= 1.1x,
grad_probe L1 <= 1.2x, free benchmark (improve_precision, forward, all
APIs) <= 2.5x, flight_recorder L1 at most statistics L1's ratio (and its
window's memory at most window x one step's dump.json, printed after the
table). The columns "host reads/step" and "peak device mem" are counted on
the device path (``MSPROBE_FORCE_DEVICE_PATH=1`` sends CPU tensors through
it); tests/torch_backend/test_device_batch.py runs this with --device cpu.

The "floor" row is the least any statistics dump must do: the plain step,
then one reduction over a tensor of each distinct shape and dtype that
statistics L1 dumps (listed from one step of its dump.json; an input equal
in summary to an earlier output is the same tensor and is read once),
results discarded, nothing recorded. The column "to floor" is each
configuration's ratio over the floor's; goals: statistics L1 <= 1.15x of
the floor, mix <= 1.3x. The floor depends on the machine's memory speed
as the statistics do, so it reads the same on every machine where the
plain step's ratio does not.

With --device-path, a "device floor" row does the same with the three
reductions the device path makes of each tensor (aminmax, mean and
vector_norm, written into a row as the batch does) instead of one sum: the
least the device path must do, whatever its bookkeeping costs.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from in_turn import (
    Timing,
    add_only_option,
    chosen,
    dumped_step,
    numpy_twin,
    print_ratios,
    report_tensor_dump,
    time_in_turn,
)
from workload import make_workload, synchronize

from msprobe.core.recording.live_diff import value_summaries
from msprobe.pytorch import PrecisionDebugger

FLOOR = {"task": "floor"}  # not a task: the step with each dumped tensor read once (see the module's docstring)
# --device-path: the step with the device path's three reductions of each dumped tensor, nothing recorded
DEVICE_FLOOR = {"task": "floor", "reductions": "device"}
CONFIGS = [
    ("none", None),
    ("floor", FLOOR),
    ("statistics L1", {"task": "statistics", "level": "L1"}),
    ("statistics mix", {"task": "statistics", "level": "mix"}),
    ("md5 L1", {"task": "statistics", "level": "L1", "statistics": {"summary_mode": "md5"}}),
    ("tensor L1", {"task": "tensor", "level": "L1"}),
    ("structure mix", {"task": "structure", "level": "mix"}),
    ("overflow_check L1", {"task": "overflow_check", "level": "L1", "overflow_check": {"overflow_nums": -1}}),
    ("grad_probe L1", {"task": "grad_probe", "grad_probe": {"grad_level": "L1"}}),
    ("free_benchmark", {"task": "free_benchmark", "level": "L1", "free_benchmark": {"pert_mode": "improve_precision"}}),
    ("flight_recorder L1", {"task": "flight_recorder", "level": "L1", "flight_recorder": {"window": 5}}),
]
TARGETS = {  # on the CPU, the tightened ones (before: 1.5, 1.7, 2.0, 1.3, 5.0)
    "statistics L1": 1.25,
    "statistics mix": 1.4,
    "md5 L1": 1.5,
    "overflow_check L1": 1.1,
    "grad_probe L1": 1.2,
    "free_benchmark": 2.5,
}  # flight_recorder L1: at most statistics L1's ratio in the same run
FLOOR_TARGETS = {"statistics L1": 1.15, "statistics mix": 1.3}  # ratio over the floor's ratio
# --device-path: these run again with CPU tensors measured as on a device (FORCE_DEVICE_PATH), each twin's ratio
# over its CPU configuration's in the same run; goal <= 1.1
DEVICE_PATH_TWINS = ("statistics L1", "statistics mix")
DEVICE_PATH_SUFFIX = " (device path)"
DEVICE_PATH_GOAL = 1.1
# what the large transformer's defaults leave out: one step of it writes 38 GB of tensors (counted from the
# shapes in its statistics dump), 17 steps with the numpy.save yardstick's copies would fill most disks, and the
# yardstick holds a step's arrays in host memory; name it in --only to run it all the same
LEFT_OUT_ON_LARGE = {"tensor L1": "one step writes about 38 GB of tensors"}
FLIGHT_MEMORY: dict[str, int] = {}  # what the flight recorder's window held at the end of its run
HOST_READS: dict[str, str] = {}  # the device path's reads back to the host in the last step, by configuration
PEAK_MEMORY: dict[str, str] = {}  # peak device memory, by configuration (devices only)
REDUCTIONS: dict[str, float] = {}  # the device path's reductions in a dumped step, seconds a step, by configuration


def _saved_arrays(tensor_dir: Path) -> list:
    return [torch.load(path, weights_only=True).numpy() for path in sorted(tensor_dir.glob("*.pt"))]


def time_config(
    config: dict | None, steps: int, out: Path, device: str = "cpu", size: str = "W", dtype: str = "fp32"
) -> Timing:
    """Median step time with this configuration and of a plain twin, one step of each in turn.

    Alternating keeps drifts in machine speed out of the ratio. The tensor
    task also times its yardstick in turn: a plain step plus numpy.save of
    the arrays the dump wrote.
    """
    from msprobe.pytorch.dump import device_batch

    model, train_step = make_workload(device=device, size=size, dtype=dtype)
    _plain_model, plain_step = make_workload(device=device, size=size, dtype=dtype)
    forced = device_batch.FORCE_DEVICE_PATH
    if config is not None and config.get("device_path"):  # read when the debugger is made, and for this run alone
        config = {key: value for key, value in config.items() if key != "device_path"}
        device_batch.FORCE_DEVICE_PATH = True
    try:
        return _time_debugger(config, steps, out, device, size, dtype, model, train_step, plain_step)
    finally:
        device_batch.FORCE_DEVICE_PATH = forced


def _time_debugger(config, steps, out, device, size, dtype, model, train_step, plain_step) -> Timing:
    if config is FLOOR or config is DEVICE_FLOOR:
        reads = device_reductions if config is DEVICE_FLOOR else None
        train_step = floor_step(train_step, dumped_tensors(out / "probe", device, size, dtype), device, reads)
        config = None
    _reset_peak(device)
    debugger = None
    if config is not None:
        import json

        config_file = out / "config.json"
        config_file.write_text(json.dumps({**config, "dump_path": str(out / "dump")}))
        debugger = PrecisionDebugger(config_path=str(config_file), model=model)
        if config["task"] == "grad_probe":
            debugger.monitor(model)

    yardstick = None
    if config is not None and config["task"] == "tensor":
        tensor_dir = out / "dump" / "step0" / "rank" / "dump_tensor_data"
        yardstick = numpy_twin(plain_step, lambda: _saved_arrays(tensor_dir), out / "numpy_copy")
    between = os.sync if yardstick is not None else None  # each file-writing step starts with no writeback pending
    result = time_in_turn(plain_step, dumped_step(debugger, train_step), steps, yardstick, between)
    label = out.name
    if debugger is not None and config["task"] == "statistics" and debugger._hooks.summarizer.batch is not None:
        REDUCTIONS[label] = time_in_reductions(dumped_step(debugger, train_step))
    reads = getattr(getattr(debugger, "_hooks", None), "host_reads", None)
    HOST_READS[label] = "-" if reads is None else str(reads)
    peak = _peak(device)
    if peak is not None:
        PEAK_MEMORY[label] = f"{peak / 2**20:.0f} MiB"
    if debugger is not None and config["task"] == "flight_recorder":
        flight = debugger._hooks.collector.flight
        FLIGHT_MEMORY.update(window=flight.window.maxlen + 1, bytes=flight.memory())
    if debugger is not None:
        debugger.finish()
    return result


def time_in_reductions(step, steps: int = 3) -> float:
    """Seconds a step spent in the device path's three reductions while it dumped (each call timed, the
    device waited for after it), measured after the timed rounds so the timers do not weigh on them."""
    from msprobe.pytorch.dump import measuring

    names = ("torch_aminmax", "torch_mean", "torch_vector_norm")
    originals = {name: getattr(measuring, name) for name in names}
    spent = [0.0]

    def timed(function):
        def run(data, *args, **kwargs):
            began = time.perf_counter()
            result = function(data, *args, **kwargs)
            synchronize(data.device.type)
            spent[0] += time.perf_counter() - began
            return result

        return run

    try:
        for name, function in originals.items():
            setattr(measuring, name, timed(function))
        for _ in range(steps):
            step()
    finally:
        for name, function in originals.items():
            setattr(measuring, name, function)
    return spent[0] / steps


def dumped_tensors(folder: Path, device: str, size: str, dtype: str) -> list[tuple[str, int]]:
    """(dtype, element count) of each distinct tensor that one step of statistics L1 dumps.

    A summary equal (shape, dtype and statistics) to one seen before in the
    same direction is taken for the same tensor: a call's output is the next
    call's input, read once by a dump that remembers what it measured.
    """
    import json

    model, train_step = make_workload(device=device, size=size, dtype=dtype)
    config_file = folder / "config.json"
    folder.mkdir(parents=True, exist_ok=True)
    config_file.write_text(json.dumps({"task": "statistics", "level": "L1", "dump_path": str(folder / "dump")}))
    debugger = PrecisionDebugger(config_path=str(config_file), model=model)
    dumped_step(debugger, train_step)()
    debugger.finish()
    data = json.loads((folder / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    shutil.rmtree(folder, ignore_errors=True)
    return distinct_tensors(data)


def distinct_tensors(data: dict) -> list[tuple[str, int]]:
    """(dtype, element count) of each distinct tensor in dump.json's ``data``, in order (see ``dumped_tensors``)."""
    seen: set[tuple] = set()
    tensors = []
    for name, entry in data.items():
        direction = "backward" if name.endswith(".backward") else "forward"
        for summary in _summaries(entry):
            key = (direction, summary["dtype"], tuple(summary["shape"]), *(str(summary.get(k)) for k in STATS))
            if key not in seen:
                seen.add(key)
                tensors.append((summary["dtype"].removeprefix("torch."), math.prod(summary["shape"])))
    return tensors


STATS = ("Max", "Min", "Mean", "Norm")


def _summaries(entry: dict):
    """The tensor summaries in an entry of dump.json, in order."""
    return (summary for summary in value_summaries(entry) if summary.get("type") == "torch.Tensor")


def device_reductions(device: str):
    """What the device path computes of each tensor, as DeviceBatch.measure_stats does (its reductions, written
    into a row of four; float32, or float64 for float64 tensors); the bookkeeping left out."""
    from msprobe.pytorch.dump import device_batch, measuring

    rows = {dtype: torch.empty(4, dtype=dtype, device=device).unbind(0) for dtype in measuring.MEASURED_AS_IS}

    def read(view: torch.Tensor) -> None:
        data = view if view.dtype in rows else view.float()
        device_batch.reduce_into(data, rows[data.dtype])

    return read


def floor_step(train_step, tensors: list[tuple[str, int]], device: str, reads=None):
    """The step, then one sum over each listed tensor's worth of elements (views of one buffer per dtype, made
    once: the floor times the reading, not the allocating); ``reads(device)``: what to do with each view
    instead of a sum."""
    largest: dict[str, int] = {}
    for dtype, count in tensors:
        largest[dtype] = max(largest.get(dtype, 0), count)
    buffers = {dtype: torch.ones(count, dtype=getattr(torch, dtype), device=device) for dtype, count in largest.items()}
    views = [buffers[dtype][:count] for dtype, count in tensors if count]
    size = sum(view.numel() * view.element_size() for view in views)
    print(f"floor: {len(views)} tensors, {size / 1e6:.1f} MB a step")
    read = reads(device) if reads is not None else torch.sum

    def step() -> None:
        train_step()
        for view in views:
            read(view)
        synchronize(device)

    return step


def _reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    elif device.startswith("npu"):
        torch.npu.reset_peak_memory_stats()


def _peak(device: str) -> int | None:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated()
    if device.startswith("npu"):
        return torch.npu.max_memory_allocated()
    return None


def _device(name: str) -> str:
    """The device to run on; torch_npu is imported only when asked for."""
    if name.startswith("npu"):
        import torch_npu  # noqa: F401 - registers torch.npu

        if not torch.npu.is_available():
            raise SystemExit("--device npu: no Ascend device is available")
    elif name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    return name


def report_floor(timings: dict[str, Timing]) -> None:
    """Each statistics configuration's ratio over the floor's, against its goal."""
    floor = timings["floor"].ratio
    for label, goal in FLOOR_TARGETS.items():
        if label in timings:
            over = timings[label].ratio / floor
            print(f"{label}: {over:.3f}x the floor ({floor:.3f}x the plain step); goal <= {goal}x  "
                  f"{'met' if over <= goal else 'NOT met'}")  # fmt: skip


def report_flight_memory(out: Path, timings: dict[str, Timing]) -> None:
    """The window's memory against the target: window x one step's dump.json (statistics L1's, same run)."""
    step_file = out / "statistics_L1" / "dump" / "step0" / "rank" / "dump.json"
    one_step = step_file.stat().st_size if step_file.exists() else None
    held = FLIGHT_MEMORY["bytes"]
    line = f"flight recorder: {FLIGHT_MEMORY['window'] - 1} past steps held in {held / 1e6:.2f} MB"
    if one_step:
        bound = FLIGHT_MEMORY["window"] * one_step
        line += f"; target window x dump.json = {bound / 1e6:.2f} MB ({held / bound:.2f} of it)"
    else:
        line += " (run 'statistics L1' too for the target)"
    if "statistics L1" in timings and "flight_recorder L1" in timings:
        ratio, reference = timings["flight_recorder L1"].ratio, timings["statistics L1"].ratio
        line += f"; step {ratio:.3f}x against statistics L1's {reference:.3f}x"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--steps", type=int, default=16
    )  # medians of 16 alternating pairs: runs here differ by 0.1x at 6
    parser.add_argument("--out", type=Path, default=Path("/tmp/msprobe_bench"))
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or npu")
    parser.add_argument(
        "--sizes",
        default=None,
        help="workloads, comma-separated: W, large, gpt2 (default: W on cpu, W,large on a device)",
    )
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="the workload's parameters")
    parser.add_argument(
        "--device-path",
        action="store_true",
        help="also run statistics L1 and mix with CPU tensors measured as on a device, against the CPU path",
    )
    add_only_option(parser)
    args = parser.parse_args()
    configs = with_floor(chosen(parser, args.only, CONFIGS))
    if args.device_path:
        configs = with_device_path_twins(configs)
    device = _device(args.device)
    sizes = (args.sizes or ("W" if device == "cpu" else "W,large")).split(",")
    if device == "cpu":
        torch.set_num_threads(1)
    for size in sizes:
        if len(sizes) > 1 or device != "cpu":
            print(f"workload {size} ({args.dtype}) on {device}")
        run_configs(configs_for(size, configs, bool(args.only)), args.steps,
                    args.out / size if len(sizes) > 1 else args.out, device, size, args.dtype)  # fmt: skip


def with_floor(configs: list) -> list:
    """The floor runs whenever a statistics configuration does: their ratios over it are the point."""
    labels = [label for label, _ in configs]
    if "floor" in labels or not any(label in FLOOR_TARGETS for label in labels):
        return configs
    return [*configs[:1], ("floor", FLOOR), *configs[1:]]


def with_device_path_twins(configs: list) -> list:
    """Each configuration of DEVICE_PATH_TWINS followed by its twin on the device path, and the device floor
    after the floor."""
    twinned = []
    for label, config in configs:
        twinned.append((label, config))
        if config is FLOOR:
            twinned.append(("device floor", DEVICE_FLOOR))
        if label in DEVICE_PATH_TWINS:
            twinned.append((label + DEVICE_PATH_SUFFIX, {**config, "device_path": True}))
    return twinned


def report_device_path(timings: dict[str, Timing]) -> None:
    """Each device-path twin's ratio over its CPU configuration's, measured in this run, against the goal."""
    for label in DEVICE_PATH_TWINS:
        twin = timings.get(label + DEVICE_PATH_SUFFIX)
        if twin is not None and label in timings:
            over = twin.ratio / timings[label].ratio
            verdict = "met" if over <= DEVICE_PATH_GOAL else "NOT met"
            print(f"{label}: the device path {twin.ratio:.3f}x, the CPU path {timings[label].ratio:.3f}x: "
                  f"{over:.3f} times; goal <= {DEVICE_PATH_GOAL}  {verdict}")  # fmt: skip
            floor = timings.get("device floor")
            if floor is not None:  # the reductions alone, one distinct tensor after another
                print(f"{label}: the device floor {floor.ratio:.3f}x, {floor.ratio / timings[label].ratio:.3f} "
                      f"times the CPU path; the device path {twin.ratio / floor.ratio:.3f}x its floor")  # fmt: skip
            spent = REDUCTIONS.get(label + DEVICE_PATH_SUFFIX)
            if spent is not None:  # where the device path's time goes, against what the goal allows it
                cpu, allowed = timings[label], timings[label].ratio * DEVICE_PATH_GOAL - 1
                print(f"{label}: over the plain step, the device path {1e3 * (twin.tool - twin.plain):.1f} ms "
                      f"(its reductions {1e3 * spent:.1f} ms), the CPU path {1e3 * (cpu.tool - cpu.plain):.1f} "
                      f"ms; the goal allows the device path {1e3 * allowed * twin.plain:.1f} ms")  # fmt: skip


def configs_for(size: str, configs: list, named: bool) -> list:
    """The configurations to run on workload ``size``: on the large one, those that need far more disk than a
    benchmark should take are left out (with a line saying so) unless ``--only`` named them."""
    if size == "W" or named:
        return configs
    for label, _config in configs:
        if label in LEFT_OUT_ON_LARGE:
            print(f"{label} left out on the {size} workload: {LEFT_OUT_ON_LARGE[label]} (name it in --only to run it)")
    return [(label, config) for label, config in configs if label not in LEFT_OUT_ON_LARGE]


def run_configs(configs: list, steps: int, out: Path, device: str, size: str, dtype: str = "fp32") -> None:
    timings: dict[str, Timing] = {}
    HOST_READS.clear()
    PEAK_MEMORY.clear()
    REDUCTIONS.clear()
    for label, config in configs:
        folder = out / label.replace(" ", "_").replace("(", "").replace(")", "")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        timings[label] = time_config(config, steps, folder, device, size, dtype)
        HOST_READS[label] = HOST_READS.pop(folder.name, "-")
        if folder.name in REDUCTIONS:
            REDUCTIONS[label] = REDUCTIONS.pop(folder.name)
        if folder.name in PEAK_MEMORY:
            PEAK_MEMORY[label] = PEAK_MEMORY.pop(folder.name)
        os.sync()  # the tensor dump's ~1 GB of dirty pages would otherwise be written back during the next runs
    targets = dict(TARGETS)
    if "statistics L1" in timings:
        targets["flight_recorder L1"] = round(timings["statistics L1"].ratio, 3)
    columns = {"host reads/step": HOST_READS, "peak device mem": PEAK_MEMORY}  # "-" on the CPU
    if "floor" in timings:
        floor = timings["floor"].ratio
        columns = {"to floor": {label: f"{t.ratio / floor:.3f}x" for label, t in timings.items() if label != "none"},
                   **columns}  # fmt: skip
    print_ratios(timings, targets, columns)
    if "floor" in timings:
        report_floor(timings)
    report_device_path(timings)
    if FLIGHT_MEMORY:
        report_flight_memory(out, timings)
    if "tensor L1" in timings:
        report_tensor_dump(timings["tensor L1"], out / "tensor_L1" / "numpy_copy")


if __name__ == "__main__":
    main()

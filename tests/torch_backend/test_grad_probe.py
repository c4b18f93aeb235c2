"""Task grad_probe: per-step gradient summaries, direction bits, and comparing two runs."""

import csv
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.errors import UsageError
from msprobe.core.grad_probe import GradComparator, interval_names, wait_for_writers
from msprobe.pytorch import PrecisionDebugger


def train(tmp_path, level="L1", diverge_from=None, steps=6, **section):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    config = {"task": "grad_probe", "dump_path": str(tmp_path), "grad_probe": {"grad_level": level, **section}}
    (tmp_path.parent / f"{tmp_path.name}.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path.parent / f"{tmp_path.name}.json"))
    debugger.grad_probe(model)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        debugger.start()
        x = torch.randn(32, 8, generator=generator)
        y = torch.randn(32, 2, generator=generator)
        if diverge_from is not None and step >= diverge_from:
            y = -y  # a different objective from here on
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
    wait_for_writers()  # the last step's direction files are written while training would go on
    train.last_reads = debugger._hooks.host_reads
    return model


def test_summary_files_per_level(tmp_path):
    train(tmp_path / "l2", level="L2", bounds=[-0.01, 0, 0.01])
    with open(tmp_path / "l2" / "rank0" / "grad_summary_0.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["Param_name", *interval_names([-0.01, 0, 0.01]), "=0", "Max", "Min", "Norm", "Shape"]
    assert [row["Param_name"] for row in rows] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    ratios = [float(rows[0][name]) for name in interval_names([-0.01, 0, 0.01])]
    assert sum(ratios) == pytest.approx(1.0)
    assert (tmp_path / "l2" / "rank0" / "step5" / "0.weight.npy").exists()
    train(tmp_path / "l0", level="L0", param_list=["2.weight"])
    with open(tmp_path / "l0" / "rank0" / "grad_summary_0.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["Param_name"] for row in rows] == ["2.weight"] and len(rows[0]["MD5"]) == 32
    assert not (tmp_path / "l0" / "rank0" / "step0").exists()  # L0 keeps no direction data


def test_values_match_the_gradients(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    (tmp_path / "c.json").write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path / "d")}))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.monitor(model)  # the reference's spelling of grad_probe(model), which its scripts call
    model(torch.ones(2, 4)).sum().backward()
    grad = model.weight.grad.clone()
    optimizer.step()
    debugger.step()
    wait_for_writers()  # the step's files are written in the background
    with open(tmp_path / "d" / "rank0" / "grad_summary_0.csv") as handle:
        row = next(csv.DictReader(handle))
    assert float(row["Max"]) == pytest.approx(grad.max().item()) and float(row["Norm"]) == pytest.approx(
        grad.norm().item()
    )
    packed = np.load(tmp_path / "d" / "rank0" / "step0" / "weight.npy")
    assert np.array_equal(np.unpackbits(packed, count=grad.numel()).astype(bool), (grad > 0).numpy().ravel())
    assert packed.nbytes <= (grad.numel() + 7) // 8  # bits, not the gradient itself


def test_two_runs_differing_from_step_3_name_step_3(tmp_path):
    train(tmp_path / "a")
    train(tmp_path / "b", diverge_from=3)
    results = GradComparator.compare_distributed(tmp_path / "a", tmp_path / "b", tmp_path / "out")
    assert results[0].first_bad_step == 3
    assert results[0].overall[:3] == [1.0, 1.0, 1.0]
    assert (tmp_path / "out" / "similarities.csv").exists()
    assert (tmp_path / "out" / "similarities_picture" / "summary_similarities.png").stat().st_size > 1000
    assert (tmp_path / "out" / "similarities_picture" / "2.weight.png").exists()
    result = CliRunner().invoke(
        cli, ["grad_probe", "-i1", str(tmp_path / "a"), "-i2", str(tmp_path / "b"), "-o", str(tmp_path / "cli")]
    )
    assert result.exit_code == 1 and "first bad step 3" in result.output
    same = CliRunner().invoke(
        cli, ["grad_probe", "-i1", str(tmp_path / "a"), "-i2", str(tmp_path / "a"), "-o", str(tmp_path / "same")]
    )
    assert same.exit_code == 0 and "PASS" in same.output


@pytest.mark.parametrize("method", ["grad_probe", "monitor"])
def test_the_grad_probe_needs_the_task_and_a_module(tmp_path, method):
    with pytest.raises(UsageError, match="needs task 'grad_probe'"):
        getattr(PrecisionDebugger(dump_path=str(tmp_path)), method)(torch.nn.Linear(1, 1))
    (tmp_path / "c.json").write_text(json.dumps({"task": "grad_probe", "dump_path": str(tmp_path)}))
    with pytest.raises(UsageError, match="torch.nn.Module"):
        getattr(PrecisionDebugger(config_path=str(tmp_path / "c.json")), method)("model")


def test_comparing_folders_without_data_is_a_clear_error(tmp_path):
    (tmp_path / "x").mkdir()
    result = CliRunner().invoke(cli, ["grad_probe", "-i1", str(tmp_path / "x"), "-i2", str(tmp_path), "-o", "o"])
    assert result.exit_code == 2 and "no rank folder in common" in result.output


def test_a_dump_beside_the_probe_records_none_of_the_probe_s_arithmetic(tmp_path):
    """L2 on the CPU measures with torch (aminmax, bucketize, bincount): a dump running beside it must not see them."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    probe_config = {"task": "grad_probe", "dump_path": str(tmp_path / "g"), "grad_probe": {"grad_level": "L2"}}
    (tmp_path / "g.json").write_text(json.dumps(probe_config))
    probe = PrecisionDebugger(config_path=str(tmp_path / "g.json"))
    probe.monitor(model)
    dump = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"))
    dump.start()
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    dump.stop()
    dump.step()
    probe.step()
    wait_for_writers()  # the step's summary appears once its direction files are written, in the background
    names = json.loads((tmp_path / "d" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert any(name.startswith("Functional.linear.") for name in names)
    for probe_call in ("aminmax", "bucketize", "bincount", "vector_norm", "stack"):
        assert not any(f".{probe_call}." in name for name in names), probe_call
    with open(tmp_path / "g" / "rank0" / "grad_summary_0.csv") as handle:
        assert [row["Param_name"] for row in csv.DictReader(handle)] == ["weight", "bias"]
    probe.finish()
    dump.finish()


def _files(folder, steps=6):
    """The run's files; an earlier run's probe, still hooked to every optimizer, adds empty later steps."""
    found = {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}
    return {path: data for path, data in found.items() if int("".join(filter(str.isdigit, path.parts[1]))) < steps}


@pytest.mark.parametrize("level", ["L0", "L1", "L2"])
def test_device_gradients_are_read_back_once_a_step_with_the_same_files(tmp_path, monkeypatch, level):
    """The device path (forced on CPU tensors) joins every gradient's numbers and sign bits (L0: bytes for
    md5) into one transfer a step, and writes the files the one-read-per-parameter path writes (torch's
    reductions in float32 there too: the C kernels, which sum in float64, are turned off)."""
    from msprobe.core.dump import float_stats
    from msprobe.pytorch import grad_probe

    section = {"bounds": [-0.01, 0, 0.01]} if level == "L2" else {}
    monkeypatch.setattr(float_stats, "AVAILABLE", False)
    train(tmp_path / "direct", level=level, **section)
    monkeypatch.setattr(grad_probe, "FORCE_DEVICE_PATH", True)
    train(tmp_path / "device", level=level, **section)
    assert train.last_reads == 1
    direct, device = _files(tmp_path / "direct"), _files(tmp_path / "device")
    assert len(direct) >= 6 and device == direct


def test_device_sign_bits_and_numbers_match_numpy(monkeypatch):
    """An outside check of the joined read: numpy.packbits of the gradient's signs, and its extremes and norm."""
    from msprobe.pytorch import grad_probe

    generator = torch.Generator().manual_seed(4)
    grads = [torch.randn(shape, generator=generator) for shape in ((13,), (4, 5), (64, 3), ())]
    reads = grad_probe._DeviceReads("L1", None, torch.device("cpu"))
    records = [reads.add(f"p{i}", grad) for i, grad in enumerate(grads)]
    reads.read_back()
    assert reads.reads == 1
    for record, grad in zip(records, grads):
        array = grad.numpy().astype(np.float64)
        assert record.signs.tolist() == np.packbits((array > 0).reshape(-1)).tolist()
        assert (record.maximum, record.minimum) == (array.max(), array.min())
        assert record.norm == pytest.approx(np.linalg.norm(array), rel=1e-6)
    monkeypatch.setattr(grad_probe, "TRANSFER_BYTES", 64)  # a bound on what one transfer joins
    reads = grad_probe._DeviceReads("L0", None, torch.device("cpu"))
    records = [reads.add(f"p{i}", grad) for i, grad in enumerate(grads)]
    reads.read_back()
    assert reads.reads == 4  # the 13-, 20- and 192-value gradients each pass 64 bytes; the 0-d one, at the end
    import hashlib

    assert [r.md5 for r in records] == [hashlib.md5(g.numpy().tobytes()).hexdigest() for g in grads]


def test_a_second_debuggers_grad_probe_takes_over_from_the_first(tmp_path):
    """Each probe hooks every optimizer: left on, the first would go on writing steps of the second's training."""
    train(tmp_path / "first", steps=2)
    train(tmp_path / "second", steps=3)
    first = sorted(path.name for path in (tmp_path / "first" / "rank0").glob("grad_summary_*.csv"))
    second = sorted(path.name for path in (tmp_path / "second" / "rank0").glob("grad_summary_*.csv"))
    assert first == ["grad_summary_0.csv", "grad_summary_1.csv"]
    assert second == ["grad_summary_0.csv", "grad_summary_1.csv", "grad_summary_2.csv"]

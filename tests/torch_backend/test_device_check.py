"""bench/device_check.py, the script `nox -s device` runs on a lent GPU: here with no device (one line, exit 0),
and on the CPU with the device path forced, where injected faults in the statistics and in the xor checksum
must be reported and an untouched run must pass."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from msprobe.pytorch.dump import device_batch, measuring

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "device_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_with_no_device_it_says_so_in_one_line_and_passes(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [done.stdout.strip()]
    assert "no CUDA or NPU device here" in done.stdout
    assert not (tmp_path / "out").exists()


def test_on_the_forced_device_path_every_check_passes_and_the_table_is_written(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--no-bench", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    table = (tmp_path / "device_check.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 20 and all("| ok |" in row for row in rows), table
    dumps = [row for row in rows if row.startswith("| dump")]
    names = [row.split("|")[1].strip() for row in dumps]
    assert names == ["dump, statistics L1", "dump, statistics mix", "dump, md5 L1"]


def test_a_wrong_mean_and_a_wrong_xor_are_reported(monkeypatch):
    check = _load()
    monkeypatch.setenv("MSPROBE_FORCE_DEVICE_PATH", "1")

    def mean_off_by_a_thousandth(data, *args, out=None, **kwargs):
        value = torch.mean(data, *args, **kwargs) * 1.001
        return out.copy_(value) if out is not None else value

    monkeypatch.setattr(measuring, "torch_mean", mean_off_by_a_thousandth)
    results = {name: ok for name, ok, _ in check.check_statistics("cpu")}
    failed = sorted(name for name, ok in results.items() if not ok)
    assert failed == sorted(name for name in results if "inf/nan" not in name)  # nan stays nan: not seen there
    monkeypatch.undo()

    real_xor = device_batch.xor_word
    monkeypatch.setattr(device_batch, "xor_word", lambda tensor: real_xor(tensor) ^ 1)
    results = check.check_checksums("cpu")
    assert [name for name, ok, _ in results if not ok] == [name for name, _, _ in results if name.startswith("xor")]
    assert all(ok for name, ok, _ in results if name.startswith("crc32"))


@pytest.mark.parametrize("dtype", ["bf16"])
def test_the_benchmark_runs_the_workload_in_bfloat16(tmp_path, dtype):
    bench = SCRIPT.parent / "bench_dump.py"
    command = [sys.executable, str(bench), "--device", "cpu", "--sizes", "W", "--dtype", dtype, "--steps", "1",
               "--only", "statistics L1", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("statistics L1"))
    assert row.split()[4].endswith("x")  # the ratio column
    dump = tmp_path / "statistics_L1" / "dump" / "step0" / "rank" / "dump.json"
    assert '"torch.bfloat16"' in dump.read_text()

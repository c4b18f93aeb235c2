"""bench/bench_type_versions.py runs on every Python the core supports, and leaves the class it patched as it was."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_type_versions.py"


def test_the_benchmark_prints_its_ratio():
    run = subprocess.run([sys.executable, str(SCRIPT), "--cycles", "3"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert re.fullmatch(
        r"Python \S+: 3 start/stop cycles; lookups [\d.]+ ms before, [\d.]+ ms after: [\d.]+x\n", run.stdout
    )


def test_its_class_ends_with_its_own_methods():
    spec = importlib.util.spec_from_file_location("bench_type_versions", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _base, tensor_class = bench.make_classes()
    originals = {name: getattr(tensor_class, name) for name in bench.METHODS}
    patcher = bench.make_patcher(tensor_class)
    patcher.install()
    assert all(getattr(tensor_class, name) is not originals[name] for name in bench.METHODS)
    patcher.remove()
    assert all(getattr(tensor_class, name) is originals[name] for name in bench.METHODS)
    assert not any(name in vars(tensor_class) for name in bench.METHODS)  # inherited again, not copied down

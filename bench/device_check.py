"""The checks that need a GPU or an Ascend NPU, in one run that fits a short lease on a lent machine.

    python bench/device_check.py [--device auto|cuda|npu|cpu] [--out FOLDER] [--steps 6]
    nox -s device                                   # the same, in the interpreter that runs nox

With no CUDA or NPU device (``auto``), it prints one line and exits 0. On a device it runs, in order:

1. the device path's statistics (Max, Min, Mean, Norm, and the ``*_except_inf_nan`` pair) of float32,
   bfloat16 and float16 tensors, finite and holding inf and nan, against numpy in float64 on the same values;
2. md5 mode's CRC-32 and xor checksums against zlib and numpy on the same bytes;
3. a dump of one training step of workload W on the device (statistics L1 and mix, md5 L1): every entry
   written, and the host reads per step;
4. ``bench/bench_dump.py --device ...`` on W and on GPT-2 small's shape (fp32 and bf16, batch 8, sequence
   1024): each configuration's step time as a ratio to the plain step;
5. on CUDA, ``bench/bench_compile_check.py --device cuda`` on the small block with Inductor (Triton kernels):
   the injected compiler faults named at their node and kernel, none in the clean compile.

It writes ``device_check.md`` (every check's result and the benchmark tables) into ``--out`` and exits 1 if
a check failed. ``--device cpu`` runs checks 1 to 3 on the CPU with the device path forced and W alone in
the benchmark: how the test suite makes sure the script works before a device is lent.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BENCH_CONFIGS = "statistics L1,statistics mix,md5 L1,overflow_check L1"


def _use_checkout() -> None:
    """Where msprobe is not installed (a lent machine has no network), the checkout's sources serve, with their
    C extensions built in place for this interpreter where a compiler is found (else the Python paths run)."""
    try:
        import msprobe.pytorch  # noqa: F401
    except ImportError:
        sources = [str(ROOT / package / "src") for package in ("msprobe-core", "msprobe-torch", "msprobe-cli")]
        for package in ("msprobe-core", "msprobe-torch"):
            built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=ROOT / package,
                                   capture_output=True, text=True, timeout=600)  # fmt: skip
            print(f"{package}: C extensions {'built' if built.returncode == 0 else 'not built'}", flush=True)
        sys.path[:0] = sources
        os.environ["PYTHONPATH"] = os.pathsep.join([*sources, os.environ.get("PYTHONPATH", "")])


def find_device(asked: str) -> str | None:
    import torch

    if asked in ("auto", "cuda") and torch.cuda.is_available():
        return "cuda"
    if asked in ("auto", "npu"):
        try:
            import torch_npu  # noqa: F401  (only where asked for or looked for; never on CUDA machines first)
        except ImportError:
            pass
        else:
            if torch.npu.is_available():
                return "npu"
    if asked == "cpu":
        os.environ["MSPROBE_FORCE_DEVICE_PATH"] = "1"
        return "cpu"
    return None


def _tensors(device: str) -> dict[str, object]:
    import torch

    generator = torch.Generator().manual_seed(5)
    cases = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        name = str(dtype).replace("torch.", "")
        base = torch.randn(4096, 33, generator=generator) * 3 + 0.25
        cases[f"{name} finite"] = base.to(dtype)
        special = base.clone()
        special[7, 3], special[100, 0], special[5, 5] = float("inf"), float("-inf"), float("nan")
        cases[f"{name} inf/nan"] = special.to(dtype)
        cases[f"{name} large"] = (torch.randn(1 << 22, generator=generator) * 1e3).to(dtype)
    return {name: tensor.to(device) for name, tensor in cases.items()}


def _expected(values) -> dict[str, float]:
    """The statistics in float64, by numpy: the dump's rules (inf/nan as they are; the pair over finite values)."""
    import numpy as np

    array = values.astype(np.float64).ravel()
    with np.errstate(invalid="ignore", over="ignore"):
        found = {"Max": float(array.max()), "Min": float(array.min()), "Mean": float(array.mean()),
                 "Norm": float(np.sqrt(np.sum(array * array)))}  # fmt: skip
    finite = array[np.isfinite(array)]
    if not (math.isfinite(found["Max"]) and math.isfinite(found["Min"])):
        found["Max_except_inf_nan"] = float(finite.max())
        found["Min_except_inf_nan"] = float(finite.min())
    return found


def _close(name: str, got: float, want: float) -> bool:
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return got == want
    # extremes are exact; the mean and norm are float32 reductions of up to 4M values (torch's own CPU kernels
    # are off by up to 1e-4 relative on these tensors)
    tolerance = 0.0 if name.startswith(("Max", "Min")) else 1e-4
    return abs(got - want) <= tolerance * max(abs(want), 1e-30) + (1e-6 if name == "Mean" else 0.0)


def _relative(got: float, want: float) -> float:
    if not (math.isfinite(got) and math.isfinite(want)):
        return 0.0 if got == want or (math.isnan(got) and math.isnan(want)) else math.inf
    return abs(got - want) / max(abs(want), 1e-30)


def check_statistics(device: str) -> list[tuple[str, bool, str]]:
    import torch

    from msprobe.pytorch.dump.device_batch import DeviceBatch
    from msprobe.pytorch.dump.measuring import extremes_except_inf_nan

    results = []
    batch = DeviceBatch()
    tensors = _tensors(device)
    measured = {name: batch.measure(tensor) for name, tensor in tensors.items()}
    batch.read_back()
    for name, tensor in tensors.items():
        want = _expected(tensor.cpu().to(torch.float64).numpy())
        got = {key: value.resolve() for key, value in measured[name].items()}
        if not (math.isfinite(got["Max"]) and math.isfinite(got["Min"])):  # the pair, as the device path adds it
            got.update(extremes_except_inf_nan(tensor.detach().float(), got["Max"], got["Min"]))
        wrong = [key for key, value in want.items() if not _close(key, float(got.get(key, "nan")), value)]
        worst = max(_relative(float(got.get(key, "nan")), want[key]) for key in ("Mean", "Norm"))
        detail = "; ".join(f"{key} {got.get(key)} against {want[key]!r}" for key in wrong)
        results.append((f"statistics, {name}", not wrong, detail or f"Mean, Norm within {worst:.1e} relative"))
    return results


def check_checksums(device: str) -> list[tuple[str, bool, str]]:
    import numpy as np
    import torch

    from msprobe.pytorch.dump.device_batch import DeviceBatch

    results = []
    batch = DeviceBatch()
    generator = torch.Generator().manual_seed(9)
    tensors = [torch.randn(n, generator=generator) for n in (1, 255, 4096, 1 << 20)]
    crcs = [batch.checksum(t.to(device)) for t in tensors]
    xors = [batch.xor(t.to(device)) for t in tensors]
    batch.read_back()
    for tensor, crc, xor in zip(tensors, crcs, xors):
        raw = tensor.numpy().tobytes()
        crc_ok = crc.resolve() == f"{zlib.crc32(raw):08x}"
        padded = raw + b"\0" * (-len(raw) % 8)  # little-endian 64-bit words, the last zero-padded
        folded = int(np.bitwise_xor.reduce(np.frombuffer(padded, dtype="<u8")))
        results.append((f"crc32 of {tensor.numel()} float32", crc_ok, f"{crc.resolve()}"))
        results.append((f"xor of {tensor.numel()} float32", str(xor.resolve()) == f"{folded:016x}",
                        f"{xor.resolve()} against {folded:016x}"))  # fmt: skip
    return results


DUMP_RUN = """
import json, sys
sys.path.insert(0, {bench!r})
import torch
from workload import make_workload
from msprobe.pytorch import PrecisionDebugger
torch.manual_seed(0)
model, train_step = make_workload(device={device!r})
open(sys.argv[1] + ".json", "w").write(json.dumps(dict(json.loads(sys.argv[2]), dump_path=sys.argv[1])))
debugger = PrecisionDebugger(config_path=sys.argv[1] + ".json", model=model)
for step in range(2):
    debugger.start(); train_step(); debugger.stop(); debugger.step()
    print(json.dumps({{"reads": debugger._hooks.host_reads}}))
"""


def check_dumps(device: str, out: Path) -> list[tuple[str, bool, str]]:
    results = []
    configs = {"statistics L1": {"task": "statistics", "level": "L1"},
               "statistics mix": {"task": "statistics", "level": "mix"},
               "md5 L1": {"task": "statistics", "level": "L1", "statistics": {"summary_mode": "md5"}}}  # fmt: skip
    script = DUMP_RUN.format(bench=str(HERE), device=device)
    for label, config in configs.items():
        folder = out / "dumps" / label.replace(" ", "_")
        folder.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-c", script, str(folder), json.dumps(config)],
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        if done.returncode != 0:
            results.append((f"dump, {label}", False, done.stderr.strip().splitlines()[-1:] or "failed"))
            continue
        reads = [json.loads(line)["reads"] for line in done.stdout.splitlines() if line.startswith("{")]
        dump = folder / "step1" / "rank" / "dump.json"
        entries = len(json.loads(dump.read_text())["data"]) if dump.exists() else 0
        holds_values = entries and '"Max"' in dump.read_text()
        results.append((f"dump, {label}", bool(holds_values), f"{entries} entries, host reads per step {reads}"))
    return results


def run_bench(device: str, out: Path, steps: int) -> list[str]:
    """The benchmark's printed tables, one per workload and dtype."""
    runs = [("W", "fp32")] if device == "cpu" else [("W", "fp32"), ("gpt2", "fp32"), ("gpt2", "bf16")]
    printed = []
    for size, dtype in runs:
        command = [sys.executable, str(HERE / "bench_dump.py"), "--device", device, "--sizes", size, "--dtype",
                   dtype, "--steps", str(steps), "--only", BENCH_CONFIGS, "--out", str(out / "bench")]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=400)
        text = done.stdout if done.returncode == 0 else done.stdout + done.stderr[-2000:]
        printed.append(f"### {size}, {dtype} ({time.perf_counter() - started:.0f} s)\n\n```\n{text.strip()}\n```\n")
        print(printed[-1], flush=True)
    return printed


def run_compile_check(device: str) -> str:
    """compile_check's score on Triton: the block's forward faults, Inductor only (the CPU runs the rest)."""
    command = [sys.executable, str(HERE / "bench_compile_check.py"), "--models", "block", "--backends", "inductor",
               "--device", device, "--no-backward"]  # fmt: skip
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=240)
        text = done.stdout if done.returncode == 0 else done.stdout + done.stderr[-2000:]
    except subprocess.TimeoutExpired:
        text = "did not finish within 240 s"
    title = f"### compile_check, block, inductor on {device} ({time.perf_counter() - started:.0f} s)"
    printed = f"{title}\n\n```\n{text.strip()}\n```\n"
    print(printed, flush=True)
    return printed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "npu", "cpu"])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "device-check"))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--no-bench", action="store_true", help="checks 1 to 3 only")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print(f"device check: no torch in {sys.executable}; no device to check")
        return 0
    _use_checkout()

    device = find_device(args.device)
    if device is None:
        print(f"device check: no CUDA or NPU device here (torch {torch.__version__}); nothing to run")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name() if device == "cuda" else device
    print(f"device check on {name}, torch {torch.__version__}", flush=True)
    results = check_statistics(device) + check_checksums(device) + check_dumps(device, args.out)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Device check: {name}", "", f"torch {torch.__version__}, {when}", "",
             "| check | result | detail |", "| --- | --- | --- |"]  # fmt: skip
    lines += [f"| {check} | {'ok' if ok else 'FAILED'} | {detail} |" for check, ok, detail in results]
    for line in lines[4:]:
        print(line, flush=True)
    tables = [] if args.no_bench else run_bench(device, args.out, args.steps)
    if device == "cuda" and not args.no_bench:
        tables.append(run_compile_check(device))
    (args.out / "device_check.md").write_text("\n".join(lines) + "\n\n" + "\n".join(tables))
    failed = [check for check, ok, _ in results if not ok]
    print(f"device check: {len(results) - len(failed)} of {len(results)} checks passed; table in "
          f"{args.out / 'device_check.md'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

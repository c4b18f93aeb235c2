"""The PyTorch backend, registered through the ``msprobe.plugins`` entry point.

This module is imported during plugin discovery, so it must not import
torch: everything that needs torch is imported inside the methods.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path
from typing import Any

from msprobe.core.backend import Backend
from msprobe.core.hookspecs import hookimpl
from msprobe.core.switches import switched_off


class TorchBackend(Backend):
    name = "pytorch"
    aliases = ("torch", "pt")
    distribution = "msprobe-torch"
    import_name = "torch"
    tensor_suffix = ".pt"
    debugger_path = "msprobe.pytorch.debugger:PrecisionDebugger"
    autostart_path = "msprobe.pytorch.autostart:begin"

    def load_tensor(self, path: str | Path) -> Any:
        from msprobe.pytorch.tensor_io import load_pt

        return load_pt(path)

    def save_tensor(self, array: Any, path: str | Path) -> None:
        from msprobe.pytorch.tensor_io import save_pt

        save_pt(array, path)

    def load_checkpoint(self, path: str | Path) -> Any:
        from msprobe.pytorch.checkpoint import load_checkpoint

        return load_checkpoint(path)

    def config_check_probe(self) -> Any:
        from msprobe.pytorch.config_check import TorchConfigCheckProbe

        return TorchConfigCheckProbe()

    def seed_all(self, seed: int = 1234, mode: bool = False, rm_dropout: bool = True) -> None:
        from msprobe.pytorch.seed import seed_all

        seed_all(seed=seed, mode=mode, rm_dropout=rm_dropout)

    def describe(self) -> str:
        return f"{super().describe()}; per-call path: {_fast_path_state()}"


def _fast_path_state() -> str:
    """Whether the dump's per-call path in C (dump/_fast_path.c) was built, told without importing torch."""
    if switched_off("MSPROBE_NO_FAST_PATH"):
        return "Python (MSPROBE_NO_FAST_PATH is set)"
    folder = Path(__file__).parent / "dump"
    if any((folder / f"_fast_path{suffix}").is_file() for suffix in importlib.machinery.EXTENSION_SUFFIXES):
        return "C"
    return "Python (msprobe-torch was built without a C compiler)"


@hookimpl
def msprobe_register_backend() -> Backend:
    return TorchBackend()


@hookimpl
def msprobe_dump_hooks(session: Any) -> Any:
    if session.framework != "pytorch":
        return None
    from msprobe.pytorch.dump.recorder import TorchDumpRecorder

    return TorchDumpRecorder(session)


@hookimpl
def msprobe_cli_commands() -> list[Any]:
    """run_ut, multi_run_ut, run_overflow_check: `msprobe -f pytorch run_ut ...`."""
    from msprobe.pytorch.precheck.commands import commands

    return commands()


@hookimpl
def msprobe_free_benchmark_perturbations() -> list[Any]:
    """The six built-in perturbations, through the same hook a third party uses."""
    from msprobe.pytorch.free_benchmark import BUILT_IN

    return list(BUILT_IN)


@hookimpl
def msprobe_free_benchmark_hooks(session: Any) -> Any:
    if session.framework != "pytorch":
        return None
    from msprobe.core.plugins import get_registry
    from msprobe.pytorch.free_benchmark import make_hooks

    return make_hooks(session, get_registry().perturbations(framework="pytorch"))


@hookimpl
def msprobe_overflow_check_hooks(session: Any) -> Any:
    """The dump's hooks; the core's collector keeps only the calls that overflow."""
    return msprobe_dump_hooks(session)


@hookimpl
def msprobe_replay(script: str, module: str, call: int, npu_path: str, bench_path: str) -> Any:
    from msprobe.core.dump.reader import read_dump

    try:
        framework = read_dump(Path(npu_path)).framework
    except Exception:  # not a dump this backend reads: another may, or the caller says none could
        return None
    if framework not in ("pytorch", "torch", "pt"):
        return None
    from msprobe.pytorch.compile.check import load_script
    from msprobe.pytorch.replay import replay_module

    model, _ = load_script(Path(script))
    return replay_module(model, module, npu_path, bench_path, call)

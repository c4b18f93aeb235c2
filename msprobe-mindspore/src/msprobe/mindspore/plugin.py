"""The MindSpore backend, registered through the ``msprobe.plugins`` entry point.

Imported during plugin discovery: it must not import mindspore.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msprobe.core.backend import Backend
from msprobe.core.hookspecs import hookimpl
from msprobe.core.tensor_files import load_npy, save_npy


class MindSporeBackend(Backend):
    name = "mindspore"
    aliases = ("ms",)
    distribution = "msprobe-mindspore"
    import_name = "mindspore"
    tensor_suffix = ".npy"
    debugger_path = "msprobe.mindspore.debugger:PrecisionDebugger"
    autostart_path = "msprobe.mindspore.autostart:begin"
    summary_modes = ("statistics", "md5")  # xor and the live diff are PyTorch-only, as in mindstudio-probe 26.x
    live_diff = False

    def load_tensor(self, path: str | Path) -> Any:
        return load_npy(path)

    def save_tensor(self, array: Any, path: str | Path) -> None:
        save_npy(array, path)

    def load_checkpoint(self, path: str | Path) -> Any:
        from msprobe.mindspore.checkpoint import load_checkpoint

        return load_checkpoint(path)

    def config_check_probe(self) -> Any:
        from msprobe.mindspore.config_check import MindSporeConfigCheckProbe

        return MindSporeConfigCheckProbe()

    def seed_all(self, seed: int = 1234, mode: bool = False, rm_dropout: bool = True) -> None:
        from msprobe.mindspore.seed import seed_all

        seed_all(seed=seed, mode=mode, rm_dropout=rm_dropout)


@hookimpl
def msprobe_register_backend() -> Backend:
    return MindSporeBackend()


@hookimpl
def msprobe_dump_hooks(session: Any) -> Any:
    if session.framework != "mindspore":
        return None
    from msprobe.mindspore.dump.recorder import MindSporeDumpRecorder

    return MindSporeDumpRecorder(session)


@hookimpl
def msprobe_overflow_check_hooks(session: Any) -> Any:
    """The dump's hooks; the core's collector keeps only the calls that overflow."""
    return msprobe_dump_hooks(session)


@hookimpl
def msprobe_free_benchmark_perturbations() -> list[Any]:
    """The built-in perturbations for MindSpore, through the same hook a third party uses."""
    from msprobe.mindspore.free_benchmark import BUILT_IN

    return list(BUILT_IN)


@hookimpl
def msprobe_free_benchmark_hooks(session: Any) -> Any:
    if session.framework != "mindspore":
        return None
    from msprobe.core.plugins import get_registry
    from msprobe.mindspore.free_benchmark import make_hooks

    return make_hooks(session, get_registry().perturbations(framework="mindspore"))


@hookimpl
def msprobe_cli_commands() -> list[Any]:
    """run_ut and multi_run_ut: `msprobe -f mindspore run_ut ...`."""
    from msprobe.core.run_ut_cli import run_ut_commands

    return run_ut_commands(
        "msprobe.mindspore.run_ut:ApiRunner", "msprobe.mindspore.run_ut:save_error_data", lambda device: ["cpu"]
    )

"""msprobe for PyTorch, at the reference tool's import path: every name the documentation imports.

Names resolve lazily: plugin discovery imports ``msprobe.pytorch.plugin``
and must not import torch (nor transformers or lightning, which only their
callbacks need). The deeper paths (``msprobe.pytorch.integrations.huggingface.DumpCallback``
and the like) keep working.
"""

from msprobe.core.lazy import lazy_exports

_EXPORTS = {
    "PrecisionDebugger": "msprobe.pytorch.debugger",
    "seed_all": "msprobe.pytorch.seed",
    "TrainerMon": "msprobe.pytorch.monitor",
    "dump_generation": "msprobe.pytorch.generation",
    "teacher_forced_logprobs": "msprobe.pytorch.generation",
    "compare": "msprobe.core.compare.run",  # mindstudio-probe's Python compare functions
    "compare_distributed": "msprobe.core.compare.run",
    "OpLog": "msprobe.pytorch.op_log",
    "PtdbgDispatch": "msprobe.pytorch.precheck.online_dispatch",
    "check_compiled": "msprobe.pytorch.compile.check",
    "replay_module": "msprobe.pytorch.replay",
    "bisect_precision": "msprobe.pytorch.bisect",
    "StepGuard": "msprobe.pytorch.rerun",
    "MonitorCallback": "msprobe.pytorch.monitor.huggingface",
    "csv2tensorboard_by_step": "msprobe.pytorch.monitor.csv2tb",
    "HuggingFaceDumpCallback": ("msprobe.pytorch.integrations.huggingface", "DumpCallback"),
    "LightningDumpCallback": ("msprobe.pytorch.integrations.lightning", "DumpCallback"),
}
__all__ = [
    "HuggingFaceDumpCallback",
    "LightningDumpCallback",
    "MonitorCallback",
    "OpLog",
    "PrecisionDebugger",
    "PtdbgDispatch",
    "StepGuard",
    "TrainerMon",
    "bisect_precision",
    "check_compiled",
    "compare",
    "compare_distributed",
    "csv2tensorboard_by_step",
    "dump_generation",
    "replay_module",
    "seed_all",
    "teacher_forced_logprobs",
]
__getattr__ = lazy_exports(__name__, _EXPORTS)

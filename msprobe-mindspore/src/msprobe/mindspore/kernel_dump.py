"""Level L2 on MindSpore: its own kernel dump, configured from msprobe's config.json.

MindSpore dumps the kernels of compiled graphs (graph mode, or jit-compiled
parts of a PyNative run) when ``MINDSPORE_DUMP_CONFIG`` names a dump
settings file at compile time. msprobe writes that file from its own
config (``dump_path/kernel_config_{rank}.json``) and sets the variable, so
``start()`` must run before the network is built and compiled. CPU and GPU
MindSpore save tensors only; Ascend can also save statistics.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from msprobe.core.files import make_dir, write_json_atomic

logger = logging.getLogger(__name__)

ENV = "MINDSPORE_DUMP_CONFIG"
_INPUT_OUTPUT = {"all": 0, "input": 1, "output": 2}


def dump_settings(config: Any, device_target: str) -> dict[str, Any]:
    """MindSpore's dump settings for msprobe's config (task, step, list, data_mode)."""
    kernels = config.api_list
    data_mode = config.data_mode
    directions = {mode for mode in data_mode if mode in ("input", "output")}
    statistics = config.task == "statistics" and device_target == "Ascend"
    if config.task == "statistics" and not statistics:
        logger.warning(
            "MindSpore on %s saves whole tensors in its kernel dump, not statistics: the L2 dump holds .npy files",
            device_target,
        )
    settings: dict[str, Any] = {
        "op_debug_mode": 0,
        "dump_mode": 1 if kernels else 0,
        "path": str(Path(config.dump_path).resolve()),
        "net_name": "Net",
        "iteration": config.step.as_text() if config.step else "all",  # "0|4-6": ranges stay ranges
        "saved_data": "statistic" if statistics else "tensor",
        "input_output": _INPUT_OUTPUT[directions.pop()] if len(directions) == 1 else 0,
        "kernels": kernels,
        "support_device": list(range(8)),
    }
    if statistics:
        settings["statistic_category"] = ["max", "min", "avg", "l2norm"]
    return {"common_dump_settings": settings, "e2e_dump_settings": {"enable": True, "trans_flag": True}}


def enable_kernel_dump(config: Any, rank: int | None) -> Path:
    """Write the settings file and point MindSpore at it; returns the file."""
    import mindspore as ms

    folder = make_dir(Path(config.dump_path))
    path = folder / f"kernel_config_{rank or 0}.json"
    write_json_atomic(path, dump_settings(config, str(ms.get_context("device_target"))), indent=4)
    if os.environ.get(ENV) and os.environ[ENV] != str(path):
        logger.warning("%s was %s; msprobe's L2 dump replaces it with %s", ENV, os.environ[ENV], path)
    os.environ[ENV] = str(path)
    logger.warning(
        "msprobe L2: MindSpore's kernel dump writes to %s for graphs compiled from now on (settings: %s)",
        config.dump_path,
        path,
    )
    return path

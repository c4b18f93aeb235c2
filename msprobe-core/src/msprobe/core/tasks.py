"""The built-in plugin ``builtin-tasks``: the task names of the reference's config.json.

Each names the hook that supplies its framework side; a backend answers those
hooks. A third-party task is declared the same way, through ``msprobe_tasks``.
This tuple is where the built-in names live; the config reads them from here.
"""

from __future__ import annotations

from msprobe.core.backend import Task
from msprobe.core.hookspecs import hookimpl

BUILTIN_TASKS = (
    Task("statistics", "statistics of every API/module input and output", "msprobe_dump_hooks"),
    Task("tensor", "statistics plus the tensors themselves", "msprobe_dump_hooks"),
    Task("structure", "the call structure only, without values", "msprobe_dump_hooks"),
    Task("overflow_check", "the APIs whose outputs overflow", "msprobe_overflow_check_hooks"),
    Task(
        "nan_check",
        "26.x: the APIs whose outputs overflow, with their statistics and no tensor files",
        "msprobe_overflow_check_hooks",
    ),
    Task(
        "flight_recorder",
        "the last steps' statistics in memory, written when an inf/nan, a loss spike or flush() comes",
        "msprobe_dump_hooks",
    ),
    Task(
        "free_benchmark", "perturb inputs and compare outputs, without a benchmark run", "msprobe_free_benchmark_hooks"
    ),
    # the two below are not run by start()/stop(): no hook, and the description says what runs them
    Task(
        "run_ut",
        "the accuracy pre-check, run on a dump by `msprobe run_ut -config` (in a training job: task "
        "'tensor' with tensor.online_run_ut)",
        "",
    ),
    Task("grad_probe", "gradient statistics per parameter and step, recorded through debugger.grad_probe(model)", ""),
)


@hookimpl
def msprobe_tasks() -> list[Task]:
    return list(BUILTIN_TASKS)

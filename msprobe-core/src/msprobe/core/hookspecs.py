"""Hook specifications: the whole contract between msprobe's core and its plugins.

A plugin is a module (or object) with functions named after these hooks and
decorated with :data:`hookimpl`. It is found through the entry-point group
``msprobe.plugins``::

    [project.entry-points."msprobe.plugins"]
    myplugin = "my_package.msprobe_plugin"

The PyTorch and MindSpore backends are plugins of exactly this kind; so are
the core's own compare metrics and free-benchmark perturbations. Every hook
is optional. Hooks that return lists are called on every plugin and the lists
are joined; hooks marked *first result* stop at the first plugin that answers.
A plugin that raises in a hook is reported by name (``msprobe plugins``) and
skipped; it never stops the other plugins.

The core owns the lifecycle of a run (config, step and rank selection,
start/stop/step, writing files). Task hooks receive a
:class:`~msprobe.core.session.TaskSession` and return an object with
``install()`` and ``remove()``: that object owns only what needs the
framework, such as patching APIs and registering module hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover - typing only
    from msprobe.core.backend import Backend, CompareMetric, Perturbation, TaskHooks
    from msprobe.core.session import TaskSession

PROJECT_NAME = "msprobe"
ENTRY_POINT_GROUP = "msprobe.plugins"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -- backends ---------------------------------------------------------------


@hookspec
def msprobe_register_backend() -> Backend | None:
    """Describe the deep-learning framework this plugin drives.

    Return a :class:`~msprobe.core.backend.Backend`: its name and aliases
    (``pytorch``/``torch``/``pt``), whether the framework imports, whether it
    owns a given model or tensor, the factory for its ``PrecisionDebugger``,
    its tensor file reader and writer, and ``seed_all``. Plugins that add no
    framework return ``None`` or leave the hook out. Discovery must stay
    cheap: do not import the framework in this hook.
    """


# -- command line -----------------------------------------------------------


@hookspec
def msprobe_cli_commands() -> list[Any]:
    """Return click commands to add to the ``msprobe`` command line.

    Commands of a plugin that also registers a backend belong to that
    framework: ``msprobe -f pytorch run_ut`` finds the PyTorch plugin's
    ``run_ut``. Commands of other plugins are available whatever ``-f`` says.
    The ``msprobe`` group passes the chosen framework in ``ctx.obj["framework"]``.
    """


# -- extension points for third parties -------------------------------------


@hookspec
def msprobe_compare_metrics() -> list[CompareMetric]:
    """Return extra metrics the compare engine computes for every tensor pair.

    Each :class:`~msprobe.core.backend.CompareMetric` becomes one more column
    of the compare result, after the reference's own columns.
    """


@hookspec
def msprobe_free_benchmark_perturbations() -> list[Perturbation]:
    """Return input perturbations for the free benchmark (``pert_mode``).

    The built-in ones (``improve_precision``, ``add_noise``, ``bit_noise``,
    ``no_change``, ``change_value``, ``to_cpu``) are registered through this
    same hook. A :class:`~msprobe.core.backend.Perturbation` names the
    framework it works on, or ``None`` for any framework.
    """


# -- one hook per function of a PrecisionDebugger ----------------------------


@hookspec(firstresult=True)
def msprobe_dump_hooks(session: TaskSession) -> TaskHooks | None:
    """Return the hooks that collect data for tasks statistics, tensor and structure.

    Called when a ``PrecisionDebugger`` starts on ``session.framework``;
    answer ``None`` for a framework you do not drive. The returned hooks hand
    every collected entry to ``session`` (which selects, measures and writes).
    """


@hookspec(firstresult=True)
def msprobe_overflow_check_hooks(session: TaskSession) -> TaskHooks | None:
    """Return the hooks for task ``overflow_check`` on ``session.framework``."""


@hookspec(firstresult=True)
def msprobe_free_benchmark_hooks(session: TaskSession) -> TaskHooks | None:
    """Return the hooks for task ``free_benchmark`` on ``session.framework``."""


@hookspec(firstresult=True)
def msprobe_grad_probe_hooks(session: TaskSession) -> TaskHooks | None:
    """Return the hooks for task ``grad_probe`` (``PrecisionDebugger.monitor``)."""


@hookspec(firstresult=True)
def msprobe_accuracy_check_hooks(session: TaskSession) -> TaskHooks | None:
    """Return the hooks for online accuracy checking (task ``run_ut`` in a training job)."""


@hookspec(firstresult=True)
def msprobe_task_hooks(session: TaskSession) -> TaskHooks | None:
    """Return hooks for a task no built-in hook serves: the way a third party adds a task.

    Called for any task after the dedicated hook above (if any) answered
    ``None``; ``session.task`` says which task was asked for.
    """


TASK_HOOKS = {
    "statistics": "msprobe_dump_hooks",
    "tensor": "msprobe_dump_hooks",
    "structure": "msprobe_dump_hooks",
    "overflow_check": "msprobe_overflow_check_hooks",
    "free_benchmark": "msprobe_free_benchmark_hooks",
    "grad_probe": "msprobe_grad_probe_hooks",
    "run_ut": "msprobe_accuracy_check_hooks",
}

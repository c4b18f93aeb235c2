"""Hook specifications: the whole contract between msprobe's core and its plugins.

A plugin is a module (or object) with functions named after these hooks and
decorated with :data:`hookimpl`. It is found through the entry-point group
``msprobe.plugins``::

    [project.entry-points."msprobe.plugins"]
    myplugin = "my_package.msprobe_plugin"

Built-in features are plugins of exactly this kind: the PyTorch and
MindSpore backends, the core's compare metrics (``builtin-metrics``), its
task names (``builtin-tasks``) and the CLI's commands (``builtin-commands``,
declared through msprobe-cli's own entry point).
Every hook is optional. Hooks are called through pluggy: the newest plugin
first, ``tryfirst``/``trylast`` and ``wrapper=True`` as pluggy documents.
Hooks that return lists are called on every plugin and the answers are
joined; hooks marked *first result* stop at the first plugin that answers
something other than ``None``. A plugin that raises in a hook, or returns the
wrong kind of result, is reported by name (``msprobe plugins``) and skipped;
it never stops the other plugins.

The core owns the lifecycle of a run (config, step and rank selection,
start/stop/step, writing files). Task hooks receive a
:class:`~msprobe.core.recording.session.TaskSession` and return an object with
``install()`` and ``remove()``: that object owns only what needs the
framework, such as patching APIs and registering module hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover - typing only
    from msprobe.core.backend import Backend, CompareMetric, Perturbation, Task, TaskHooks
    from msprobe.core.recording.session import TaskSession

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
    """Return metrics the compare engine computes for every matched pair.

    Called once per compare. Each :class:`~msprobe.core.backend.CompareMetric`
    becomes one column of the result in the compare modes it lists in
    ``modes`` (``tensor``, ``statistics``): a tensor-mode metric receives the
    two tensors as numpy arrays, a statistics-mode one two
    :class:`~msprobe.core.backend.Statistics`. The reference's own columns
    come first, registered by the built-in plugin ``builtin-metrics``; a
    plugin's columns follow them.
    """


@hookspec
def msprobe_free_benchmark_perturbations() -> list[Perturbation]:
    """Return input perturbations for the free benchmark (``pert_mode``).

    Called when a free-benchmark run starts and by ``msprobe plugins``. The
    built-in ones (``improve_precision``, ``add_noise``, ``bit_noise``,
    ``no_change``, ``change_value``, ``to_cpu``) are registered through this
    same hook by the backends. A :class:`~msprobe.core.backend.Perturbation`
    names the framework it works on, or ``None`` for any framework, and says
    with ``fix`` whether ``handler_type: "fix"`` may use it.
    """


@hookspec
def msprobe_tasks() -> list[Task]:
    """Return task names the config's ``task`` field accepts.

    Called when a config is validated (``PrecisionDebugger``, ``msprobe
    config validate``) and by ``msprobe plugins``. The built-in tasks come
    from the plugin ``builtin-tasks``. A plugin that adds a task answers
    ``msprobe_task_hooks`` for it; a :class:`~msprobe.core.backend.Task` may
    carry a pydantic model for a config section named after the task.
    """


# -- one hook per function of a PrecisionDebugger ----------------------------


@hookspec(firstresult=True)
def msprobe_dump_hooks(session: TaskSession) -> TaskHooks | None:
    """Return the hooks that collect data for tasks statistics, tensor and structure.

    Called when a ``PrecisionDebugger`` starts its first selected step on
    ``session.framework``; answer ``None`` for a framework you do not drive.
    The backends' hooks feed a core ``DumpCollector`` built over ``session``,
    which selects, measures and writes.
    """


@hookspec(firstresult=True)
def msprobe_overflow_check_hooks(session: TaskSession) -> TaskHooks | None:
    """Return the hooks for task ``overflow_check`` on ``session.framework``."""


@hookspec(firstresult=True)
def msprobe_free_benchmark_hooks(session: TaskSession) -> TaskHooks | None:
    """Return the hooks for task ``free_benchmark`` on ``session.framework``."""


@hookspec(firstresult=True)
def msprobe_task_hooks(session: TaskSession) -> TaskHooks | None:
    """Return hooks for a task no dedicated hook serves: the way a third party adds a task.

    Called for a task named by ``msprobe_tasks`` whose ``hook`` is this one,
    and for any task after its dedicated hook above answered ``None``;
    ``session.config.task`` says which task was asked for.
    """


@hookspec(firstresult=True)
def msprobe_replay(script: str, module: str, call: int, npu_path: str, bench_path: str) -> Any:
    """Replay a module call of two tensor dumps in this process: ``msprobe compare --replay``.

    ``script`` defines ``model_and_inputs()`` (the model as the run built it); ``module`` is the module's path,
    ``call`` which of its calls; ``npu_path`` and ``bench_path`` are step and rank folders. Return a
    :class:`~msprobe.core.replay.ReplayReport`, or ``None`` when the dumps are not of your framework.
    """


# The hooks that return a task's TaskHooks; each is *first result*.
TASK_HOOK_NAMES = (
    "msprobe_dump_hooks",
    "msprobe_overflow_check_hooks",
    "msprobe_free_benchmark_hooks",
    "msprobe_task_hooks",
)

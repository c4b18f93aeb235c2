"""The framework-neutral lifecycle of a PrecisionDebugger.

A framework's debugger subclasses :class:`BaseDebugger` and supplies only
what needs the framework (the current rank, what counts as a model). The
core decides whether the current step and rank are selected, asks the
plugins for the task's hooks, installs them on ``start()`` and removes them
on ``stop()``, so nothing of the tool stays patched between steps.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
import weakref
from pathlib import Path
from typing import Any

from msprobe.core.autostart import DUMPING_VARIABLE
from msprobe.core.config import DebuggerConfig, load_config, load_config_once
from msprobe.core.errors import BackendError, ConfigError, DataFileError, MsprobeError, UsageError
from msprobe.core.messages import show_in_training
from msprobe.core.recording.tensor_cuts import KvCacheTensors, TensorCut, find_request, tensor_cut

logger = logging.getLogger(__name__)

MODEL_LEVELS = ("L0", "mix")


class TaskSession:
    """What task hooks see of a run: its config, framework, model, step and rank."""

    def __init__(self, debugger: BaseDebugger):
        self.debugger = debugger

    @property
    def config(self) -> DebuggerConfig:
        return self.debugger.config

    @property
    def task(self) -> str:
        return self.config.task

    @property
    def framework(self) -> str:
        return self.debugger.framework

    @property
    def model(self) -> Any:
        return self.debugger.model

    @property
    def step(self) -> int:
        return self.debugger.current_step

    @property
    def rank(self) -> int | None:
        return self.debugger.current_rank()

    def selects(self, step: int | None = None, rank: int | None = None) -> bool:
        """Whether config.json's ``step`` and ``rank`` take this step and rank (default: the run's own)."""
        return self.debugger.selects(step, rank)

    @property
    def tensor_cut(self) -> TensorCut | None:
        """The part of each tensor this run keeps (``request_id``, ``slice``), or None: every tensor whole."""
        return self.debugger.tensor_cut

    @property
    def batch(self) -> dict[str, int] | None:
        """Serving: this forward's request and token counts, where start() was told its requests."""
        return self.debugger.batch

    @property
    def kv_cache(self) -> KvCacheTensors:
        return self.debugger.kv_cache

    @property
    def dump_dir(self) -> Path:
        """``dump_path/step{N}/rank{R}``; with no rank ``rank`` (1.2.2's layout) or ``proc{pid}`` (26.x's)."""
        rank = self.rank
        if rank is not None:
            folder = f"rank{rank}"
        else:
            folder = f"proc{os.getpid()}" if self.config.folder_without_rank == "proc" else "rank"
        return Path(self.config.dump_path) / f"step{self.step}" / folder


class _OnCurrentDebugger:
    """A method callable on an instance or on the class (then on the newest instance), like the reference's save."""

    def __init__(self, function: Any):
        self.function = function
        self.__doc__ = function.__doc__

    def __get__(self, instance: Any, owner: type) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            target = instance if instance is not None else owner._current
            if target is None:
                raise UsageError(f"{owner.__name__}.{self.function.__name__}() needs a PrecisionDebugger created first")
            return self.function(target, *args, **kwargs)

        return call


class BaseDebugger:
    """Config, step/rank selection and start/stop/step for every framework."""

    framework: str = ""
    _current: BaseDebugger | None = None
    _probing: BaseDebugger | None = None  # the debugger whose grad probe is on: one at a time, the latest

    def __init__(
        self,
        config_path: str | None = None,
        task: str | None = None,
        dump_path: str | None = None,
        level: str | None = None,
        model: Any = None,
        step: list[Any] | None = None,
        strict: bool | None = None,
    ):
        self._overrides = {"task": task, "dump_path": dump_path, "level": level, "step": step, "strict": strict}
        self.config = load_config_once(config_path, **self._overrides)  # the front door's, where it made us
        self.config_path = config_path
        self._refuse_what_the_backend_cannot_do(self.config)
        self._config_seen = _file_state(config_path) if self.config.dump_enable is not None else None
        self._make_dump_path()
        self.model = self._checked_model(model) if model is not None else None
        self.current_step = 0
        self.session = TaskSession(self)
        self._hooks: Any = None
        self._running = False
        self._start_called = False
        self._saver: Any = None
        self._dumping_starts = 0  # start() calls that put hooks in: none at the end says why nothing was written
        self._step_open = False  # hooks went in since the last step(): the step has something to end
        self._step_began: float | None = None  # when the step began (the last step(), or the first start())
        self._plain_step_seconds: float | None = None  # a step without the dump, for the cost line
        self._told_grad_probe = False
        self._cut: tuple[DebuggerConfig, TensorCut | None] | None = None
        self._request_absent = False  # the kept request is not in this forward: its step() does not count
        self.batch: dict[str, int] | None = None  # this forward's requests and tokens, where start() was told
        self.kv_cache = KvCacheTensors()
        self._told_request_ids = False
        type(self)._current = self
        show_in_training()
        atexit.register(_finish_at_exit, weakref.ref(self))

    def _refuse_what_the_backend_cannot_do(self, config: DebuggerConfig) -> None:
        """A valid config may ask for what this framework's backend does not write (26.x's xor on MindSpore):
        refused when the debugger is made, and in an edited config read again, not when start() builds the
        hooks mid-training."""
        from msprobe.core.plugins import get_registry

        backend = get_registry().backends().get(self.framework)
        problem = backend.config_problem(config) if backend is not None else None
        if problem is not None:
            raise ConfigError(problem, path=self.config_path)

    @classmethod
    def current(cls) -> BaseDebugger | None:
        """The newest debugger of this framework, which the class-level calls (``save``, ...) act on."""
        return cls._current

    def _make_dump_path(self) -> None:
        """A dump_path that cannot be written is a config error, found before the training starts."""
        if self.config.dump_path is None:
            return
        from msprobe.core.files import make_dir

        try:
            make_dir(Path(self.config.dump_path))
        except DataFileError as exc:
            raise ConfigError(str(exc), path=self.config_path, field="dump_path") from None

    # -- what a framework supplies ------------------------------------------------
    def current_rank(self) -> int | None:
        """The rank of this process, or None when not distributed."""
        return None

    def is_model(self, obj: Any) -> bool:
        return True

    def start_kernel_dump(self) -> None:
        """Level L2: hand the dump to the framework's own kernel dump; a backend that has one overrides this."""
        raise UsageError(
            "level L2 (kernel dump) is recorded by the device's own dump facility (Ascend CANN for "
            "torch_npu, MindSpore's dump on Ascend), which this machine does not have; "
            "use level L1 for API data, or run L2 on Ascend with the vendor's dump tools"
        )

    def check_execution_mode(self) -> None:
        """Refuse levels the framework's current execution mode cannot hook (MindSpore graph mode)."""

    def _checked_model(self, model: Any) -> Any:
        items = model if isinstance(model, (list, tuple)) else [model]
        if not items:
            raise UsageError("model is an empty list")
        for item in items:
            if not self.is_model(item):
                raise UsageError(
                    f"model must be a {self.framework} model (or a list of them), got {type(item).__name__}"
                )
        return model

    # -- selection --------------------------------------------------------------------
    # the one rule of selection: the dump asks with the session's own step and rank, the grad probes with the
    # optimizer steps they count
    def step_selected(self, step: int | None = None) -> bool:
        """Whether config.json's ``step`` list takes ``step`` (default: the session's own); empty takes all."""
        return not self.config.step or (self.current_step if step is None else step) in self.config.step

    def rank_selected(self, rank: int | None = None) -> bool:
        """Whether config.json's ``rank`` list takes ``rank`` (default: this process's); empty takes all."""
        return not self.config.rank or ((self.current_rank() or 0) if rank is None else rank) in self.config.rank

    def selects(self, step: int | None = None, rank: int | None = None) -> bool:
        return self.step_selected(step) and self.rank_selected(rank)

    @property
    def tensor_cut(self) -> TensorCut | None:
        if self._cut is None or self._cut[0] is not self.config:  # made again when an edited config is taken
            self._cut = (self.config, tensor_cut(self.config))
        return self._cut[1]

    def _request_present(self, request_ids: Any, scheduled_tokens: Any) -> bool:
        """Whether this forward holds the request the config keeps (always, when it keeps no request); where it
        does, the cut learns its rows."""
        cut = self.tensor_cut
        if request_ids is not None:
            self.batch = _batch_of(request_ids, scheduled_tokens)
        if cut is None or cut.request_id is None:
            if request_ids is not None or scheduled_tokens is not None:
                self._note_unused_request_ids()
            return True
        if request_ids is None:
            raise UsageError(
                f"the config keeps request_id {cut.request_id!r}, so start() needs this forward's requests: "
                "start(model, request_ids=[...], scheduled_tokens=[...])"
            )
        cut.rows = find_request(cut.request_id, request_ids, scheduled_tokens)
        return cut.rows is not None

    def note_kv_cache(self, tensors: Any) -> None:
        """Serving: these tensors hold the attention's KV cache, and so does what a concatenation grows from
        them; task tensor writes their statistics and saves no file of them (see docs/serving.md)."""
        self.kv_cache.add(tensors)

    def _note_unused_request_ids(self) -> None:
        if not self._told_request_ids:
            self._told_request_ids = True
            logger.info("msprobe: start() got request_ids, but the config keeps no request_id: every row is dumped")

    # -- lifecycle ----------------------------------------------------------------------
    def _reread_config(self) -> None:
        """``dump_enable`` (26.x): the config file is read again whenever it changed since it was last read.

        A file that no longer validates is reported once and the last good
        config stays. A change to anything but ``dump_enable`` takes effect
        with new hooks, made at the next start that dumps.
        """
        seen = _file_state(self.config_path)
        if seen == self._config_seen:
            return
        self._config_seen = seen
        try:
            config = load_config(self.config_path, **self._overrides)
            self._refuse_what_the_backend_cannot_do(config)
        except ConfigError as exc:
            logger.warning("msprobe: the edited config is not used, the last good one stays: %s", exc)
            return
        if config.dump_enable is None:  # the switch was taken out: the file is no longer watched
            self._config_seen = None
        if config.model_dump(exclude={"dump_enable"}) != self.config.model_dump(exclude={"dump_enable"}):
            if self._hooks is not None:  # what the old hooks hold is written first, as finish() does
                self._call_hooks("close")
                self._call_hooks("end_step")
                self._hooks = None
            self.config = config
            self._make_dump_path()
            logger.info("msprobe: config %s changed; its new settings apply from this start()", self.config_path)
        else:
            self.config = config

    def start(self, model: Any = None, request_ids: Any = None, scheduled_tokens: Any = None) -> None:
        """Begin dumping this step. Serving: ``request_ids`` are the requests this forward runs, in the order of
        its rows, and ``scheduled_tokens`` how many tokens each brings (one each when omitted); with the config's
        ``request_id`` only that request's rows are dumped, and a forward without it is not a step."""
        if self._step_began is None:  # the first step's time counts from here (later ones from step())
            self._step_began = time.perf_counter()
        if self._config_seen is not None and not self._running:
            self._reread_config()
        if model is not None:
            self.model = self._checked_model(model)
        if self.config.level in MODEL_LEVELS and self.model is None and self.config.task != "grad_probe":
            raise UsageError(
                f"level {self.config.level} dumps modules, so it needs the model: "
                "PrecisionDebugger(..., model=model) or start(model=model)"
            )
        if self.config.level == "L2":
            if not self._start_called and self.rank_selected():
                self.start_kernel_dump()
            self._start_called = True
            return
        self.check_execution_mode()
        self._start_called = True
        if self.config.task == "grad_probe" and self._hooks is None and not self._told_grad_probe:
            self._told_grad_probe = True
            logger.warning(
                "msprobe: task grad_probe records through debugger.grad_probe(model) (the reference's monitor(model)), "
                "called once before training; "
                "start(), stop() and step() alone write nothing"
            )
        if self._running or self.config.level == "debug" or self.config.task == "grad_probe":
            return  # save() and grad_probe() need no start/stop
        if not self._request_present(request_ids, scheduled_tokens):
            self._request_absent = True
            return
        if not (self.step_selected() and self.rank_selected()) or self.config.dump_enable is False:
            return
        if self._overflows_all_found():  # as the reference: no step folder after the last overflow it keeps
            return
        if self._hooks is None:
            self._hooks = self._make_hooks()
        try:
            self._hooks.install()  # the step's folder is made first, before any hook goes on
        except DataFileError as exc:  # e.g. a full disk or a file in the way: this step goes undumped
            if self.config.strict:
                raise
            logger.error("msprobe: step %d is not dumped: %s", self.current_step, exc)
            return
        except Exception as exc:  # a plugin's task hooks: the training goes on without them this step
            if not self._plugin_task or isinstance(exc, MsprobeError):
                raise
            self._hooks_failed("install", exc)
            return
        self._running = True
        self._dumping_starts += 1
        self._step_open = True

    def _overflows_all_found(self) -> bool:
        """The overflow check has kept its ``overflow_nums`` overflows: it dumps no more steps."""
        counter = getattr(getattr(self._hooks, "collector", None), "overflow", None)
        return bool(getattr(counter, "exhausted", False))

    def stop(self) -> None:
        if not self._start_called:
            raise UsageError("stop() was called before start()")
        if self.config.task == "grad_probe":
            return  # the monitor stays on for the whole training
        if self._running:
            self._running = False
            self._call_hooks("remove")

    def step(self, loss: Any = None) -> None:
        """End the step. ``loss``: this step's loss, for the flight recorder's loss-spike trigger."""
        if self._running:
            self.stop()
        if self._request_absent and not self._step_open:  # a forward without the kept request is no step of it
            self._request_absent = False
            return
        self._request_absent = False
        if loss is not None:
            self._call_hooks("observe_loss", loss)
        dumped = self._step_open
        self._call_hooks("end_step")
        self._step_open = False
        now = time.perf_counter()
        if dumped and self._dumping_starts == 1 and not self._plugin_task:
            self._report_first_step(now - (self._step_began or now))
        elif not dumped and self._step_began is not None:
            self._plain_step_seconds = now - self._step_began
        self._step_began = now
        self.current_step += 1

    def _report_first_step(self, seconds: float) -> None:
        """What one dumped step costs, said once after the first: what it wrote, and its time beside that of
        a step without the dump where one ran before."""
        summary = getattr(self._hooks, "summary", None)
        totals = summary() if callable(summary) else None
        if totals is None or not totals.folders:
            return
        logger.info(totals.first_step_line(self.current_step, self.current_rank(), seconds, self._plain_step_seconds))

    def alarms(self) -> list[str]:
        """What the task has flagged so far in this run (see Collector.alarms); none for a task that flags
        nothing."""
        collector = getattr(self._hooks, "collector", None)
        alarms = getattr(collector, "alarms", None)
        return alarms() if callable(alarms) else []

    def flush(self) -> None:
        """Flight recorder: write the steps in its window now (other tasks: nothing to do)."""
        self._call_hooks("flush")

    def _call_hooks(self, method: str, *args: Any) -> None:
        """``remove``, ``end_step``, ``close``, ``observe_loss`` or ``flush`` of the task's hooks (all but the
        first optional). What a plugin task's hooks raise is logged, once per method, and the training goes on
        (``strict``: raised)."""
        call = getattr(self._hooks, method, None)
        if call is None:
            return
        if not self._plugin_task:  # the built-in tasks' hooks decide themselves what reaches the training
            call(*args)
            return
        try:
            call(*args)
        except MsprobeError:
            raise
        except Exception as exc:
            self._hooks_failed(method, exc)

    @property
    def _plugin_task(self) -> bool:
        from msprobe.core.config import TASKS

        return self.config.task not in TASKS

    def _hooks_failed(self, method: str, exc: Exception) -> None:
        if self.config.strict:
            raise exc
        told = self.__dict__.setdefault("_told_hooks", set())
        if method not in told:
            told.add(method)
            logger.error(
                "msprobe: the hooks of task '%s' failed in %s() and the training goes on without them there: "
                "%s: %s", self.config.task, method, exc.__class__.__name__, exc,
            )  # fmt: skip

    @_OnCurrentDebugger
    def save(self, variable: Any, name: str, save_backward: bool = True) -> None:
        """Keep ``variable`` (tensors, nested lists/dicts, numbers, strings) in debug.json, level ``debug``."""
        if self.config.level != "debug":
            raise UsageError("save() needs level 'debug' in the config")
        if not isinstance(name, str) or not name:
            raise UsageError("save() needs a non-empty name")
        if not (self.step_selected() and self.rank_selected()):
            return
        if self._saver is None:
            self._saver = self._make_saver()
        try:
            self._saver.save(variable, name, save_backward=save_backward)
        except Exception as exc:  # never break training
            if self.config.strict:
                raise
            logger.warning("msprobe: save(%r) failed and is skipped: %s", name, exc)

    def _make_saver(self) -> Any:
        raise UsageError(f"save() is not available for {self.framework}")

    def grad_probe(self, target: Any) -> None:
        """Grad probe (task grad_probe): record the gradients of ``target`` (what the backend watches: a
        torch.nn.Module, a mindspore.nn.Optimizer) at each optimizer step, from now until finish()."""
        if self.config.task != "grad_probe":
            raise UsageError("grad_probe() needs task 'grad_probe' in the config")
        probe = self.make_grad_probe(target)
        if self._hooks is not None:
            self._hooks.remove()
        earlier = BaseDebugger._probing
        if earlier is not None and earlier is not self and earlier._hooks is not None:
            # its hook sits on every optimizer: left on, both would record each step into their own folders
            logger.warning("msprobe: grad_probe() of a new debugger: the earlier debugger's grad probe is removed")
            earlier._hooks.remove()
            earlier._hooks = None
        BaseDebugger._probing = self
        self._hooks = probe
        probe.install()

    def monitor(self, target: Any) -> None:
        """The reference tool's name for :meth:`grad_probe`, kept so its scripts run unchanged."""
        self.grad_probe(target)

    def make_grad_probe(self, target: Any) -> Any:
        """The backend's grad probe hooks (TaskHooks) on ``target``; a UsageError naming what it takes otherwise."""
        raise UsageError(f"grad_probe() is not available for {self.framework}")

    def finish(self) -> None:
        """Remove every hook and write what was collected (also run at interpreter exit), then say in one line
        where the dump went and what it holds, or why nothing was written."""
        if self._saver is not None:
            self._saver.close()
        if self._running:
            self.stop()
        self._call_hooks("close")
        if self._step_open or not self._plugin_task:  # a plugin task hears of no step that never ran
            self._call_hooks("end_step")
        self._step_open = False
        if not self.__dict__.get("_reported"):
            self._reported = True
            self._report()

    def _report(self) -> None:
        config = self.config
        if config.level in ("debug", "L2") or self._plugin_task:
            return
        if config.task == "grad_probe":
            if self._hooks is None and self._start_called:
                logger.warning("msprobe: task grad_probe wrote nothing: debugger.grad_probe(model) was never called")
            return
        verdict = getattr(self._hooks, "verdict", None)
        if callable(verdict) and self._dumping_starts:  # a task whose answer is a verdict (free benchmark)
            logger.log(*verdict())
            return
        summary = getattr(self._hooks, "summary", None)
        totals = summary() if callable(summary) else None
        if totals is not None and totals.entries:
            logger.info(totals.line(str(config.dump_path)))
            return
        why = self._why_nothing(totals)
        if why:
            logger.warning("msprobe: nothing was dumped: %s", why)

    def _why_nothing(self, totals: Any) -> str | None:
        config = self.config
        rank = self.current_rank()
        if not self._start_called:
            return "start() was never called"
        if not self.rank_selected():
            return f"this process is rank {rank or 0}, and the config's rank list is {list(config.rank)}"
        if config.dump_enable is False:
            return "the config's dump_enable is false"
        if not self._dumping_starts:
            if config.step:
                steps = list(config.step)
                shown = steps if len(steps) <= 8 else [*steps[:8], "..."]
                return f"the config's steps {shown} were never reached (the run ended in step {self.current_step})"
            return "no start() put the hooks in"
        if totals is None:
            return None  # a task that reports in its own way
        chosen = []
        if config.scope:
            chosen.append(f"scope {list(config.scope)}")
        if config.api_list:
            chosen.append(f"list {list(config.api_list)}")
        spans = f"{self._dumping_starts} dumped start()-stop() spans"
        if os.environ.get(DUMPING_VARIABLE) == str(os.getpid()):  # msprobe run: its user wrote no start() or stop()
            spans = f"the {self._dumping_starts} steps msprobe run dumped"
        if chosen:
            return f"{' and '.join(chosen)} matched no call in {spans}; each step's folder holds an empty dump.json"
        return f"no call was made in {spans}"

    def forward_backward_dump_end(self) -> None:
        """Stop collecting for this step while leaving the step counter alone."""
        if self._running:
            self._running = False
            self._call_hooks("remove")

    def _make_hooks(self) -> Any:
        from msprobe.core.plugins import get_registry

        registry = get_registry()
        task = registry.tasks().get(self.config.task)
        if task is not None and not task.hook:  # a built-in task that start() does not run
            raise UsageError(f"task '{task.name}' is not run by start() and stop(): {task.description}")
        hook_name = task.hook if task is not None else "msprobe_task_hooks"
        hooks = registry.call_first(hook_name, session=self.session)
        if hooks is None and hook_name != "msprobe_task_hooks":
            hooks = registry.call_first("msprobe_task_hooks", session=self.session)
        if hooks is None:
            failed = [
                failure for name in (hook_name, "msprobe_task_hooks") if name for failure in registry.failures(name)
            ]
            reason = (
                f"the plugin providing it failed ({'; '.join(failed)})"
                if failed
                else "no installed plugin provides it (see `msprobe plugins`)"
            )
            raise BackendError(f"task '{self.config.task}' is not available for {self.framework}: {reason}")
        return hooks


def _batch_of(request_ids: Any, scheduled_tokens: Any) -> dict[str, int] | None:
    """The forward's request and token counts (one token each where none are given), for the dump's header: a
    request's rows compare across batches of other sizes, whose sizes its calls take as arguments."""
    if request_ids is None:
        return None
    try:
        requests = len(request_ids)
        tokens = requests if scheduled_tokens is None else sum(int(count) for count in scheduled_tokens)
    except (TypeError, ValueError):
        return None  # find_request says what is wrong with them
    return {"requests": requests, "tokens": tokens}


def _file_state(path: str | None) -> tuple[int, int] | None:
    """What tells an edited file: its modification time and size (None: no file to watch)."""
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return (0, -1)
    return (stat.st_mtime_ns, stat.st_size)


def _finish_at_exit(reference: weakref.ref[BaseDebugger]) -> None:
    debugger = reference()
    if debugger is None:
        return
    try:
        debugger.finish()
    except Exception as exc:  # exiting anyway: say what was lost, do not raise
        logger.warning("msprobe: could not finish the dump at exit: %s", exc)

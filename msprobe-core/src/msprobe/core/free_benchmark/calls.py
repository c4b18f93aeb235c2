"""Free benchmark's handling of one API call, for any framework, and the choice of perturbation."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from msprobe.core.dump.entry_names import kind_of
from msprobe.core.errors import UsageError
from msprobe.core.free_benchmark.judge import FreeBenchmarkJudge, dtype_key

logger = logging.getLogger(__name__)


def _first_line(exc: BaseException) -> str:
    """A framework's dispatch errors run to dozens of lines (every backend it knows): the first says it."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


# APIs whose results differ run to run, or that cannot be run twice
NOT_REPEATABLE = (
    "dropout",
    "rand",
    "bernoulli",
    "multinomial",
    "normal",
    "uniform_",
    "exponential_",
    "empty",
    "Distributed.",
    "manual_seed",
    "item",
    "tolist",
    "numpy",
    "asnumpy",
    "__bool__",
    "__setitem__",
)


class FreeBenchmarkCalls:
    """The free benchmark's handling of one API call, for any framework.

    A backend subclasses it and supplies the tensor operations (the abstract
    methods below) and how calls reach ``call`` (usually the core
    :class:`~msprobe.core.api_patch.ApiPatcher` over its API list).
    """

    def __init__(self, session: Any, perturb: Any):
        self.session = session
        self.section = section = session.config.free_benchmark
        self.perturb = perturb
        self.fix = section.handler_type == "fix"
        self.stage = section.fuzz_stage
        self.judge = FreeBenchmarkJudge(
            session.config.dump_path,
            section.pert_mode,
            preheat_steps=section.preheat_step if section.if_preheat else 0,
            max_sample=section.max_sample,
        )
        self.counts: dict[str, int] = {}
        self._warned: set[str] = set()

    # -- what a backend supplies ---------------------------------------------------------
    def is_floating(self, value: Any) -> bool:
        raise NotImplementedError

    def map_tensors(self, value: Any, function: Any) -> Any:
        raise NotImplementedError

    def outputs(self, value: Any) -> list:
        raise NotImplementedError

    def to_float64(self, tensor: Any) -> np.ndarray:
        raise NotImplementedError

    def cast_like(self, perturbed: Any, original: Any) -> Any:
        """The perturbed result in the dtype (and device) the training expects."""
        raise NotImplementedError

    def no_grad(self) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def backward_check(self, original: Any, name: str, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError("fuzz_stage 'backward' is not supported by this backend")

    # -- TaskHooks, for a backend that sets ``self.patcher`` (an ApiPatcher calling ``handle``) --
    patcher: Any = None

    def install(self) -> None:
        self.patcher.install()

    def remove(self) -> None:
        self.patcher.remove()

    def handle(self, original: Any, key: str, args: tuple, kwargs: dict) -> Any:
        state = self.patcher.state
        state.busy = True
        try:
            return self.call(original, key, args, kwargs)
        finally:
            state.busy = False

    # -- selection ---------------------------------------------------------------------------
    def selected_api(self, key: str) -> bool:
        if any(marker in key for marker in NOT_REPEATABLE):
            return False
        return not self.section.api_list or any(item in key for item in self.section.api_list)

    @staticmethod
    def writes_in_place(key: str, args: tuple, kwargs: dict) -> bool:
        """In-place calls (add_, x[i] = y, inplace=True, out=) cannot be run a second time."""
        api = key.rsplit(".", 1)[-1]
        if (api.endswith("_") and not api.endswith("__")) or api.startswith("__i") or api == "__setitem__":
            return True
        if "out" in kwargs or kwargs.get("inplace") is True:
            return True
        return key.split(".", maxsplit=1)[0] in ("Functional", "MintFunctional") and any(
            arg is True for arg in args[1:]
        )

    def first_floating(self, args: tuple, kwargs: dict) -> Any:
        for value in [*args, *kwargs.values()]:
            if self.is_floating(value):
                return value
            if isinstance(value, (list, tuple)):
                for item in value:
                    if self.is_floating(item):
                        return item
        return None

    def verdict(self) -> tuple[int, str]:
        """The end-of-run line: what failed and the worst, or how many checks passed, or why none was made."""
        rank = self.session.rank
        return self.judge.verdict(self.stage, "" if rank is None else f" on rank {rank}")

    # -- one call -------------------------------------------------------------------------------
    def end_step(self) -> None:
        self.counts.clear()

    def call(self, original: Any, key: str, args: tuple, kwargs: dict) -> Any:
        index = self.counts.get(key, 0)
        self.counts[key] = index + 1
        name = f"{key}.{index}.forward"
        scope = self.section.scope
        if (
            self.writes_in_place(key, args, kwargs)
            or (scope and name not in scope)
            or self.first_floating(args, kwargs) is None
        ):
            return original(*args, **kwargs)
        if self.stage == "backward":
            return self.backward_check(original, name, args, kwargs)
        return self.forward_check(original, name, args, kwargs)

    def forward_check(self, original: Any, name: str, args: tuple, kwargs: dict) -> Any:
        try:
            perturbed_args = self.map_tensors(args, self.perturb)
            perturbed_kwargs = self.map_tensors(kwargs, self.perturb)
        except Exception as exc:
            self.warn(name, f"the perturbation failed ({_first_line(exc)})", exc)
            return original(*args, **kwargs)
        output = original(*args, **kwargs)
        try:
            if self.fix:
                return self.fixed(output, original(*perturbed_args, **perturbed_kwargs))
            with self.no_grad():
                perturbed = original(*perturbed_args, **perturbed_kwargs)
            self.compare(name, output, perturbed, "forward", self.first_floating(args, kwargs))
        except Exception as exc:
            self.warn(
                name, f"the perturbed run or its comparison failed ({exc.__class__.__name__}: {_first_line(exc)})", exc
            )
        return output

    def compare(self, name: str, output: Any, perturbed: Any, stage: str, reference: Any) -> None:
        plain, moved = self.outputs(output), self.outputs(perturbed)
        several = len(plain) > 1
        for index, (a, b) in enumerate(zip(plain, moved)):
            if a is None or b is None or not self.is_floating(a):
                continue
            self.judge_pair(name, a, b, stage, reference, index if several else None)

    def compare_gradients(self, name: str, reference: Any, input_gradients: Any) -> None:
        """Backward stage: ``input_gradients(transform)`` gives the API's input gradients with transformed inputs.

        Runs it with the inputs as they are and perturbed, and judges each
        pair; the backend's own calls inside are not intercepted again.
        """
        state = self.state
        busy = state.busy
        state.busy = True
        try:
            plain, moved = input_gradients(lambda tensor: tensor), input_gradients(self.perturb)
            for index, (a, b) in enumerate(zip(plain, moved)):
                if a is not None and b is not None:
                    self.judge_pair(name.replace(".forward", ".backward"), a, b, "backward", reference, index)
        except Exception as exc:
            self.warn(name, f"the backward check failed ({exc.__class__.__name__}: {_first_line(exc)})", exc)
        finally:
            state.busy = busy

    def judge_pair(self, name: str, a: Any, b: Any, stage: str, reference: Any, index: Any) -> None:
        source = reference if reference is not None else a
        self.judge.judge(
            api=name,
            original=self.to_float64(a),
            perturbed=self.to_float64(b),
            dtype=dtype_key(source.dtype),
            shape=self.shape_of(source),
            step=self.session.step,
            rank=self.session.rank or 0,
            stage=stage,
            output_index=index,
        )

    def shape_of(self, tensor: Any) -> list:
        """The shape the report gives (a backend may show what lies under a framework's wrappers)."""
        return list(tensor.shape)

    def fixed(self, output: Any, perturbed: Any) -> Any:
        if isinstance(output, (list, tuple)) and isinstance(perturbed, (list, tuple)):
            items = [self.fixed(a, b) for a, b in zip(output, perturbed)]
            return type(output)(*items) if hasattr(output, "_fields") else type(output)(items)
        if self.is_floating(output) and self.is_floating(perturbed):
            return self.cast_like(perturbed, output)
        return output

    def warn(self, name: str, reason: str, exc: BaseException) -> None:
        """Once per API; the call's own result stands (with ``strict``, ``exc`` is raised instead)."""
        if self.session.config.strict:
            raise exc
        base = kind_of(name)
        if base not in self._warned:
            self._warned.add(base)
            logger.warning("msprobe free benchmark: %s: %s; it is skipped", name, reason)


def chosen_perturbation(section: Any, perturbations: dict[str, Any], framework: str) -> Any:
    """The perturbation ``pert_mode`` names, if one is installed for ``framework`` and, for ``handler_type``
    ``fix``, declares that it can fix."""
    mode = section.pert_mode
    if mode not in perturbations:
        known = ", ".join(sorted(perturbations))
        raise UsageError(f"free_benchmark.pert_mode '{mode}' is not available for {framework} ({known})")
    chosen = perturbations[mode]
    if section.handler_type == "fix" and not chosen.fix:
        able = ", ".join(sorted(name for name, p in perturbations.items() if p.fix)) or "none"
        raise UsageError(
            f"free_benchmark.handler_type 'fix' needs a perturbation that declares fix=True; "
            f"'{mode}' does not (those that do: {able})"
        )
    return chosen

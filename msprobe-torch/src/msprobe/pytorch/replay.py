"""Replay a module call of a tensor dump in this process, with this run's and the golden run's inputs and weights.

The module is the live one (its code, its arguments, this process's kernels); what it is given comes from the
dumps: the call's positional and keyword inputs, and the parameters of the module and of every module inside
it as the dump recorded them at that call (the live model's weights have moved on since). Buffers (running
statistics) are the live module's, copied, so the replay changes nothing; so are the parameters neither dump
recorded (a weight its module's parent reads without calling it), which the report lists: give the model as
the run built it. See msprobe.core.replay for the verdict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from msprobe.core.dump.entry_names import FORWARD, parse_entry
from msprobe.core.dump.reader import Dump, read_dump
from msprobe.core.errors import MsprobeError
from msprobe.core.precheck.rebuild import decode
from msprobe.core.replay import ReplayReport, Trial, decide, relative_error
from msprobe.core.trees import is_tensor_summary, leaves
from msprobe.pytorch.tensor_io import tensors_in

THIS, GOLDEN = "this run's", "the golden run's"
SEED = 20261207  # the random numbers every run of the module draws alike


class ReplayError(MsprobeError):
    """What the replay cannot do with the dumps and model it was given (one clear line)."""


def replay_module(
    model: torch.nn.Module, module: str, npu_path: str | Path, bench_path: str | Path, call: int = 0
) -> ReplayReport:
    """Replay call ``call`` of ``model``'s module at path ``module`` (as in construct.json) with the inputs and
    weights of the tensor dumps ``npu_path`` (this run's step folder) and ``bench_path`` (the golden run's),
    and say which of the golden run's values bring its output back."""
    target = _submodule(model, module)
    ours, theirs = _dump(npu_path, "npu_path"), _dump(bench_path, "bench_path")
    entry = _entry(ours, module, call, "npu_path")
    golden_entry = _entry(theirs, module, call, "bench_path")
    if entry.rsplit(".", 3)[0] != golden_entry.rsplit(".", 3)[0]:
        raise ReplayError(f"{module}: the runs hold other classes there ({entry}, {golden_entry})")
    inputs = {THIS: _inputs(ours, entry), GOLDEN: _inputs(theirs, golden_entry)}
    recorded = {THIS: _weights(ours, target, module, call), GOLDEN: _weights(theirs, target, module, call)}
    _passed_to_calls(target, module, ours, theirs, recorded)
    weights, unrecorded = _completed(target, module, recorded)
    outputs = {THIS: _outputs(ours, entry), GOLDEN: _outputs(theirs, golden_entry)}
    # every run draws the same random numbers; a second draw of this run's own shows whether the module draws any
    replayed = {
        (source, held): _run(target, inputs[source], weights[held], SEED)
        for source, held in ((THIS, THIS), (GOLDEN, THIS), (THIS, GOLDEN), (GOLDEN, GOLDEN))
    }
    redrawn = _run(target, inputs[THIS], weights[THIS], SEED + 1)
    report = ReplayReport(
        module,
        entry,
        baseline=relative_error(outputs[THIS], outputs[GOLDEN]),
        reproduced=relative_error(replayed[(THIS, THIS)], outputs[THIS]),
        random=relative_error(redrawn, replayed[(THIS, THIS)]) > 0.0,
        unrecorded=unrecorded,
    )
    for source, held in ((GOLDEN, THIS), (THIS, GOLDEN), (GOLDEN, GOLDEN)):
        report.trials.append(Trial(source, held, relative_error(replayed[(source, held)], outputs[GOLDEN])))
    report.cause, report.words = decide(
        report.baseline, report.reproduced, report.trials, report.random, report.unrecorded
    )
    return report


def _dump(path: str | Path, field: str) -> Dump:
    folder = Path(path)
    if not (folder / "dump.json").is_file():
        raise ReplayError(f"{field}: {folder} holds no dump.json (give a step and rank folder of a tensor dump)")
    dump = read_dump(folder)
    if dump.task != "tensor":
        raise ReplayError(f"{field}: {folder} is a '{dump.task}' dump: replay needs the tensors (task 'tensor')")
    return dump


def _submodule(model: torch.nn.Module, path: str) -> torch.nn.Module:
    try:
        return model.get_submodule(path) if path else model
    except AttributeError:
        raise ReplayError(f"module '{path}': the model has no module at that path") from None


def _entry(dump: Dump, module: str, call: int, field: str) -> str:
    for name in dump.data:
        parsed = parse_entry(name)
        if (
            parsed
            and parsed.is_module
            and parsed.path == module
            and parsed.direction == FORWARD
            and parsed.count == call
        ):
            return name
    raise ReplayError(f"{field}: no forward call {call} of module '{module}' in {dump.folder}")


def _tensor(dump: Dump, summary: dict) -> torch.Tensor:
    name = summary.get("data_name")
    path = dump.tensor_file(name) if isinstance(name, str) else None
    if path is None or not path.is_file():
        raise ReplayError(
            f"{dump.folder}: the tensor {name or '(unnamed)'} is not in the dump: replay needs its values"
        )
    if path.suffix == ".pt":
        tensor = torch.load(path, map_location="cpu", weights_only=True)
    else:
        tensor = torch.from_numpy(np.load(path, allow_pickle=False))
    return tensor if isinstance(tensor, torch.Tensor) else torch.as_tensor(tensor)


def _object(kind: str, encoded: dict) -> Any:
    if kind == "torch.dtype":
        return getattr(torch, str(encoded.get("value", "")).replace("torch.", ""), None)
    if kind == "torch.device":
        return torch.device("cpu")
    return encoded.get("value")


def _inputs(dump: Dump, entry: str) -> tuple[Any, Any]:
    content = dump.data[entry]
    value = lambda encoded: decode(encoded, lambda summary: _tensor(dump, summary), _object)  # noqa: E731
    return value(content.get("input_args", [])), value(content.get("input_kwargs", {}))


def _outputs(dump: Dump, entry: str) -> list[np.ndarray]:
    summaries = leaves(dump.data[entry].get("output"), is_tensor_summary)
    found = [_tensor(dump, summary).detach().to(torch.float64).numpy() for summary in summaries]
    if not found:
        raise ReplayError(f"{dump.folder}: {entry} has no tensor output to compare")
    return found


def _passed_to_calls(
    target: torch.nn.Module, module: str, ours: Dump, theirs: Dump, recorded: dict[str, dict[str, torch.Tensor]]
) -> None:
    """A parameter neither module entry recorded, found where this run's dump has it as an argument of a call
    made inside the module (a mixer handing its convolution's weight to ``conv1d``): the tensor there equal to
    the model's parameter, bit for bit, is that parameter, and the golden run's argument at the same place is
    its golden value. Only the model as the run had it at that call matches: a later step's weights have moved."""
    missing = {name: p for name, p in target.named_parameters() if all(name not in side for side in recorded.values())}
    if not missing:
        return
    inside = [name for name, parent in (ours.construct or {}).items() if _within(parent, module)]
    for entry in inside:
        content = ours.data.get(entry)
        if not isinstance(content, dict) or not entry.endswith(".forward") or not missing:
            continue
        for path, summary in _tensor_inputs(content):
            name = next((n for n, p in missing.items() if list(p.shape) == summary.get("shape")), None)
            if name is None or not isinstance(summary.get("data_name"), str):
                continue
            try:
                value = _tensor(ours, summary)
            except ReplayError:
                continue
            if value.dtype != missing[name].dtype or not torch.equal(value, missing[name].detach()):
                continue
            golden = _at(theirs.data.get(entry), path)
            if isinstance(golden, dict) and golden.get("shape") == summary.get("shape"):
                recorded[THIS][name] = value
                recorded[GOLDEN][name] = _tensor(theirs, golden).to(value.dtype)
                del missing[name]


def _within(parent: Any, module: str) -> bool:
    parsed = parse_entry(parent) if isinstance(parent, str) else None
    path = parsed.path if parsed is not None and parsed.is_module else None
    return path is not None and (not module or path == module or path.startswith(f"{module}."))


def _tensor_inputs(content: dict) -> list[tuple[tuple, dict]]:
    found: list[tuple[tuple, dict]] = []

    def walk(value: Any, path: tuple) -> None:
        if is_tensor_summary(value):
            found.append((path, value))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, (*path, index))

    walk(content.get("input_args"), ("input_args",))
    walk(content.get("input_kwargs"), ("input_kwargs",))
    return found


def _at(value: Any, path: tuple) -> Any:
    for part in path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            value = value[part]
        else:
            return None
    return value


def _completed(
    target: torch.nn.Module, module: str, recorded: dict[str, dict[str, torch.Tensor]]
) -> tuple[dict[str, dict[str, torch.Tensor]], list[str]]:
    """Each side's parameters, those a dump did not record taken from the model as given (a module whose weight
    its parent reads without calling it, as attention reads its output projection's, records none; a run whose
    code skips a module records none of its weights); the list of those, with the side that lacked them."""
    unrecorded = []
    for name, parameter in target.named_parameters():
        lacking = [side for side, weights in recorded.items() if name not in weights]
        for side in lacking:
            recorded[side][name] = parameter.detach().clone()
        if lacking:
            sides = "both" if len(lacking) == len(recorded) else lacking[0]
            unrecorded.append(f"{module + '.' if module else ''}{name} ({sides})")
    return recorded, unrecorded


def _weights(dump: Dump, target: torch.nn.Module, module: str, call: int) -> dict[str, torch.Tensor]:
    """Every parameter of the module and of the modules inside it that the dump recorded at that call (the
    same call of each inner module: a module called once per call of the one around it)."""
    recorded: dict[str, dict] = {}
    for name, content in dump.data.items():
        parsed = parse_entry(name)
        if not (parsed and parsed.is_module and parsed.direction == FORWARD and parsed.count == call):
            continue
        path = parsed.path or ""
        if path != module and not path.startswith(f"{module}.") and module:
            continue
        inner = path[len(module) + 1 :] if module and path != module else "" if module else path
        for label, summary in (content.get("parameters") or {}).items() if isinstance(content, dict) else ():
            recorded[f"{inner}.{label}" if inner else label] = summary
    weights = {}
    for name, parameter in target.named_parameters():
        summary = recorded.get(name)
        if isinstance(summary, dict):
            weights[name] = _tensor(dump, summary).to(parameter.dtype)
    return weights


def _run(
    target: torch.nn.Module, inputs: tuple[Any, Any], weights: dict[str, torch.Tensor], seed: int
) -> list[np.ndarray]:
    args, kwargs = inputs
    state = {**{name: buffer.clone() for name, buffer in target.named_buffers()}, **weights}
    with torch.no_grad(), _quiet(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        output = torch.func.functional_call(target, state, tuple(args), dict(kwargs))
    return [tensor.detach().to(torch.float64).numpy() for tensor in tensors_in(output)]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No debugger of this process records the replay's calls."""
    from msprobe.core.api_patch import unrecorded

    with unrecorded():
        yield

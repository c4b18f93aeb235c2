"""How a dump of ours must agree with the reference tool's dump of the same run.

Every allowance here is one of the deliberate differences listed in
docs/differences.md; anything else must be equal.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# torch's full backward hooks, which the reference wraps every module in, call Tensor.view_as on the
# module's inputs and outputs; the reference records those calls as if the model had made them
HOOK_FRAMES = ("torch/utils/hooks.py",)
# Mean and Norm: the reference reduces in the tensor's dtype with torch's summation order, ours in double and
# rounds once, so the two may differ in the last bits of float32. The bound is |error| <= log2(n) * eps * sum|x|
# for torch's pairwise sums; 64 float32 epsilons of the largest magnitude covers any tensor below 2**64 elements.
FLOAT32_EPS = 2.0**-23
SUM_ROUNDING = 64 * FLOAT32_EPS
STATISTICS = ("Max", "Min", "Mean", "Norm")


def read_step(root: Path, step: int) -> dict[str, Any]:
    folder = root / f"step{step}" / "rank"
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in ("dump", "stack", "construct")}


def hook_calls(step: dict[str, Any]) -> set[str]:
    """The reference's entries made by torch's hook machinery, not by the model (and their backward)."""
    made = set()
    for name, frames in step["stack"].items():
        text = " ".join(frames) if isinstance(frames, list) else str(frames)
        if name.startswith("Tensor.view_as.") and any(frame in text for frame in HOOK_FRAMES):
            made.add(name)
            made.add(name.replace(".forward", ".backward"))
    return made


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _same_number(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, float) and isinstance(theirs, float) and math.isnan(ours) and math.isnan(theirs):
        return True
    if {type(ours), type(theirs)} == {int, float}:  # 3 and 3.0 read alike but are written differently
        return False
    return ours == theirs


FLOAT32_MAX = 3.4028234663852886e38
# calls that hand their input back unchanged: the reference reports what its wrapper node around the output
# sees, ours the gradient arriving at the tensor (docs/differences.md); their backward values may differ
HANDED_BACK = ("Functional.dropout.",)


def _norm_overflowed_in_float32(ours: Any, theirs: Any) -> bool:
    """The reference sums an integer tensor's squares in float32, which overflows to inf where the norm itself
    is in range; ours sums in double."""
    return theirs == math.inf and isinstance(ours, float) and math.isfinite(ours) and ours * ours > FLOAT32_MAX


def _norm_underflowed_in_float32(ours: Any, theirs: Any, magnitude: float) -> bool:
    """Squares of values below ~1e-23 underflow to 0 in the reference's float32 sum; ours are summed in double."""
    return theirs == 0.0 and isinstance(ours, float) and 0.0 < ours and magnitude < 1e-22


def _close(ours: Any, theirs: Any, scale: float) -> bool:
    if not (isinstance(ours, (int, float)) and isinstance(theirs, (int, float))):
        return _same_number(ours, theirs)
    if not (math.isfinite(ours) and math.isfinite(theirs)):
        return _same_number(ours, theirs)
    return abs(ours - theirs) <= SUM_ROUNDING * scale


# at L0 and mix the reference wraps every module in torch's backward hooks, whose extra autograd nodes change
# the order gradients are summed in: its gradients, and so its second step, differ from an untouched run's
# (ours are the untouched run's) in the last bits of float32
PERTURBED = 1e-4
# ... and a gradient that is zero in exact arithmetic (an attention key's bias: softmax ignores a shift shared by
# all keys) is float32 cancellation noise, around 1e-12, in either run; AdamW turns that noise into updates of
# about 1e-7. A tensor whose values all lie below this bound is such noise in both runs, and is not compared
CANCELLATION_NOISE = 1e-6


def tensor_differences(ours: dict, theirs: dict, where: str, perturbed: bool = False) -> list[str]:
    """A tensor summary: equal fields, statistics equal or within the rounding of the reference's sums."""
    problems = []
    keys_ours = [k for k in ours if k != "data_name"]
    keys_theirs = [k for k in theirs if k != "data_name"]
    if keys_ours != keys_theirs:
        problems.append(f"{where}: keys {keys_ours} != reference {keys_theirs}")
        return problems
    float64 = theirs.get("dtype") == "torch.float64"  # the reference measures float64 in float32
    finite = [
        abs(v) for v in (theirs.get("Max"), theirs.get("Min")) if isinstance(v, (int, float)) and math.isfinite(v)
    ]
    magnitude = max(finite, default=0.0)
    for key in keys_ours:
        mine, reference = ours[key], theirs[key]
        if perturbed and key in (*STATISTICS, "Max_except_inf_nan", "Min_except_inf_nan"):
            scale = max(magnitude, abs(mine) if _number(mine) else 0.0)
            noise = magnitude < CANCELLATION_NOISE and _number(mine) and abs(mine) < CANCELLATION_NOISE
            overflowed = key == "Norm" and _norm_overflowed_in_float32(mine, reference)
            if not (noise or overflowed or _close(mine, reference, scale * PERTURBED / SUM_ROUNDING)):
                problems.append(f"{where}.{key}: {mine!r} != reference {reference!r} (beyond the hooks' rounding)")
        elif key in ("Mean", "Norm"):
            scale = magnitude if key == "Mean" else abs(reference) if isinstance(reference, (int, float)) else 0.0
            if not (
                _close(mine, reference, scale)
                or _norm_overflowed_in_float32(mine, reference)
                or _norm_underflowed_in_float32(mine, reference, magnitude)
            ):
                problems.append(f"{where}.{key}: {mine!r} != reference {reference!r}")
        elif key in ("Max", "Min", "Max_except_inf_nan", "Min_except_inf_nan") and float64:
            if not _close(mine, reference, abs(reference) / 64 if isinstance(reference, float) else 0.0):
                problems.append(f"{where}.{key}: {mine!r} != reference {reference!r} (float64)")
        elif not _same_number(mine, reference):
            problems.append(f"{where}.{key}: {mine!r} != reference {reference!r}")
    return problems


def value_differences(ours: Any, theirs: Any, where: str, perturbed: bool = False) -> list[str]:
    if isinstance(theirs, dict) and isinstance(ours, dict):
        if "dtype" in theirs and "shape" in theirs:
            return tensor_differences(ours, theirs, where, perturbed)
        if list(ours) != list(theirs):
            return [f"{where}: keys {list(ours)} != reference {list(theirs)}"]
        return [p for key in theirs for p in value_differences(ours[key], theirs[key], f"{where}.{key}", perturbed)]
    if isinstance(theirs, list) and isinstance(ours, list):
        if len(ours) != len(theirs):
            return [f"{where}: {len(ours)} items != reference {len(theirs)}"]
        pairs = enumerate(zip(ours, theirs))
        return [p for i, (a, b) in pairs for p in value_differences(a, b, f"{where}.{i}", perturbed)]
    return [] if _same_number(ours, theirs) else [f"{where}: {ours!r} != reference {theirs!r}"]


def _made_by_the_backward(name: str) -> bool:
    return name.endswith(".backward") or name.endswith("parameters_grad") or ".backward." in name


def step_differences(ours: dict[str, Any], theirs: dict[str, Any], perturbed: bool | str = False) -> list[str]:
    """Every way one step of our dump departs from the reference's, beyond the documented allowances.
    ``perturbed``: the reference ran with module hooks (L0, mix), see PERTURBED; ``"from the backward"``: only
    the entries from the step's first gradient on (the forward before it was computed on the same values, and
    is held to the plain rounding allowance)."""
    skipped = hook_calls(theirs)
    reference_names = [n for n in theirs["dump"]["data"] if n not in skipped]
    our_names = list(ours["dump"]["data"])
    problems = []

    def in_order(names: list[str]) -> list[str]:  # a handed-back call's backward comes when its gradient does
        return [n for n in names if not (n.endswith(".backward") and n.startswith(HANDED_BACK))]

    if set(our_names) != set(reference_names) or in_order(our_names) != in_order(reference_names):
        missing = [n for n in reference_names if n not in our_names]
        extra = [n for n in our_names if n not in reference_names]
        first = next(
            (i for i, (a, b) in enumerate(zip(in_order(our_names), in_order(reference_names))) if a != b), None
        )
        order = "same" if first is None else f"differs from {in_order(reference_names)[first]!r} on"
        problems.append(f"entry names: missing {missing[:10]}, extra {extra[:10]}, order {order}")
    gradients_begun = perturbed is True
    for name in reference_names:
        gradients_begun = gradients_begun or bool(perturbed and _made_by_the_backward(name))
        if name not in ours["dump"]["data"]:
            continue
        if name.endswith(".backward") and name.startswith(HANDED_BACK):
            continue
        mine, reference = ours["dump"]["data"][name], theirs["dump"]["data"][name]
        found = value_differences(mine, reference, name, gradients_begun)
        if found and _in_place_module(name, reference):
            found = value_differences(_without_inputs(mine), _without_inputs(reference), name, gradients_begun)
        problems += found
    reference_construct = {k: v for k, v in theirs["construct"].items() if k not in skipped}
    for name, parent in ours["construct"].items():
        if parent is None and reference_construct.get(name) == "":  # a call before the first module opened
            reference_construct[name] = parent
    if set(ours["construct"]) != set(reference_construct):
        problems.append("construct.json keys differ")
    else:
        problems += [
            f"construct {name}: parent {ours['construct'][name]!r} != reference {parent!r}"
            for name, parent in reference_construct.items()
            if ours["construct"][name] != parent
        ]
    if set(ours["stack"]) != {k for k in theirs["stack"] if k not in skipped}:
        problems.append("stack.json keys differ")
    else:
        problems += stack_differences(ours["stack"], theirs["stack"])
    return problems


def _frame(text: str) -> str:
    """A frame with its file's path from site-packages on: the two tools run from different environments."""
    head, _, rest = text.partition("site-packages/")
    return rest if rest else head


def stack_differences(ours: dict[str, list[str]], theirs: dict[str, list[str]]) -> list[str]:
    """docs/differences.md: the reference's frames, less its own wrapper's at the top, are ours; a Module entry
    of ours starts with the two torch frames that ran its hook."""
    problems = []
    for name, mine in ours.items():
        reference = [_frame(f) for f in theirs[name] if "site-packages/msprobe/" not in f]
        mine = [_frame(f) for f in mine]
        if name.startswith("Module."):
            leading = [f.split(", in ")[1].split(",")[0] for f in mine[:2]]
            if leading != ["inner", "_call_impl"] or not all(f.startswith(TORCH_MODULE_FILE) for f in mine[:2]):
                problems.append(f"stack {name}: starts with {mine[:2]!r}, not the torch frames that ran its hook")
            mine = mine[2:]
        if mine != reference:
            at = next((i for i, (a, b) in enumerate(zip(mine, reference)) if a != b), min(len(mine), len(reference)))
            problems.append(
                f"stack {name}: frame {at} differs: {mine[at : at + 1]!r} != reference {reference[at : at + 1]!r}"
            )
    return problems


TORCH_MODULE_FILE = "torch/nn/modules/module.py"


def _in_place_module(name: str, theirs: dict) -> bool:
    """A module that wrote its input in place: the reference measures its input after the call (then equal to
    its output), ours before it (docs/differences.md)."""
    if not (name.startswith("Module.") and ".forward." in name):
        return False
    inputs, outputs = theirs.get("input_args") or [], theirs.get("output") or []
    return bool(inputs) and inputs[:1] == outputs[:1]


def _without_inputs(entry: dict) -> dict:
    return {key: value for key, value in entry.items() if key != "input_args"}

"""The diagnosis of level L0 dumps (modules alone, no API call), on dumps written by hand.

A small model, embed -> block (norm -> fc -> act, then its own code) -> head, with its backward and its
parameter gradients; a test changes values of one run the way a fault would, and checks the answer that
follows from how they were written. Faults injected into real trainings at level L0 are scored by
``bench/bench_diagnosis.py --level L0``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprobe.core.diagnosis import diagnose_pair, diagnose_runs


def tensor(mean: float, shape: tuple = (2, 4, 8), dtype: str = "torch.float32", grad: bool = False) -> dict:
    """A tensor's summary; the other statistics follow from the mean, so equal means are equal values."""
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mean + 1.0, "Min": mean - 1.0,
            "Mean": mean, "Norm": abs(mean) * 10 + 3.0, "requires_grad": grad}  # fmt: skip


def scaled(value: dict, factor: float) -> dict:
    """The same tensor times ``factor`` (> 0): every statistic scaled alike."""
    return {**value, **{key: value[key] * factor for key in ("Max", "Min", "Mean", "Norm")}}


def rounded(value: dict, error: float) -> dict:
    """The same tensor with other low bits: each statistic moved its own way by about ``error``."""
    moved = {"Max": 1 + error, "Min": 1 - error, "Mean": 1 + 0.5 * error, "Norm": 1 + 0.25 * error}
    return {**value, **{key: value[key] * factor for key, factor in moved.items()}}


BENCH = {
    "tokens": tensor(3.0, (2, 4), "torch.int64"),
    "e": tensor(0.11, grad=True), "n": tensor(0.22, grad=True), "f": tensor(0.33, grad=True),
    "a": tensor(0.44, grad=True), "g": tensor(0.55, grad=True), "logits": tensor(0.66, grad=True),
    "w_embed": tensor(0.01, (16, 8), grad=True), "w_norm": tensor(1.02, (8,), grad=True),
    "w_fc": tensor(0.03, (8, 8), grad=True), "w_head": tensor(0.04, (8, 8), grad=True),
    "d_logits": tensor(0.05), "d_g": tensor(0.06), "d_a": tensor(0.07), "d_f": tensor(0.08), "d_n": tensor(0.09),
    "d_e": tensor(0.10),
    "g_embed": tensor(0.012, (16, 8)), "g_norm": tensor(0.013, (8,)), "g_fc": tensor(0.014, (8, 8)),
    "g_head": tensor(0.015, (8, 8)),
}  # fmt: skip

# (path, class, input, output, weight, weight's gradient, gradient given, gradient returned)
MODULES = [
    ("embed", "Embedding", "tokens", "e", "w_embed", "g_embed", "d_e", None),
    ("block.norm", "LayerNorm", "e", "n", "w_norm", "g_norm", "d_n", "d_e"),
    ("block.fc", "Linear", "n", "f", "w_fc", "g_fc", "d_f", "d_n"),
    ("block.act", "GELU", "f", "a", None, None, "d_a", "d_f"),
    ("block", "Block", "e", "g", None, None, "d_g", "d_e"),
    ("head", "Linear", "g", "logits", "w_head", "g_head", "d_logits", "d_g"),
]


def step(
    skip: tuple[str, ...] = (), classes: dict | None = None, mask: tuple | None = None, head_given: str = "g", **changed
) -> tuple:
    """One step's dump.json data and construct.json: the modules' forward entries as they end (a module
    after those inside it) with their parameter gradients beside them, then the backward entries. ``skip``:
    modules this run does not call; ``mask``: (value given to block.norm and block, value given to head);
    ``head_given``: the value the head is given (code no dump records may stand between block and head)."""
    values = {**BENCH, **changed}
    data, construct = {}, {}
    for path, cls, given, made, weight, grad, *_ in MODULES:
        if path in skip:
            continue
        name = f"Module.{path}.{(classes or {}).get(path, cls)}.forward.0"
        inputs = [values[head_given if path == "head" else given]]
        if mask is not None and path in ("block.norm", "block", "head"):
            inputs.append(mask[1] if path == "head" else mask[0])
        data[name] = {"input_args": inputs, "input_kwargs": {}, "output": [values[made]]}
        if weight:
            data[name]["parameters"] = {"weight": values[weight]}
            data[name.replace("forward.0", "parameters_grad")] = {"weight": [values[grad]]}
        construct[name] = "Module.block.Block.forward.0" if path.startswith("block.") else None
    for path, cls, *_, given_grad, made_grad in reversed(MODULES):
        if path in skip or path == "block":
            continue
        name = f"Module.{path}.{(classes or {}).get(path, cls)}.backward.0"
        outputs = [values[made_grad]] if made_grad else []
        data[name] = {"input": [values[given_grad]], "output": outputs}
        construct[name] = "Module.block.Block.backward.0" if path.startswith("block.") else None
        if path == "block.norm":  # the block's own backward entry ends after those inside it
            data["Module.block.Block.backward.0"] = {"input": [values["d_g"]], "output": [values["d_e"]]}
            construct["Module.block.Block.backward.0"] = None
    return data, construct


def write(folder: Path, run: tuple) -> Path:
    data, construct = run
    folder.mkdir(parents=True, exist_ok=True)
    header = {"task": "statistics", "level": "L0", "framework": "pytorch", "dump_data_dir": None}
    (folder / "dump.json").write_text(json.dumps({**header, "data": data}))
    (folder / "construct.json").write_text(json.dumps(construct))
    (folder / "stack.json").write_text("{}")
    return folder


def pair(tmp_path: Path, ours: tuple, theirs: tuple | None = None):
    return diagnose_pair(write(tmp_path / "ours", ours), write(tmp_path / "theirs", theirs or step()))


def noisy(**changed) -> dict:
    """What another machine's run makes: every matrix product (fc, head) rounds differently, and what
    follows them differs by as much; the lookup and the norm before them agree."""
    base = {key: rounded(BENCH[key], 2e-3) for key in ("f", "a", "g", "logits")}
    base |= {key: rounded(BENCH[key], 3e-3) for key in ("d_logits", "d_g", "d_a", "d_f", "d_n", "d_e")}
    base |= {key: rounded(BENCH[key], 4e-3) for key in ("g_embed", "g_norm", "g_fc", "g_head")}
    return base | changed


def test_identical_module_dumps_do_not_part_ways(tmp_path):
    assert pair(tmp_path, step()).verdict == "none"


def test_a_rounding_sized_difference_after_a_matrix_product_agreed_is_named(tmp_path):
    """The block's own code differs by 1e-5 while fc, a matrix product, agreed bit for bit: the machines
    compute alike, so this is no rounding."""
    found = pair(tmp_path, step(g=rounded(BENCH["g"], 1e-5), logits=rounded(BENCH["logits"], 1e-5)))
    assert (found.verdict, found.module, found.cause) == ("divergence", "block", "computation")


def test_a_rounding_sized_difference_with_no_matrix_product_before_it_is_uncertain(tmp_path):
    """The norm is the first module that computes, off by a few float32 units: nothing says the machines
    compute alike."""
    rest = {key: rounded(BENCH[key], 2e-6) for key in ("n", "f", "a", "g", "logits")}
    assert pair(tmp_path, step(**rest)).verdict == "uncertain"


def test_a_norm_further_off_than_its_rounding_is_named_with_no_matrix_product_before_it(tmp_path):
    """The norm, given the same input and weight, is 5e-3 off in float32 (another eps, say): no machine's
    norm rounds that far, though what follows it differs as much and no earlier call agreed."""
    rest = {key: rounded(BENCH[key], 5e-3) for key in ("n", "f", "a", "g", "logits")}
    found = pair(tmp_path, step(**rest))
    assert (found.verdict, found.module, found.cause) == ("divergence", "block.norm", "computation")


def test_a_low_precision_norm_or_a_module_of_unknown_work_as_far_off_is_uncertain(tmp_path):
    """In bfloat16 5e-3 is a unit or two; a module whose class says nothing of its work may multiply by a
    matrix in its own code (TF32 on another machine): neither is held to float32 element-wise rounding."""

    def bf16(value: dict) -> dict:
        return {**value, "dtype": "torch.bfloat16"}

    low = {key: rounded(bf16(BENCH[key]), 5e-3) for key in ("n", "f", "a", "g", "logits")}
    bench = step(**{key: bf16(BENCH[key]) for key in ("n", "f", "a", "g", "logits")})
    assert pair(tmp_path / "bf16", step(**low), bench).verdict == "uncertain"
    rest = {key: rounded(BENCH[key], 5e-3) for key in ("n", "f", "a", "g", "logits")}
    mixer = {"block.norm": "TokenMixer"}
    assert pair(tmp_path / "mixer", step(classes=mixer, **rest), step(classes=mixer)).verdict == "uncertain"


def test_a_matrix_product_of_another_class_is_held_to_its_own_class(tmp_path):
    """One kernel agreeing (fc, a Linear) says nothing of another's (a fused recurrent layer's, say)."""
    ours = step(classes={"head": "LSTM"}, logits=rounded(BENCH["logits"], 1e-3))
    found = pair(tmp_path, ours, step(classes={"head": "LSTM"}))
    assert found.verdict == "uncertain"


def test_a_module_its_parent_no_longer_calls_is_named_in_the_parent(tmp_path):
    """The block computes fc's work itself (its weight passed to a function): no Module.block.fc entry."""
    ours = step(skip=("block.fc",), f=tensor(0.34, grad=True), a=tensor(0.45, grad=True), g=tensor(0.56, grad=True))
    found = pair(tmp_path, ours)
    assert (found.module, found.api, found.cause) == ("block", "Module.block.fc.Linear.forward.0", "calls")
    assert "this run does not call Module.block.fc.Linear.forward.0" in found.detail


def test_a_module_the_model_no_longer_calls_is_named_outside_every_module(tmp_path):
    """The model computes the head itself: nothing dumped is given its result, only the backward shows it."""
    ours = step(skip=("head",), d_g=tensor(0.061), d_a=tensor(0.071), d_f=tensor(0.081), d_n=tensor(0.091))
    found = pair(tmp_path, ours)
    assert (found.module, found.api, found.cause, found.phase) == (None, "Module.head.Linear.forward.0", "calls",
                                                                  "forward")  # fmt: skip
    assert "outside every module" in found.line()


def test_a_gradient_made_by_no_dumped_call_is_the_loss_not_the_backward(tmp_path):
    """The forward agrees and the head's backward is given another gradient: the loss (which level L0 does
    not record) or a hook made it, not the head's backward."""
    found = pair(tmp_path, step(d_logits=tensor(0.051), d_g=tensor(0.061), d_e=tensor(0.101)))
    assert (found.module, found.phase, found.cause) == ("head", "backward", "gradient")
    assert "the gradient it is given differs, made by no dumped call" in found.line()


def test_a_tensor_written_in_place_is_blamed_on_the_module_that_held_it_last(tmp_path):
    """block.norm and block are given a mask as the benchmark has it; the head is given it changed: it was
    written in place after block started (by its code, or code after it)."""
    mask, written = tensor(-0.5), tensor(-0.4)
    ours = step(mask=(mask, written), logits=tensor(0.67, grad=True))
    found = pair(tmp_path, ours, step(mask=(mask, mask)))
    assert (found.module, found.api, found.cause) == ("block", "Module.block.Block.forward.0", "inplace")
    assert "writes into it in place before Module.head.Linear.forward.0" in found.detail


def test_a_constant_given_to_many_modules_is_not_taken_for_a_written_tensor(tmp_path):
    zeros = {**tensor(0.0), "Max": 0.0, "Min": 0.0, "Mean": 0.0, "Norm": 0.0}
    ours = step(mask=(zeros, tensor(0.2)), logits=tensor(0.67, grad=True))
    found = pair(tmp_path, ours, step(mask=(zeros, zeros)))
    assert (found.module, found.cause) == ("head", "data")


def test_among_rounding_a_module_out_of_proportion_is_named_not_the_module_around_it(tmp_path):
    """act's error is a hundred times what fc handed it: act is named, not the block whose inputs agree."""
    found = pair(tmp_path, step(**noisy(a=rounded(BENCH["a"], 0.3), g=rounded(BENCH["g"], 0.3))))
    assert (found.verdict, found.module, found.api) == ("divergence", "block.act", "Module.block.act.GELU.forward.0")


def test_among_rounding_a_scaled_parameter_gradient_is_the_backward(tmp_path):
    found = pair(tmp_path, step(**noisy(g_fc=scaled(BENCH["g_fc"], 1.5))))
    assert (found.verdict, found.module, found.phase, found.cause) == ("divergence", "block.fc", "backward",
                                                                       "backward")  # fmt: skip
    assert "1.5 times the benchmark's" in found.detail


def test_among_rounding_alone_the_backward_names_nothing(tmp_path):
    assert pair(tmp_path, step(**noisy())).verdict == "uncertain"


def test_a_scaled_gradient_after_a_forward_beyond_rounding_is_no_evidence(tmp_path):
    """The forward changed more than rounding does (and the change went unnamed): a scaled gradient then
    may come from the forward, and is not blamed on the backward."""
    changed = noisy(g=rounded(BENCH["g"], 0.04), logits=rounded(BENCH["logits"], 0.04))
    changed["g_fc"] = scaled(BENCH["g_fc"], 1.5)
    found = pair(tmp_path, step(**changed))
    assert found.phase != "backward"


def test_among_rounding_a_loss_gradient_beyond_rounding_is_named(tmp_path):
    found = pair(tmp_path, step(**noisy(d_logits=rounded(BENCH["d_logits"], 0.1))))
    assert (found.verdict, found.module, found.cause) == ("divergence", "head", "gradient")


def test_after_a_noisy_step_token_ids_that_differ_are_the_data(tmp_path):
    for run in ("ours", "theirs"):
        write(tmp_path / run / "step0" / "rank", step(**noisy()) if run == "ours" else step())
        # a step after a noisy one starts from weights rounding moved, and is given other token ids
        changed = noisy(
            tokens=tensor(3.01, (2, 4), "torch.int64"),
            w_embed=rounded(BENCH["w_embed"], 1e-4),
            e=tensor(0.12, grad=True),
            n=tensor(0.23, grad=True),
        )
        later = step(**changed) if run == "ours" else step()
        write(tmp_path / run / "step1" / "rank", later)
    found = diagnose_runs(tmp_path / "ours", tmp_path / "theirs")
    assert (found.verdict, found.step, found.module, found.cause) == ("divergence", 1, "embed", "data")


def test_among_rounding_a_module_skipped_before_code_no_dump_records_is_named(tmp_path):
    """The model no longer calls block (it runs what block's children return itself), and what the head is
    given, made by code no dump records in both runs, differs beyond the noise."""
    ours = step(skip=("block",), head_given="h", **noisy(h=tensor(0.8, grad=True)))
    found = pair(tmp_path, ours, step(head_given="h", h=tensor(0.77, grad=True)))
    assert (found.verdict, found.api, found.module, found.cause) == ("divergence", "Module.block.Block.forward.0",
                                                                     None, "calls")  # fmt: skip


@pytest.mark.parametrize(("head_agrees", "verdict"), [(True, "divergence"), (False, "uncertain")])
def test_a_rounding_sized_difference_named_when_a_later_module_of_its_class_agrees(tmp_path, head_agrees, verdict):
    """fc, the first matrix product, is 1e-3 off; the head (a Linear too), given the norm's output as fc is,
    returns the benchmark's bits: the runs compute Linear alike, so fc's difference is no rounding. Where the
    head is off by as much, it may be the machine."""
    rest = {key: rounded(BENCH[key], 1e-3) for key in ("f", "a", "g")}
    if not head_agrees:
        rest["logits"] = rounded(BENCH["logits"], 1e-3)
    found = pair(tmp_path, step(head_given="n", **rest), step(head_given="n"))
    assert found.verdict == verdict
    if head_agrees:
        assert (found.module, found.cause) == ("block.fc", "computation")


def test_among_rounding_a_gradient_no_dumped_call_made_is_no_skipped_module(tmp_path):
    """The model computes block.act's work itself, with the same values; among rounding differences the
    gradient fc's backward is given (which block.act's backward made in the benchmark) is 5% off: a gradient
    through other code may be, and the forward says the module's work was done alike."""
    ours = step(skip=("block.act",), **noisy(d_f=rounded(BENCH["d_f"], 0.05)))
    assert pair(tmp_path, ours).verdict == "uncertain"

"""Our dumps of the zoo against the reference tool's (mindstudio-probe 1.2.2), made during the test.

The reference runs in an environment of its own (the `conformance` nox
session builds it and names its Python in MSPROBE_REFERENCE_PYTHON): the two
tools share the ``msprobe`` import name. Both run the same script
(``dump_zoo.py``) on the same model, seed and data; agreement.py says what
must be equal and which documented differences are allowed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agreement import read_step, step_differences
from zoo import SEEDED, ZOO

# A module handed one tensor in several positional arguments takes another branch under the reference: its
# module hooks give each argument an object of its own, and nn.MultiheadAttention tests `query is key`.
# Ours leaves the model's computation alone, so that model is checked on its own below.
IDENTITY_TESTING = "attention"

# (task, level) runs per model: every architecture at L1 and mix, the tasks on a few. The models run after
# seed_all() with dropout left on are compared at L0 alone: at L1 and mix the reference's wrapper runs the
# dropout that seed_all took out (checked below). A mix dump holds every entry an L0 dump does, compared under
# the same tolerance, so L0 alone runs on a few architectures only (a language model, a CNN, a vision
# transformer): each other architecture's L0 run repeated its mix run's module entries
AT_L0 = ("llama", "cnn", "vit", *SEEDED)
RUNS = [
    (model, "statistics", level)
    for level in ("L1", "L0", "mix")
    for model in ZOO
    if (level == "L1" or model != IDENTITY_TESTING)
    and (level == "L0" or model not in SEEDED)
    and (level != "L0" or model in AT_L0)
] + [
    ("cnn", "md5", "L1"),
    ("moe", "md5", "L1"),
    ("llama", "md5", "L1"),  # not at L0/mix: the reference's hooks move gradients' last bits, and a CRC sees them
    ("cnn", "tensor", "L1"),
    ("moe", "tensor", "L0"),
]


@pytest.mark.parametrize(("model", "task", "level"), RUNS, ids=["-".join(run) for run in RUNS])
def test_our_dump_agrees_with_the_reference(dumps, model, task, level):
    ours, reference = dumps(model, task, level)
    for step in (0, 1):
        # the reference's module hooks move the gradients' last bits (PERTURBED): step 0's forward is exact
        perturbed = level != "L1" and (step == 1 or "from the backward")
        problems = step_differences(read_step(ours, step), read_step(reference, step), perturbed=perturbed)
        assert not problems, f"step{step}:\n" + "\n".join(problems[:40])


def test_md5_values_are_the_references(dumps):
    """md5 mode: the CRC-32 of every argument equal (the agreement check compares them too; this proves there
    were some to compare)."""

    def crcs(root: Path) -> list[str]:
        data = read_step(root, 0)["dump"]["data"]
        return [arg["md5"] for entry in data.values() for arg in entry.get("input_args", []) if "md5" in (arg or {})]

    ours, reference = dumps("cnn", "md5", "L1")
    assert len(crcs(reference)) > 10 and crcs(ours) == crcs(reference)


def test_tensor_files_hold_the_references_values(dumps):
    import torch

    ours, reference = dumps("cnn", "tensor", "L1")
    theirs = reference / "step0" / "rank" / "dump_tensor_data"
    mine = ours / "step0" / "rank" / "dump_tensor_data"
    names = sorted(path.name for path in theirs.glob("*.pt"))
    assert names and names == sorted(path.name for path in mine.glob("*.pt"))
    for name in names:
        expected = torch.load(theirs / name, weights_only=True)
        assert torch.equal(torch.load(mine / name, weights_only=True), expected), name


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_module_that_tests_its_inputs_for_identity_differs_only_there(dumps, level):
    """docs/differences.md: under the reference, `attn(h, h, h)` runs nn.MultiheadAttention's branch for three
    different tensors (more transposes at mix, one gradient per argument); ours runs the model's own branch.
    Step 0 differs only in those calls; step 1 is not compared, as the reference trained another computation."""
    ours, reference = dumps(IDENTITY_TESTING, "statistics", level)
    problems = step_differences(read_step(ours, 0), read_step(reference, 0), perturbed=True)
    elsewhere = [
        p
        for p in problems
        if "Tensor.transpose." not in p
        and "MultiheadAttention.backward" not in p
        and p not in ("construct.json keys differ", "stack.json keys differ")
        and not p.startswith("Tensor.addcdiv_.")  # AdamW's update of the in_proj bias, from those gradients
    ]
    assert problems and not elsewhere, "\n".join(elsewhere[:40])


def _losses(root: Path) -> list[float]:
    return json.loads((root.parent / "losses.json").read_text())


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_seed_all_keeps_dropout_off_at_every_level(dumps, untouched, level):
    """docs/differences.md: after seed_all() the training under our tool is the run with dropout built as 0, to
    the last bit, at every level; the reference's L1/mix wrapper calls the F.dropout it saved at import, so
    there its losses are another run's."""
    ours, reference = dumps("gpt2", "statistics", level)
    plain = json.loads((untouched("gpt2") / "losses.json").read_text())
    assert _losses(ours) == plain
    theirs = _losses(reference)
    if level == "L0":
        assert all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(theirs, plain, strict=True))
    else:
        assert abs(theirs[0] - plain[0]) > 1e-4 * abs(plain[0]), "the reference no longer runs dropout here"


def test_md5_where_the_tools_disagree_ours_are_the_untouched_runs(dumps, untouched):
    """The CRC-32 of each linear layer's output (GPT-2's Conv1D is torch.addmm, its head F.linear), in call order,
    against a run with no tool whose plain forward hooks took them: ours are equal; the reference's differ
    where its wrapper ran a dropout."""
    ours, reference = dumps("gpt2", "md5", "L1")
    taken = json.loads((untouched("gpt2") / "crcs.json").read_text())
    prefixes = {"Conv1D": "Torch.addmm.", "Linear": "Functional.linear."}
    disagreeing = 0
    for step in (0, 1):
        plain = {kind: [crc for k, crc in taken[step] if k == kind] for kind in prefixes}
        for root, is_ours in ((ours, True), (reference, False)):
            data = read_step(root, step)["dump"]["data"]
            for kind, prefix in prefixes.items():
                dumped = [
                    e["output"][0]["md5"] for n, e in data.items() if n.startswith(prefix) and n.endswith(".forward")
                ]
                assert len(dumped) == len(plain[kind]) > 0, (kind, step)
                if is_ours:
                    assert dumped == plain[kind], (kind, step)
                else:
                    disagreeing += sum(a != b for a, b in zip(dumped, plain[kind], strict=True))
    assert disagreeing > 0

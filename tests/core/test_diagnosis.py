"""The diagnosis's rules on dumps written by hand, whose answers follow from how they were written.

Each dump is a few calls with made-up statistics; a test changes one thing in the second run and checks
that the diagnosis names that call and that cause. Faults injected into real trainings are scored by
bench/bench_diagnosis.py and its quick test (tests/torch_backend/test_diagnosis_bench.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msprobe.core.diagnosis import diagnose_pair, diagnose_runs, diagnosis_fits, first_nonfinite
from msprobe.core.diagnosis.calls import BACKWARD, OPTIMIZER, calls_of
from msprobe.core.dump.reader import read_dump


def tensor(mean: float, shape: tuple = (4, 8), dtype: str = "torch.float32", grad: bool = True, **extra) -> dict:
    """A tensor's summary; the other statistics follow from the mean so that equal means are equal values."""
    value = {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mean + 1.0, "Min": mean - 1.0,
             "Mean": mean, "Norm": abs(mean) * 10 + 3.0, "requires_grad": grad}  # fmt: skip
    value.update(extra)
    return value


def number(value: float) -> dict:
    return {"type": "float", "value": value}


def call(inputs: list, outputs: list, kwargs: dict | None = None) -> dict:
    return {"input_args": inputs, "input_kwargs": kwargs or {}, "output": outputs}


def write(folder: Path, data: dict, construct: dict | None = None, task: str = "statistics") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    header = {"task": task, "level": "mix" if construct else "L1", "framework": "pytorch", "dump_data_dir": None}
    (folder / "dump.json").write_text(json.dumps({**header, "data": data}))
    (folder / "construct.json").write_text(json.dumps(construct or {}))
    (folder / "stack.json").write_text("{}")
    return folder


def chain(**changes) -> dict:
    """x -> linear(x, w) -> gelu -> linear(., w2) -> sum: each call's input is the call before's output."""
    x, w, w2 = tensor(0.5, grad=False), tensor(0.1), tensor(0.2)
    h = changes.get("h", tensor(1.5))
    g = changes.get("g", tensor(2.5))
    y = changes.get("y", tensor(3.5))
    s = changes.get("s", tensor(4.5, shape=()))
    approximate = {"approximate": {"type": "str", "value": changes.get("approx", "none")}}
    return {
        "Functional.linear.0.forward": call([x, changes.get("w", w)], [h]),
        "Functional.gelu.0.forward": call([h], [g], approximate),
        "Functional.linear.1.forward": call([g, w2], [y]),
        "Torch.sum.0.forward": call([y], [s]),
    }  # fmt: skip


def pair(tmp_path: Path, ours: dict, theirs: dict, construct: dict | None = None, theirs_construct: dict | None = None):
    return diagnose_pair(
        write(tmp_path / "ours", ours, construct), write(tmp_path / "theirs", theirs, theirs_construct or construct)
    )


def test_identical_runs_do_not_part_ways(tmp_path):
    found = pair(tmp_path, chain(), chain())
    assert found.verdict == "none" and found.line().startswith("the runs do not part ways")


def test_operands_in_another_order_with_the_same_output_do_not_part_ways(tmp_path):
    ours, theirs = chain(), chain()
    a, b = ours["Functional.linear.1.forward"]["input_args"]
    ours["Functional.linear.1.forward"]["input_args"] = [b, a]
    assert pair(tmp_path, ours, theirs).verdict == "none"


def test_a_changed_weight_is_named_at_the_first_call_given_it(tmp_path):
    found = pair(tmp_path, chain(w=tensor(0.7), h=tensor(9.0), g=tensor(9.5), y=tensor(9.9)), chain())
    assert (found.api, found.cause, found.phase, found.confidence) == ("Functional.linear.0.forward", "weights",
                                                                       "forward", "exact")  # fmt: skip


def test_a_changed_argument_is_named(tmp_path):
    found = pair(tmp_path, chain(approx="tanh", g=tensor(2.51), y=tensor(3.51), s=tensor(4.51, shape=())), chain())
    assert (found.api, found.cause) == ("Functional.gelu.0.forward", "argument")
    assert "approximate: 'tanh' vs 'none'" in found.detail


def test_an_extra_call_that_feeds_the_first_difference_is_named(tmp_path):
    ours = chain(y=tensor(7.0), s=tensor(8.0, shape=()))
    ours = dict(list(ours.items())[:2]) | {
        "Tensor.__mul__.0.forward": call([tensor(2.5), number(2.0)], [tensor(5.0)]),
        "Functional.linear.1.forward": call([tensor(5.0), tensor(0.2)], [tensor(7.0)]),
        "Torch.sum.0.forward": call([tensor(7.0)], [tensor(8.0, shape=())]),
    }
    found = pair(tmp_path, ours, chain())
    assert (found.api, found.cause) == ("Tensor.__mul__.0.forward", "calls")


def test_an_extra_call_that_changes_no_value_is_no_divergence(tmp_path):
    ours = chain()
    ours = (
        dict(list(ours.items())[:2])
        | {"Tensor.contiguous.0.forward": call([tensor(2.5)], [tensor(2.5)])}
        | dict(list(ours.items())[2:])
    )
    found = pair(tmp_path, ours, chain())
    assert found.verdict == "none" and "change no value" in found.detail


@pytest.mark.parametrize("api", ["Tensor.view_as", "Tensor.reshape", "Tensor.contiguous", "Torch.flatten"])
def test_an_extra_call_that_passes_its_input_on_is_not_blamed_for_a_computation(tmp_path, api):
    """The reference's module hooks add view_as calls; with the next call differing by rounding (another
    CPU's kernels), the answer is that call's computation, not the view_as that handed it an equal input."""
    ours = chain(y=tensor(3.5000001), s=tensor(4.5000001, shape=()))
    ours = (
        dict(list(ours.items())[:2])
        | {f"{api}.0.forward": call([tensor(2.5), tensor(2.5)], [tensor(2.5)])}
        | dict(list(ours.items())[2:])
    )
    found = pair(tmp_path, ours, chain())
    assert (found.api, found.cause) == ("Functional.linear.1.forward", "computation")


def test_an_extra_transpose_handing_on_equal_statistics_is_still_suspected(tmp_path):
    # a transpose keeps the statistics but not the order of the elements: a summary cannot clear it
    ours = chain(y=tensor(3.9), s=tensor(4.9, shape=()))
    ours = (
        dict(list(ours.items())[:2])
        | {"Tensor.transpose.0.forward": call([tensor(2.5)], [tensor(2.5)])}
        | dict(list(ours.items())[2:])
    )
    found = pair(tmp_path, ours, chain())
    assert (found.api, found.cause) == ("Tensor.transpose.0.forward", "calls")


def test_a_cast_no_dump_records_is_named_at_the_call_given_it(tmp_path):
    cast = tensor(2.5, dtype="torch.bfloat16")
    ours = chain(y=tensor(3.51), s=tensor(4.51, shape=()))
    ours["Functional.linear.1.forward"]["input_args"][0] = cast
    found = pair(tmp_path, ours, chain())
    assert (found.api, found.cause) == ("Functional.linear.1.forward", "calls")
    assert "bfloat16 where the benchmark's are float32" in found.detail


def test_changed_data_is_named_at_the_first_call_reading_it(tmp_path):
    ours = chain(h=tensor(1.6), g=tensor(2.6), y=tensor(3.6), s=tensor(4.6, shape=()))
    ours["Functional.linear.0.forward"]["input_args"][0] = tensor(0.9, grad=False)
    found = pair(tmp_path, ours, chain())
    assert (found.api, found.cause) == ("Functional.linear.0.forward", "data")


def test_the_same_inputs_giving_other_outputs_is_the_computation(tmp_path):
    # the second linear differs although its inputs agree, and the first linear agreed bit for bit: exact
    found = pair(tmp_path, chain(y=tensor(3.9), s=tensor(4.9, shape=())), chain())
    assert (found.api, found.cause, found.confidence) == ("Functional.linear.1.forward", "computation", "exact")


def module_run(weight: float = 0.1, grad_scale: float = 1.0) -> tuple[dict, dict]:
    """A module fc (one linear), its backward and its parameter gradients, then an optimizer call."""
    x, w, h = tensor(0.5, grad=False), tensor(weight), tensor(1.5 if weight == 0.1 else 9.0)
    grad = {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": [4, 8],
        "Max": 0.02 * grad_scale,
        "Min": -0.01 * grad_scale,
        "Mean": 0.01 * grad_scale,
        "Norm": 0.1 * grad_scale,
        "requires_grad": False,
    }
    data = {
        "Functional.linear.0.forward": call([x, w], [h]),
        "Module.fc.Linear.forward.0": {"input_args": [x], "input_kwargs": {}, "output": [h],
                                       "parameters": {"weight": w}},
        "Module.fc.Linear.parameters_grad": {"weight": [grad]},
        "Functional.linear.0.backward": {"input": [tensor(0.3, grad=False)], "output": [tensor(0.4, grad=False)]},
        "Module.fc.Linear.backward.0": {"input": [tensor(0.3, grad=False)], "output": [tensor(0.4, grad=False)]},
        "Tensor.mul_.0.forward": call([w, number(0.99)], [tensor(weight * 0.99)]),
    }  # fmt: skip
    construct = {
        "Functional.linear.0.forward": "Module.fc.Linear.forward.0",
        "Module.fc.Linear.forward.0": None,
        "Functional.linear.0.backward": "Module.fc.Linear.backward.0",
        "Module.fc.Linear.backward.0": None,
        "Tensor.mul_.0.forward": "optimizer",
    }
    return data, construct


def test_calls_run_in_order_with_phases_and_gradients_where_they_arrive(tmp_path):
    data, construct = module_run()
    calls = calls_of(read_dump(write(tmp_path / "run", data, construct)))
    names = [c.name for c in calls]
    # dump.json lists the gradients beside the forward; they arrive after the module's backward entry
    assert names.index("Module.fc.Linear.parameters_grad") == names.index("Module.fc.Linear.backward.0") + 1
    phases = {c.name: c.phase for c in calls}
    assert phases["Module.fc.Linear.parameters_grad"] == BACKWARD and phases["Tensor.mul_.0.forward"] == OPTIMIZER
    assert {c.name: c.module for c in calls}["Functional.linear.0.forward"] == "fc"


def test_a_module_whose_weights_differ_is_named_by_path(tmp_path):
    ours, construct = module_run(weight=0.7)
    theirs, _ = module_run()
    found = pair(tmp_path, ours, theirs, construct)
    assert (found.module, found.api, found.cause) == ("fc", "Functional.linear.0.forward", "weights")
    assert "the weights of fc differ" in found.line()


def test_only_the_gradient_differing_is_the_backward(tmp_path):
    ours, construct = module_run(grad_scale=1.5)
    theirs, _ = module_run()
    found = pair(tmp_path, ours, theirs, construct)
    assert (found.module, found.phase, found.cause) == ("fc", "backward", "backward")


def test_an_optimizer_argument_is_the_optimizer_step_of_the_module_it_updates(tmp_path):
    ours, construct = module_run()
    theirs, _ = module_run()
    ours["Tensor.mul_.0.forward"] = call([tensor(0.1), number(0.98)], [tensor(0.1 * 0.98)])
    found = pair(tmp_path, ours, theirs, construct)
    assert (found.phase, found.cause, found.module) == ("optimizer", "optimizer", "fc")


def with_bias_gradient(run: tuple[dict, dict], keep: tuple[str, ...] = ("weight", "bias")) -> dict:
    """module_run's data with fc's bias gradient beside its weight's, keeping the gradients named in ``keep``
    (a parameter frozen has none)."""
    data, _ = run
    gradients = {**data["Module.fc.Linear.parameters_grad"], "bias": [tensor(0.021, (8,), grad=False)]}
    data["Module.fc.Linear.parameters_grad"] = {name: gradients[name] for name in keep}
    return data


@pytest.mark.parametrize(
    ("ours_keep", "theirs_keep", "words"),
    [(("bias",), ("weight", "bias"), "no gradient for weight in this run (the benchmark has one)"),
     (("weight", "bias"), ("bias",), "a gradient for weight in this run only")],
)  # fmt: skip
def test_a_parameter_with_a_gradient_in_one_run_only_is_named(tmp_path, ours_keep, theirs_keep, words):
    """A weight frozen (requires_grad off) in one run: forward and backward entries agree, and the module's
    parameter gradients lack that weight's."""
    construct = module_run()[1]
    ours, theirs = with_bias_gradient(module_run(), ours_keep), with_bias_gradient(module_run(), theirs_keep)
    found = pair(tmp_path, ours, theirs, construct)
    assert (found.verdict, found.phase, found.module, found.cause) == ("divergence", "backward", "fc", "backward")
    assert words in found.detail


@pytest.mark.parametrize("frozen", ["ours", "theirs"])
def test_a_module_whose_parameters_all_have_no_gradient_in_one_run_is_named(tmp_path, frozen):
    """Every parameter of fc frozen in one run: that run records no parameter gradients for fc at all."""
    construct = module_run()[1]
    runs = {"ours": with_bias_gradient(module_run()), "theirs": with_bias_gradient(module_run())}
    del runs[frozen]["Module.fc.Linear.parameters_grad"]
    found = pair(tmp_path, runs["ours"], runs["theirs"], construct)
    assert (found.verdict, found.phase, found.module, found.cause) == ("divergence", "backward", "fc", "backward")
    words = "no gradient for weight, bias in this run" if frozen == "ours" else "a gradient for weight, bias in"
    assert words in found.detail


def test_a_parameter_frozen_in_one_run_is_named_among_rounding_differences(tmp_path):
    """The forward differs by rounding (another machine's linear): the missing gradient is still no rounding."""
    construct = module_run()[1]
    ours = with_bias_gradient(module_run(), ("bias",))
    for name in ("Functional.linear.0.forward", "Module.fc.Linear.forward.0"):
        ours[name]["output"] = [tensor(1.5000002)]
    found = pair(tmp_path, ours, with_bias_gradient(module_run()), construct)
    assert (found.verdict, found.phase, found.module, found.cause) == ("divergence", "backward", "fc", "backward")
    assert "no gradient for weight" in found.detail and found.confidence == "high"


def test_parameter_gradients_alike_in_both_runs_do_not_part_ways(tmp_path):
    construct = module_run()[1]
    found = pair(tmp_path, with_bias_gradient(module_run()), with_bias_gradient(module_run()), construct)
    assert found.verdict == "none"


def mixer_run(bias: float = 0.0, updated: bool = True) -> tuple[dict, dict]:
    """A module mixer whose own code gives F.conv1d the weight and bias of a conv module it never calls (as
    Mamba's mixer does): no module entry declares them; the optimizer updates both when ``updated``."""
    x, w, b = tensor(0.5, grad=False), tensor(0.3, (8, 1, 4)), tensor(bias, (8,))
    made = tensor(1.5 + bias)
    data = {
        "Functional.conv1d.0.forward": call([x], [made], {"weight": w, "bias": b}),
        "Functional.silu.0.forward": call([made], [tensor(2.5 + bias)]),
        "Module.mixer.Mixer.forward.0": call([x], [tensor(2.5 + bias)]),
        "Tensor.mul_.0.forward": call([w, number(0.99)], [tensor(0.297, (8, 1, 4))]),
    }
    if updated:
        data["Tensor.mul_.1.forward"] = call([b, number(0.99)], [tensor(bias * 0.99, (8,))])
    construct = {"Functional.conv1d.0.forward": "Module.mixer.Mixer.forward.0",
                 "Functional.silu.0.forward": "Module.mixer.Mixer.forward.0", "Module.mixer.Mixer.forward.0": None,
                 "Tensor.mul_.0.forward": "optimizer", "Tensor.mul_.1.forward": "optimizer"}  # fmt: skip
    return data, construct


def test_a_weight_the_optimizer_updates_is_named_though_no_module_declares_it(tmp_path):
    ours, construct = mixer_run(bias=0.5)
    found = pair(tmp_path, ours, mixer_run()[0], construct)
    assert (found.api, found.module, found.cause) == ("Functional.conv1d.0.forward", "mixer", "weights")
    assert "bias" in found.detail


def test_an_input_no_optimizer_updates_is_no_weight_though_it_needs_a_gradient(tmp_path):
    """The same input, computed by code no dump records (no optimizer call is given it): not a weight."""
    ours, construct = mixer_run(bias=0.5, updated=False)
    found = pair(tmp_path, ours, mixer_run(updated=False)[0], construct)
    assert found.verdict == "divergence" and found.cause != "weights"


def relu_twice_run(module_twice: bool) -> tuple[dict, dict]:
    """F.relu called twice, the first time through a ReLU module; with ``module_twice`` the second time too.
    Module backward entries are numbered in the order the backward reaches them: in reverse."""
    x0, y0, x1, y1 = tensor(0.1), tensor(0.2), tensor(0.3), tensor(0.4)
    g0, h0, g1, h1 = (tensor(value, grad=False) for value in (0.01, 0.02, 0.03, 0.04))
    second = "Module.relu.ReLU.forward.1" if module_twice else None
    data = {"Functional.relu.0.forward": call([x0], [y0]), "Module.relu.ReLU.forward.0": call([x0], [y0]),
            "Functional.relu.1.forward": call([x1], [y1])}  # fmt: skip
    construct = {"Functional.relu.0.forward": "Module.relu.ReLU.forward.0", "Module.relu.ReLU.forward.0": None,
                 "Functional.relu.1.forward": second}  # fmt: skip
    if module_twice:
        data["Module.relu.ReLU.forward.1"] = call([x1], [y1])
        construct["Module.relu.ReLU.forward.1"] = None
    data["Functional.relu.1.backward"] = {"input": [g1], "output": [h1]}
    if module_twice:
        data["Module.relu.ReLU.backward.0"] = {"input": [g1], "output": [h1]}
        construct["Functional.relu.1.backward"] = "Module.relu.ReLU.backward.0"
    first_backward = f"Module.relu.ReLU.backward.{1 if module_twice else 0}"
    data["Functional.relu.0.backward"] = {"input": [g0], "output": [h0]}
    data[first_backward] = {"input": [g0], "output": [h0]}
    construct |= {"Functional.relu.0.backward": first_backward, first_backward: None}
    return data, construct


def test_a_module_called_once_more_pairs_its_backward_entries_by_place_not_number(tmp_path):
    (ours, ours_construct), (theirs, theirs_construct) = relu_twice_run(True), relu_twice_run(False)
    found = pair(tmp_path, ours, theirs, ours_construct, theirs_construct)
    assert found.verdict == "none", found.line()
    changed = relu_twice_run(True)[0]
    changed["Module.relu.ReLU.backward.1"] = {"input": [tensor(0.011, grad=False)], "output": [tensor(0.021)]}
    changed["Functional.relu.0.backward"] = dict(changed["Module.relu.ReLU.backward.1"])
    found = pair(tmp_path / "changed", changed, theirs, ours_construct, theirs_construct)
    assert (found.api, found.module, found.phase) == ("Functional.relu.0.backward", "relu", "backward")


def test_an_optimizer_call_on_a_temporary_is_the_step_of_the_module_updated_just_before(tmp_path):
    """Adam's ``denom.add_(eps)``: its input is no parameter, so the parameter the optimizer was updating (the
    one the call before it was given) names the module."""
    runs = []
    for eps in (1e-3, 1e-8):
        data, construct = module_run()
        data["Tensor.add_.0.forward"] = call([tensor(0.33, grad=False), number(eps)], [tensor(0.33 + eps, grad=False)])
        construct["Tensor.add_.0.forward"] = "optimizer"
        runs.append((data, construct))
    found = pair(tmp_path, runs[0][0], runs[1][0], runs[0][1])
    assert (found.phase, found.cause, found.module, found.api) == (
        "optimizer",
        "optimizer",
        "fc",
        "Tensor.add_.0.forward",
    )


def norm_step(momentum: float, running_mean: float, spelt: bool = False) -> dict:
    """A batch_norm in training: its output comes from the batch alone; it writes its running mean in place."""
    data = chain()
    arguments = [tensor(0.5, grad=False), tensor(running_mean, shape=(8,), grad=False), number(momentum)]
    data["Functional.batch_norm.0.forward"] = call(arguments, [tensor(0.9, grad=False)])
    if spelt:  # arange(0, 8) where the other run has arange(8): the same values
        data["Torch.arange.0.forward"] = call([number(0), number(8)], [tensor(3.5, shape=(8,), grad=False)])
    else:
        data["Torch.arange.0.forward"] = call([number(8)], [tensor(3.5, shape=(8,), grad=False)])
    return data


def test_an_argument_that_changes_no_output_is_named_when_what_it_wrote_differs_later(tmp_path):
    for run, momentum, later_mean in (("ours", 0.5, 0.6), ("theirs", 0.1, 0.55)):
        write(tmp_path / run / "step0" / "rank", norm_step(momentum, 0.0))
        write(tmp_path / run / "step1" / "rank", norm_step(momentum, later_mean))
    found = diagnose_runs(tmp_path / "ours", tmp_path / "theirs")
    assert (found.verdict, found.step, found.api, found.cause) == (
        "divergence", 0, "Functional.batch_norm.0.forward", "argument"
    )  # fmt: skip
    assert "0.5 vs 0.1" in found.detail and "at step 1, Functional.batch_norm.0.forward is given" in found.detail


def test_an_argument_spelt_another_way_with_nothing_differing_after_it_is_no_divergence(tmp_path):
    for run in ("ours", "theirs"):
        for step in (0, 1):
            write(tmp_path / run / f"step{step}" / "rank", norm_step(0.1, 0.1 * step, spelt=run == "ours"))
    found = diagnose_runs(tmp_path / "ours", tmp_path / "theirs")
    assert found.verdict == "none"


def test_weights_that_differ_after_an_undumped_optimizer_step_blame_it(tmp_path):
    plain, construct = module_run()
    del plain["Tensor.mul_.0.forward"]  # level L0 style: no optimizer calls dumped
    for run, weight in (("ours", 0.7), ("theirs", 0.1)):
        write(tmp_path / run / "step0" / "rank", plain, construct)
        later, _ = module_run(weight=weight)
        del later["Tensor.mul_.0.forward"]
        write(tmp_path / run / "step1" / "rank", later, construct)
    found = diagnose_runs(tmp_path / "ours", tmp_path / "theirs")
    assert (found.step, found.phase, found.cause, found.module) == (0, "optimizer", "optimizer", "fc")
    assert "step 1's parameters of fc differ" in found.detail


def test_at_level_l1_a_parameter_the_optimizer_skips_is_its_step(tmp_path):
    """w2 frozen in this run: no dumped call shows its gradient at level L1, but step 0's optimizer does not
    update it, and step 1 is given the stale value (needing no gradient now). The answer is step 0's
    optimizer, at the call it does not make."""
    for run, w2 in (("ours", 0.2), ("theirs", 0.198)):
        first, later = level_l1_step(), level_l1_step(w2=w2)
        if run == "ours":
            del first["Tensor.mul_.1.forward"], later["Tensor.mul_.1.forward"]
            later["Functional.linear.1.forward"]["input_args"][1]["requires_grad"] = False
        write(tmp_path / run / "step0" / "rank", first)
        write(tmp_path / run / "step1" / "rank", later)
    found = diagnose_runs(tmp_path / "ours", tmp_path / "theirs")
    assert (found.step, found.phase, found.cause, found.api) == (0, "optimizer", "optimizer", "Tensor.mul_.1.forward")
    assert "step 0's optimizer makes 1 call the benchmark's makes and this run's does not" in found.detail


def test_a_rank_diverging_alone_is_named_as_such(tmp_path):
    reduce = {"Distributed.all_reduce.0.forward": call([tensor(0.6, grad=False)], [None])}
    after = {"Tensor.__itruediv__.0.forward": call([tensor(0.7, grad=False), number(2.0)], [tensor(0.35, grad=False)])}
    for run in ("ours", "theirs"):
        for rank in (0, 1):
            changed = run == "ours" and rank == 1
            data = chain(w=tensor(0.7), h=tensor(9.0), g=tensor(9.5), y=tensor(9.9)) if changed else chain()
            received = tensor(0.8 if run == "ours" else 0.7, grad=False)  # what all_reduce wrote in place
            divided = {"Tensor.__itruediv__.0.forward": call([received, number(2.0)], [tensor(0.4, grad=False)])}
            write(tmp_path / run / "step0" / f"rank{rank}", data | reduce | (divided if run == "ours" else after))
    found = diagnose_runs(tmp_path / "ours", tmp_path / "theirs")
    assert (found.rank, found.alone, found.api, found.cause) == (1, True, "Functional.linear.0.forward", "weights")
    assert "rank 0 follows through Distributed.all_reduce" in found.detail and "rank 1 alone" in found.line()


def test_ranks_that_each_part_ways_are_all_named_in_the_line(tmp_path):
    """Both ranks hold another weight (no collective carries it from one to the other): the one-line answer
    names the ranks its JSON lists, not the first of them alone."""
    for run in ("ours", "theirs"):
        for rank in (0, 1):
            data = chain(w=tensor(0.7), h=tensor(9.0), g=tensor(9.5), y=tensor(9.9)) if run == "ours" else chain()
            write(tmp_path / run / "step0" / f"rank{rank}", data)
    found = diagnose_runs(tmp_path / "ours", tmp_path / "theirs")
    assert (found.ranks, found.alone, found.cause) == ([0, 1], False, "weights")
    assert "(step 0, ranks 0, 1, forward" in found.line() and "rank 0," not in found.line()


def level_l1_step(g: float = 2.5, w2: float = 0.2, hook: bool = False) -> dict:
    """A level L1 step (no modules): linear, an operator no dump records (g needs a gradient, and no dumped
    call made it), linear; their backward; a gradient hook's multiply when ``hook``; the optimizer's calls on
    the two weights."""
    x, w = tensor(0.5, grad=False), tensor(0.1)
    grad_w = tensor(0.03, grad=False)
    data = {
        "Functional.linear.0.forward": call([x, w], [tensor(1.5)]),
        "Functional.linear.1.forward": call([tensor(g), tensor(w2)], [tensor(3.5 + g + w2)]),
        "Functional.linear.1.backward": {"input": [tensor(0.3, grad=False)], "output": [tensor(0.4, grad=False)]},
        "Functional.linear.0.backward": {"input": [tensor(0.4, grad=False)], "output": [grad_w]},
    }
    used = grad_w
    if hook:
        used = tensor(0.045, grad=False)
        data["Tensor.__mul__.0.forward"] = call([grad_w, number(1.5)], [used])
    data["Tensor.mul_.0.forward"] = call([w, number(0.99)], [tensor(0.099)])
    data["Tensor.lerp_.0.forward"] = call([tensor(0.0, grad=False), used, number(0.1)], [tensor(used["Mean"] * 0.1)])
    data["Tensor.mul_.1.forward"] = call([tensor(w2), number(0.99)], [tensor(w2 * 0.99)])
    return data


def test_at_level_l1_an_input_no_optimizer_updates_is_no_parameter(tmp_path):
    """g needs a gradient and no dumped call made it, but the optimizer is not given it: it was computed."""
    found = pair(tmp_path, level_l1_step(g=2.6), level_l1_step())
    assert (found.api, found.cause) == ("Functional.linear.1.forward", "undumped")
    assert "computed by code no dump records" in found.line()


def test_at_level_l1_an_input_the_optimizer_updates_is_a_parameter(tmp_path):
    found = pair(tmp_path, level_l1_step(w2=0.25), level_l1_step())
    assert (found.api, found.cause) == ("Functional.linear.1.forward", "weights")


def test_at_level_l1_a_hook_on_a_gradient_after_the_last_backward_entry_is_the_backward(tmp_path):
    calls = {c.name: c.phase for c in calls_of(read_dump(write(tmp_path / "run", level_l1_step(hook=True))))}
    assert calls["Tensor.__mul__.0.forward"] == BACKWARD
    assert calls["Tensor.mul_.0.forward"] == calls["Tensor.mul_.1.forward"] == OPTIMIZER
    found = pair(tmp_path, level_l1_step(hook=True), level_l1_step())
    assert (found.api, found.phase) == ("Tensor.__mul__.0.forward", "backward")


def test_backward_entries_pair_as_their_forward_calls_do(tmp_path):
    """F.relu twice outside every module, the second replaced by torch.relu in one run: the backward runs in
    reverse, so the remaining F.relu backward must pair with its own forward's, not with the first listed."""
    first, second = tensor(1.0, grad=True), tensor(2.0, grad=True)

    def run(second_api: str) -> dict:
        return {
            "Functional.relu.0.forward": call([tensor(0.5)], [first]),
            f"{second_api}.forward": call([tensor(1.5)], [second]),
            f"{second_api}.backward": {"input": [tensor(0.2, grad=False)], "output": [tensor(0.1, grad=False)]},
            "Functional.relu.0.backward": {"input": [tensor(0.7, grad=False)], "output": [tensor(0.6, grad=False)]},
        }

    assert pair(tmp_path, run("Torch.relu.0"), run("Functional.relu.1")).verdict == "none"


def noisy_chain(calls: int = 6, argument_at: int | None = None) -> tuple[dict, dict]:
    """Calls each given the last one's output; ours differs by a rounding-sized 1e-3 from the first matmul on,
    and two calls read the same bit-identical input (two places rounding differently)."""
    theirs, ours = {}, {}
    value_t = value_o = tensor(1.0)
    for index in range(calls):
        out_t = tensor(2.0 + index)
        out_o = tensor((2.0 + index) * (1 + 1e-3))
        args_t = [value_t, tensor(0.1 + index), number(1e-5)]
        args_o = [value_o, tensor(0.1 + index), number(1e-2 if index == argument_at else 1e-5)]
        theirs[f"Functional.linear.{index}.forward"] = call(args_t, [out_t])
        ours[f"Functional.linear.{index}.forward"] = call(args_o, [out_o])
        value_t, value_o = out_t, out_o
    side_t, side_o = tensor(1.0), tensor(1.0)  # a second fresh difference: the same input, other bits out
    theirs["Torch.matmul.0.forward"] = call([side_t, tensor(0.3)], [tensor(5.0)])
    ours["Torch.matmul.0.forward"] = call([side_o, tensor(0.3)], [tensor(5.0 * (1 + 1e-3))])
    return ours, theirs


def test_rounding_everywhere_with_nothing_standing_out_is_uncertain(tmp_path):
    ours, theirs = noisy_chain()
    found = pair(tmp_path, ours, theirs)
    assert found.verdict == "uncertain" and "rounding explains" in found.detail


def test_among_rounding_differences_a_changed_argument_is_still_named(tmp_path):
    ours, theirs = noisy_chain(argument_at=3)
    found = pair(tmp_path, ours, theirs)
    assert (found.verdict, found.api, found.cause, found.confidence) == ("divergence", "Functional.linear.3.forward",
                                                                         "argument", "high")  # fmt: skip


def test_among_rounding_differences_an_argument_whose_call_returns_the_same_is_not_blamed(tmp_path):
    """The first matmul's input was made by a call given another argument but returning the same values (as
    far as the dump shows): what follows differs by rounding alone, so the answer is uncertain, not that call."""
    ours, theirs = noisy_chain()
    for run, arguments in ((ours, [number(0), number(4)]), (theirs, [number(4)])):
        run["Torch.arange.0.forward"] = call(arguments, [tensor(1.0)])
        run.update({key: run.pop(key) for key in list(run) if key != "Torch.arange.0.forward"})  # arange first
    found = pair(tmp_path, ours, theirs)
    assert found.verdict == "uncertain" and found.api != "Torch.arange.0.forward"


def test_the_first_nonfinite_is_made_not_given(tmp_path):
    mask = tensor(0.0, grad=False) | {"Min": float("-inf"), "Mean": float("-inf")}
    data = {
        "Torch.full.0.forward": call([number(float("-inf"))], [mask]),  # given -inf: not made here
        "Tensor.__add__.0.forward": call([tensor(1.0), mask], [mask]),  # carries the mask's -inf on
        "Tensor.__truediv__.0.forward": call([tensor(1.0), tensor(0.0)], [tensor(1.0) | {"Max": float("inf")}]),
    }
    found = first_nonfinite(read_dump(write(tmp_path / "run", data)))
    assert found is not None and found.name == "Tensor.__truediv__.0.forward"


def test_dumps_too_large_are_refused_with_words(tmp_path, monkeypatch):
    from msprobe.core.diagnosis import runs

    folder = write(tmp_path / "run", chain())
    assert diagnosis_fits(folder, folder) == (True, "")
    monkeypatch.setattr(runs, "MAX_DIAGNOSED_BYTES", 10)
    fits, words = diagnosis_fits(folder, folder)
    assert not fits and "not diagnosed" in words


@pytest.mark.parametrize("mode", ["md5", "xor"])
def test_checksums_decide_sameness_exactly(tmp_path, mode):
    theirs = chain()
    ours = json.loads(json.dumps(theirs))
    for data in (ours, theirs):
        for entry in data.values():
            for value in entry["output"]:
                value["md5"] = "00000001"
    ours["Functional.linear.1.forward"]["output"][0]["md5"] = "00000002"  # same statistics, other bits
    found = pair(tmp_path, ours, theirs)
    assert (found.verdict, found.api) == ("divergence", "Functional.linear.1.forward")


def blocks_run(skip_mask_in: int | None = None) -> dict:
    """Three blocks outside every module (level L1), each: linear, masked_fill, softmax; block ``skip_mask_in``
    forgets its masked_fill, so its softmax is given the linear's output."""
    data = {}
    counts = {"Functional.linear": 0, "Tensor.masked_fill": 0, "Functional.softmax": 0}

    def add(api: str, inputs: list, outputs: list) -> None:
        data[f"{api}.{counts[api]}.forward"] = call(inputs, outputs)
        counts[api] += 1

    for block in range(3):
        scores = tensor(1.0 + block)
        add("Functional.linear", [tensor(0.5 + block), tensor(0.1)], [scores])
        masked = scores
        if block != skip_mask_in:
            masked = tensor(1.0 + block) | {"Min": -1e9}
            add("Tensor.masked_fill", [scores, number(-1e9)], [masked])
        add("Functional.softmax", [masked], [tensor(0.25 + (0.01 if block == skip_mask_in else 0))])
    return data


def test_an_api_called_once_less_pairs_its_other_calls_within_their_stretches(tmp_path):
    """Of three masked_fill calls, the middle block's is missing: the remaining two pair with those of their own
    blocks (between the same paired linear and softmax calls), so the missing one is named."""
    found = pair(tmp_path, blocks_run(skip_mask_in=1), blocks_run())
    assert (found.api, found.cause) == ("Tensor.masked_fill.1.forward", "calls")
    assert "this run does not call Tensor.masked_fill.1.forward" in found.detail


def module_calls(with_norm: bool = True) -> tuple[dict, dict]:
    """Level mix: conv (a module with its conv2d) -> norm (a module with its batch_norm) -> relu outside
    every module; ``with_norm=False``: the model's own forward no longer calls norm."""
    x, conv_out, norm_out = tensor(0.5, grad=False), tensor(1.5), tensor(2.5)
    given = norm_out if with_norm else conv_out
    data = {
        "Functional.conv2d.0.forward": call([x, tensor(0.1)], [conv_out]),
        "Module.conv.Conv2d.forward.0": {"input_args": [x], "input_kwargs": {}, "output": [conv_out],
                                         "parameters": {"weight": tensor(0.1)}},
    }  # fmt: skip
    construct = {"Functional.conv2d.0.forward": "Module.conv.Conv2d.forward.0", "Module.conv.Conv2d.forward.0": None}
    if with_norm:
        data["Functional.batch_norm.0.forward"] = call([conv_out, tensor(0.2, shape=(8,), grad=False)], [norm_out])
        data["Module.norm.BatchNorm2d.forward.0"] = {"input_args": [conv_out], "input_kwargs": {}, "output": [norm_out]}
        construct |= {"Functional.batch_norm.0.forward": "Module.norm.BatchNorm2d.forward.0",
                      "Module.norm.BatchNorm2d.forward.0": None}  # fmt: skip
    data["Functional.relu.0.forward"] = call([given], [tensor(3.0 if with_norm else 3.1)])
    construct["Functional.relu.0.forward"] = None
    return data, construct


def test_a_call_missing_with_the_module_around_it_is_named_in_the_code_that_calls_that_module(tmp_path):
    ours, ours_construct = module_calls(with_norm=False)
    theirs, theirs_construct = module_calls()
    found = pair(tmp_path, ours, theirs, ours_construct, theirs_construct)
    assert (found.api, found.module, found.cause) == ("Functional.batch_norm.0.forward", None, "calls")
    assert "nor Module.norm.BatchNorm2d.forward.0 around it" in found.detail


def tied_run(head_weight: float) -> tuple[dict, dict]:
    """Two modules, embed and head, whose weights are one tensor when ``head_weight`` is embed's (0.3)."""
    embed_w, head_w = tensor(0.3), tensor(head_weight)
    tokens, e = tensor(3.0, dtype="torch.int64", grad=False), tensor(0.7)
    logits = tensor(0.9 if head_weight == 0.4 else 0.95)
    data = {
        "Functional.embedding.0.forward": call([tokens, embed_w], [e]),
        "Module.embed.Embedding.forward.0": {"input_args": [tokens], "input_kwargs": {}, "output": [e],
                                             "parameters": {"weight": embed_w}},
        "Functional.linear.0.forward": call([e, head_w], [logits]),
        "Module.head.Linear.forward.0": {"input_args": [e], "input_kwargs": {}, "output": [logits],
                                         "parameters": {"weight": head_w}},
    }  # fmt: skip
    construct = {"Functional.embedding.0.forward": "Module.embed.Embedding.forward.0",
                 "Module.embed.Embedding.forward.0": None,
                 "Functional.linear.0.forward": "Module.head.Linear.forward.0",
                 "Module.head.Linear.forward.0": None}  # fmt: skip
    return data, construct


def test_a_weight_tied_to_another_module_is_the_weight_of_the_module_that_uses_it(tmp_path):
    ours, construct = tied_run(head_weight=0.3)  # the head's weight is embed's
    found = pair(tmp_path, ours, tied_run(head_weight=0.4)[0], construct)
    assert (found.api, found.module, found.cause) == ("Functional.linear.0.forward", "head", "weights")


def container_run(token: float) -> tuple[dict, dict]:
    """embeddings (a module holding a class token it concatenates in its own code, not dumped) -> norm."""
    x, cls_token = tensor(0.5, grad=False), tensor(token, shape=(1, 1, 8))
    joined, normed = tensor(0.6 if token == 0.2 else 0.61), tensor(0.0 if token == 0.2 else 0.01)
    data = {
        "Functional.layer_norm.0.forward": call([joined, tensor(1.0, shape=(8,))], [normed]),
        "Module.embeddings.norm.LayerNorm.forward.0": {"input_args": [joined], "input_kwargs": {},
                                                       "output": [normed]},
        "Module.embeddings.Embeddings.forward.0": {"input_args": [x], "input_kwargs": {}, "output": [normed],
                                                   "parameters": {"cls_token": cls_token}},
    }  # fmt: skip
    construct = {"Functional.layer_norm.0.forward": "Module.embeddings.norm.LayerNorm.forward.0",
                 "Module.embeddings.norm.LayerNorm.forward.0": "Module.embeddings.Embeddings.forward.0",
                 "Module.embeddings.Embeddings.forward.0": None}  # fmt: skip
    return data, construct


def test_a_module_own_parameter_handed_on_by_its_own_code_is_its_weights(tmp_path):
    ours, construct = container_run(token=0.25)
    found = pair(tmp_path, ours, container_run(token=0.2)[0], construct)
    assert (found.api, found.module, found.cause) == ("Functional.layer_norm.0.forward", "embeddings", "weights")


def test_arguments_spelt_another_way_are_no_difference(tmp_path):
    """``inplace`` says where a result goes; ``dim=1`` is ``dim=-1`` on a matrix: among rounding differences
    (both calls given and returning values off by rounding) neither is taken for the fault."""
    ours, theirs = noisy_chain()
    for run, inplace, dim, off in ((ours, False, 1, 1 + 1e-3), (theirs, True, -1, 1.0)):
        kwargs = {"inplace": {"type": "bool", "value": inplace}}
        run["Functional.relu.0.forward"] = call([tensor(7.0 * off)], [tensor(7.0 * off)], kwargs)
        run["Functional.softmax.0.forward"] = call(
            [tensor(7.0 * off, shape=(4, 8))],
            [tensor(0.125 * off, shape=(4, 8))],
            {"dim": {"type": "int", "value": dim}},
        )
    assert pair(tmp_path, ours, theirs).verdict == "uncertain"


def test_a_rounding_sized_difference_after_a_matrix_product_agreed_is_named_at_level_l1(tmp_path):
    ours, theirs = chain(), chain()
    ours["Functional.gelu.0.forward"]["output"] = [tensor(2.5000001)]
    ours["Functional.linear.1.forward"]["input_args"][0] = tensor(2.5000001)
    found = pair(tmp_path, ours, theirs)
    assert (found.verdict, found.api, found.cause) == ("divergence", "Functional.gelu.0.forward", "computation")


def test_an_extra_call_before_inputs_no_dump_records_is_named(tmp_path):
    """A flip this run alone makes, before an operator no dump records (a recurrent layer at level L1)."""
    ours, theirs = level_l1_step(g=2.6), level_l1_step()
    ours = {"Tensor.flip.0.forward": call([tensor(1.5), number(1)], [tensor(1.5)])} | ours
    found = pair(tmp_path, ours, theirs)
    assert (found.api, found.cause, found.confidence) == ("Tensor.flip.0.forward", "calls", "medium")


def mask_run(boolean: bool, attention_mean: float = 1.25) -> dict:
    """A causal mask made outside every dump (booleans, or floats holding -inf), cut by triu and given to an
    attention call, whose output the next call is given; its summary is a stand-in with equal statistics."""
    if boolean:
        full = {"type": "torch.Tensor", "dtype": "torch.bool", "shape": [8, 8], "Max": True, "Min": True,
                "Mean": None, "Norm": None, "requires_grad": False}  # fmt: skip
        mask = {**full, "Min": False}
    else:
        inf = float("-inf")
        full = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [8, 8], "Max": inf, "Min": inf,
                "Mean": inf, "Norm": float("inf"), "requires_grad": False}  # fmt: skip
        mask = {**full, "Max": 0.0}
    x, attended = tensor(0.5), tensor(attention_mean)
    return {
        "Torch.triu.0.forward": call([full], [mask], {"diagonal": {"type": "int", "value": 1}}),
        "Functional.scaled_dot_product_attention.0.forward": call([x, x, x], [attended], {"attn_mask": mask}),
        "Functional.linear.0.forward": call([attended, tensor(0.1)], [tensor(2.5)]),
    }


def test_runs_whose_values_differ_and_meet_again_at_once_do_not_part_ways(tmp_path):
    """A boolean mask for an -inf one: the masks differ, every call given them returns the same bits."""
    found = pair(tmp_path, mask_run(boolean=True), mask_run(boolean=False))
    assert found.verdict == "none", found.line()
    assert "Torch.triu.0.forward differ" in found.detail and "meet again" in found.detail


def test_a_boolean_mask_whose_consumers_agree_only_within_rounding_is_taken_as_the_same(tmp_path):
    """The attention's mean one part in ten million off: not bit for bit, so the runs do not meet again, but
    within rounding, so the boolean mask is taken as the benchmark's -inf one, and what is left is rounding."""
    found = pair(tmp_path, mask_run(boolean=True, attention_mean=1.25 * (1 + 1e-7)), mask_run(boolean=False))
    assert found.verdict == "uncertain", found.line()
    assert "Torch.triu.0.forward's boolean mask is taken as the benchmark's additive one" in found.detail


def test_a_boolean_mask_filled_in_by_a_call_of_this_run_alone_is_taken_as_the_same(tmp_path):
    """The attention layer turns the boolean mask into the -inf one itself (``masked_fill_``, a call the
    benchmark does not make), and its result is within rounding of the benchmark's."""
    ours = mask_run(boolean=True, attention_mean=1.25 * (1 + 1e-7))
    additive = mask_run(boolean=False)["Torch.triu.0.forward"]["output"][0]
    boolean = ours["Torch.triu.0.forward"]["output"][0]
    ours = {
        "Torch.triu.0.forward": ours["Torch.triu.0.forward"],
        "Tensor.masked_fill_.0.forward": call([boolean, number(float("-inf"))], [additive]),
        **{name: entry for name, entry in ours.items() if name != "Torch.triu.0.forward"},
    }
    ours["Functional.scaled_dot_product_attention.0.forward"]["input_kwargs"]["attn_mask"] = additive
    found = pair(tmp_path, ours, mask_run(boolean=False))
    assert found.verdict == "uncertain", found.line()
    assert "boolean mask is taken as the benchmark's additive one" in found.detail


@pytest.mark.parametrize("off", [0.3, -0.3])
def test_a_boolean_mask_whose_consumer_is_further_off_than_rounding_is_named(tmp_path, off):
    """The attention 30% off: a mask that masks otherwise, not the same mask spelt in booleans."""
    found = pair(tmp_path, mask_run(boolean=True, attention_mean=1.25 * (1 + off)), mask_run(boolean=False))
    assert (found.verdict, found.api) == ("divergence", "Torch.triu.0.forward")


def test_a_run_of_extra_calls_is_named_where_it_starts(tmp_path):
    """``(x - 0.5) / 0.25`` added to the data: the subtraction starts it, the division hands its result on."""
    ours = chain(h=tensor(9.0), g=tensor(9.5), y=tensor(9.9))
    x, shifted, scaled_x = tensor(0.5, grad=False), tensor(0.0, grad=False), tensor(0.01, grad=False)
    ours = {
        "Tensor.__sub__.0.forward": call([x, number(0.5)], [shifted]),
        "Tensor.__truediv__.0.forward": call([shifted, number(0.25)], [scaled_x]),
    } | ours
    ours["Functional.linear.0.forward"]["input_args"][0] = scaled_x
    found = pair(tmp_path, ours, chain())
    assert (found.api, found.cause) == ("Tensor.__sub__.0.forward", "calls")
    assert "Tensor.__sub__, Tensor.__truediv__" in found.detail


def test_an_extra_call_seen_first_in_the_backward_is_named_in_the_forward(tmp_path):
    """The loss halved: no dumped forward call reads the product; its backward entry hands the sum's backward
    half the gradient, and the forward call it belongs to is named."""

    def run(halved: bool) -> dict:
        data = chain()
        seed = tensor(1.0, shape=(), grad=False)
        given = tensor(0.5, shape=(), grad=False) if halved else seed
        if halved:
            data["Tensor.__mul__.0.forward"] = call([tensor(4.5, shape=()), number(0.5)], [tensor(2.25, shape=())])
            data["Tensor.__mul__.0.backward"] = {"input": [seed], "output": [given]}
        data["Torch.sum.0.backward"] = {"input": [given], "output": [tensor(0.7 if halved else 0.8, grad=False)]}
        return data

    found = pair(tmp_path, run(halved=True), run(halved=False))
    assert (found.api, found.phase, found.cause) == ("Tensor.__mul__.0.forward", "forward", "calls")


def test_among_rounding_a_call_standing_in_with_the_same_result_is_not_blamed(tmp_path):
    """``Tensor.triu`` in one run for ``torch.triu`` in the other, the same mask: the first matmul, given it,
    rounds differently, and that is all."""
    ours, theirs = noisy_chain()
    mask = tensor(0.0) | {"Min": float("-inf"), "Mean": float("-inf"), "Norm": float("inf")}
    for run, api in ((ours, "Tensor.triu"), (theirs, "Torch.triu")):
        first = run.pop("Functional.linear.0.forward")
        first["input_args"].append(mask)
        rest = dict(run)
        run.clear()
        run[f"{api}.0.forward"] = call([tensor(0.0), number(1)], [mask])
        run["Functional.linear.0.forward"] = first
        run.update(rest)
    assert pair(tmp_path, ours, theirs).verdict == "uncertain"


def test_among_rounding_an_in_place_call_standing_in_for_one_that_is_not_is_named(tmp_path):
    """``h.mul_(s)`` where the benchmark has ``h * s``: the same product, but the residual ``h`` is written
    too, and the add that reads it later differs far beyond the rounding."""
    ours, theirs = noisy_chain()
    residual, scaled_residual, other = tensor(0.3), tensor(3.0), tensor(0.2)
    for run, api, given in ((ours, "Tensor.mul_", scaled_residual), (theirs, "Tensor.__mul__", residual)):
        run[f"{api}.0.forward"] = call([residual, number(10.0)], [scaled_residual])
        run["Tensor.__add__.0.forward"] = call([given, other], [tensor(given["Mean"] + 0.2)])
    found = pair(tmp_path, ours, theirs)
    assert (found.verdict, found.api, found.cause) == ("divergence", "Tensor.mul_.0.forward", "calls")


def test_an_in_place_write_is_named_not_the_call_that_made_what_it_adds(tmp_path):
    """``mask.add_(torch.eye(n))``: the run of extra calls is the write; the eye is only its operand."""
    ours, theirs = chain(), chain()
    mask, eye, written = tensor(-0.5), tensor(0.125), tensor(-0.375)
    for run in (ours, theirs):
        run["Torch.full.0.forward"] = call([number(-0.5)], [mask])
    ours["Torch.eye.0.forward"] = call([number(8)], [eye])
    ours["Tensor.add_.0.forward"] = call([mask, eye], [written])
    given = {id(ours): written, id(theirs): mask}
    for run in (ours, theirs):
        run["Functional.softmax.0.forward"] = call([given[id(run)]], [tensor(0.9 if run is ours else 0.8)])
    found = pair(tmp_path, ours, theirs)
    assert (found.api, found.cause) == ("Tensor.add_.0.forward", "calls")


def _off(value: dict, error: float) -> dict:
    return {**value, **{key: value[key] * (1 + error) for key in ("Max", "Min", "Mean", "Norm")}}


@pytest.mark.parametrize(
    ("first", "shape", "dtype", "named"),
    [
        ("Functional.gelu", (4, 8), "torch.float32", True),
        ("Torch.sum", (), "torch.float32", False),
        ("Functional.gelu", (4, 8), "torch.bfloat16", False),
    ],
    ids=["element-wise", "reduction", "element-wise-bfloat16"],
)
def test_a_first_call_further_off_than_its_rounding(tmp_path, first, shape, dtype, named):
    """The first call computes from the data, 5e-3 off, and everything after it as far: an element-wise call in
    float32 rounds by a few units, so it is named; a sum to one number may cancel, and bfloat16 is that coarse,
    so those stay uncertain."""
    x, w = tensor(0.5, grad=False, dtype=dtype), tensor(0.1, dtype=dtype)
    made, out = tensor(1.5, shape=shape, dtype=dtype), tensor(2.5, dtype=dtype)

    def run(error: float) -> dict:
        return {
            f"{first}.0.forward": call([x], [_off(made, error)]),
            "Functional.linear.0.forward": call([_off(made, error), w], [_off(out, error)]),
        }

    found = pair(tmp_path, run(5e-3), run(0.0))
    if named:
        assert (found.verdict, found.api, found.cause) == ("divergence", f"{first}.0.forward", "computation")
    else:
        assert found.verdict == "uncertain"

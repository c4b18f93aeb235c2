import json
import logging
import math
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from dump_values import leaves
from repo_paths import REFERENCE_DUMPS

from models import train_beside_a_failing_tool, train_fixture_net, train_mixed_net
from msprobe.core.dump.reader import read_dump
from msprobe.pytorch import PrecisionDebugger

FIXTURES = REFERENCE_DUMPS / "pytorch"


def dump_mixed(tmp_path, task, level, **extra):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{task}_{level}"
    config = {"task": task, "dump_path": str(path), "level": level, **extra}
    config_file = tmp_path / f"{task}_{level}.json"
    config_file.write_text(json.dumps(config))
    train_mixed_net(lambda model: PrecisionDebugger(config_path=str(config_file), model=model))
    return path


def load(path, step=0):
    return read_dump(path / f"step{step}" / "rank" / "dump.json")


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
@pytest.mark.parametrize("task", ["statistics", "tensor", "structure"])
def test_every_level_and_task_writes_both_steps(tmp_path, level, task):
    path = dump_mixed(tmp_path, task, level)
    for step in (0, 1):
        folder = path / f"step{step}" / "rank"
        assert {p.name for p in folder.iterdir()} >= {"dump.json", "stack.json", "construct.json"}
        assert not (folder / ".dump.json.journal").exists()
        dump = load(path, step)
        assert (dump.task, dump.level, dump.framework) == (task, level, "pytorch")
        names = list(dump.data)
        if level in ("L1", "mix"):
            for expected in (
                "Functional.conv1d.0.forward",
                "Functional.layer_norm.0.forward",
                "Functional.multi_head_attention_forward.0.forward",
                "Functional.linear.0.forward",
                "Functional.relu.0.forward",
                "Functional.dropout.0.forward",
                "Tensor.mul_.0.forward",
                "Functional.cross_entropy.0.forward",
                "Functional.linear.0.backward",
            ):
                assert expected in names
            # only the outermost call is recorded: attention's inner linear is not a separate entry
            assert sum(name.startswith("Functional.linear.") and name.endswith("forward") for name in names) == 2
        if level in ("L0", "mix"):
            for expected in (
                "Module.conv.Conv1d.forward.0",
                "Module.norm.LayerNorm.forward.0",
                "Module.attn.MultiheadAttention.forward.0",
                "Module.fc.Linear.backward.0",
                "Module.fc.Linear.parameters_grad",
                "Module.head.Linear.parameters_grad",
            ):
                assert expected in names
            assert "Module.MixedNet.MixedNet.forward.0" not in names  # the whole model is not an entry
        if task == "structure":
            assert all(not list(leaves(entry)) for entry in dump.data.values())
        assert set(dump.stack) <= set(dump.data)


def assert_statistics_match_the_saved_tensors(dump):
    """Every tensor's statistics against numpy on its .pt file; the number checked."""
    checked = 0
    for leaf in (leaf for entry in dump.data.values() for leaf in leaves(entry)):
        if "data_name" not in leaf:
            continue
        tensor = torch.load(dump.tensor_dir() / leaf["data_name"], weights_only=True)
        assert str(tensor.dtype) == leaf["dtype"] and list(tensor.shape) == leaf["shape"]
        if tensor.numel() == 0 or tensor.dtype == torch.bool:
            continue
        array = tensor.double().numpy()
        expected = (array.max(), array.min(), array.mean(), np.linalg.norm(array.ravel()))
        for key, value in zip(("Max", "Min", "Mean", "Norm"), expected):
            assert math.isclose(leaf[key], value, rel_tol=1e-4, abs_tol=1e-6), (leaf["data_name"], key)
        checked += 1
    return checked


def test_statistics_match_numpy_on_the_saved_tensors(tmp_path):
    assert assert_statistics_match_the_saved_tensors(load(dump_mixed(tmp_path, "tensor", "mix"))) > 100


@pytest.mark.parametrize("fused", [False, True])
def test_writes_that_leave_the_version_counter_alone_are_seen(tmp_path, fused):
    """GradScaler unscales gradients and a fused optimizer writes parameters without moving torch's version
    counter: statistics measured before (a gradient at backward, a weight in forward) must not be reused after."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused)
    scaler = torch.amp.GradScaler("cpu")
    debugger = PrecisionDebugger(task="tensor", level="mix", dump_path=str(tmp_path), model=model)
    x = torch.randn(4, 8)
    for _ in range(2):
        debugger.start()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        model(x)  # the weights again, after the optimizer wrote them
        debugger.stop()
        debugger.step()
    for step in (0, 1):
        assert assert_statistics_match_the_saved_tensors(load(tmp_path, step)) > 40


def test_md5_is_the_crc32_of_the_tensor_bytes(tmp_path):
    md5 = load(dump_mixed(tmp_path, "statistics", "L1", statistics={"summary_mode": "md5"}))
    tensors = load(dump_mixed(tmp_path, "tensor", "L1"))
    checked = 0
    for name in ("Functional.linear.0.forward", "Functional.relu.0.forward", "Functional.layer_norm.0.forward"):
        for with_md5, with_file in zip(leaves(md5.data[name]), leaves(tensors.data[name])):
            tensor = torch.load(tensors.tensor_dir() / with_file["data_name"], weights_only=True)
            assert with_md5["md5"] == f"{zlib.crc32(tensor.contiguous().numpy().tobytes()):08x}"
            checked += 1
    assert checked >= 6


def test_mix_hierarchy_in_construct_json(tmp_path):
    dump = load(dump_mixed(tmp_path, "statistics", "mix"))
    parents = dump.construct
    assert parents["Functional.linear.0.forward"] == "Module.fc.Linear.forward.0"
    assert parents["Functional.layer_norm.0.forward"] == "Module.norm.LayerNorm.forward.0"
    assert parents["Functional.linear.0.backward"] == "Module.fc.Linear.backward.0"
    assert parents["Module.fc.Linear.forward.0"] is None
    assert parents["Functional.cross_entropy.0.forward"] is None
    assert parents["optimizer"] is None
    assert any(parent == "optimizer" for parent in parents.values())


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_fixture_model_names_match_the_reference_tool(tmp_path, level):
    def make(model):
        return PrecisionDebugger(task="statistics", level=level, dump_path=str(tmp_path), model=model)

    train_fixture_net(make)
    for step in (0, 1):
        ours = load(tmp_path, step)
        reference = read_dump(FIXTURES / f"statistics_{level}" / f"step{step}" / "rank" / "dump.json")
        expected = [name for name in reference.data if not name.startswith("Tensor.view_as.")]
        assert list(ours.data) == expected


def test_fixture_model_values_match_the_reference_tool(tmp_path):
    train_fixture_net(lambda model: PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path), model=model))
    ours = load(tmp_path)
    reference = read_dump(FIXTURES / "tensor_L1" / "step0" / "rank" / "dump.json")
    for name, entry in reference.data.items():
        for theirs, mine in zip(leaves(entry), leaves(ours.data[name])):
            assert theirs["data_name"] == mine["data_name"]
            assert theirs["shape"] == mine["shape"]
            for key in ("Max", "Min", "Mean", "Norm"):
                assert math.isclose(theirs[key], mine[key], rel_tol=1e-5, abs_tol=1e-7), (name, key)


def test_non_tensor_arguments_are_recorded_like_the_reference(tmp_path):
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    debugger.start()
    x = torch.arange(12.0).reshape(3, 4)
    x[1:3]
    torch.ones_like(x, dtype=torch.float64)
    torch.cat([x, x], dim=0)
    x.sum(dim=(0, 1), keepdim=False)
    torch.flip(x, dims=[0])
    F.pad(x, (1, 1), mode="constant", value=None)
    debugger.stop()
    debugger.step()
    data = load(tmp_path).data
    assert data["Tensor.__getitem__.0.forward"]["input_args"][1] == {"type": "slice", "value": [1, 3, None]}
    assert data["Torch.ones_like.0.forward"]["input_kwargs"]["dtype"] == {
        "type": "torch.dtype",
        "value": "torch.float64",
    }
    cat = data["Torch.cat.0.forward"]
    assert len(cat["input_args"][0]) == 2 and cat["input_kwargs"]["dim"] == {"type": "int", "value": 0}
    assert data["Tensor.sum.0.forward"]["input_kwargs"]["dim"] == [
        {"type": "int", "value": 0},
        {"type": "int", "value": 1},
    ]
    assert data["Tensor.sum.0.forward"]["input_kwargs"]["keepdim"] == {"type": "bool", "value": False}
    assert data["Functional.pad.0.forward"]["input_kwargs"]["mode"] == {"type": "str", "value": "constant"}
    assert data["Functional.pad.0.forward"]["input_kwargs"]["value"] is None


def test_special_statistics(tmp_path):
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    values = [
        torch.tensor([True, False]),
        torch.tensor(-2.5),
        torch.tensor([1, -3], dtype=torch.int64),
        torch.tensor([3 + 4j, 0j]),
        torch.tensor([1.0, float("inf"), -2.0, float("nan")]),
        torch.zeros(0, 3),
        torch.tensor([1.0, 2.0], dtype=torch.float64) / 3,
    ]
    debugger.start()
    for value in values:
        torch.clone(value)
    debugger.stop()
    debugger.step()
    data = load(tmp_path).data

    def first_input(index):
        return data[f"Torch.clone.{index}.forward"]["input_args"][0]

    assert (first_input(0)["Max"], first_input(0)["Min"]) == (True, False)
    assert [first_input(1)[k] for k in ("Max", "Min", "Mean", "Norm")] == [-2.5] * 4
    assert (first_input(2)["Max"], first_input(2)["Min"], first_input(2)["Mean"]) == (1.0, -3.0, -1.0)
    assert first_input(3)["Max"] == 5.0 and first_input(3)["Min"] == 0.0
    special = first_input(4)
    assert math.isnan(special["Max"]) and special["Max_except_inf_nan"] == 1.0 and special["Min_except_inf_nan"] == -2.0
    assert [first_input(5)[k] for k in ("Max", "Min", "Mean", "Norm")] == [None] * 4  # as the reference
    assert first_input(5)["shape"] == [0, 3]
    assert first_input(6)["Mean"] == 0.5  # float64 measured in float64: (1/3 + 2/3) / 2


def test_inplace_api_records_inputs_before_the_call(tmp_path):
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    x = torch.ones(4)
    debugger.start()
    x.add_(5)
    debugger.stop()
    debugger.step()
    entry = load(tmp_path).data["Tensor.add_.0.forward"]
    assert entry["input_args"][0]["Max"] == 1.0
    assert entry["output"][0]["Max"] == 6.0


def test_filters_list_scope_and_data_mode(tmp_path):
    only_relu = load(dump_mixed(tmp_path, "statistics", "L1", statistics={"list": ["relu"]}))
    assert set(only_relu.data) == {"Functional.relu.0.forward", "Functional.relu.0.backward"}
    regex = load(
        dump_mixed(tmp_path / "r", "statistics", "L1", statistics={"list": ["name-regex(^Functional\\.linear)"]})
    )
    assert set(regex.data) == {f"Functional.linear.{i}.{d}" for i in (0, 1) for d in ("forward", "backward")}
    forward_inputs = load(
        dump_mixed(tmp_path / "f", "statistics", "L1", statistics={"data_mode": ["forward", "input"]})
    )
    assert all(name.endswith("forward") for name in forward_inputs.data)
    assert all(entry["output"] == [] and entry["input_args"] for entry in forward_inputs.data.values())
    scoped = load(
        dump_mixed(
            tmp_path / "s",
            "statistics",
            "mix",
            statistics={"scope": ["Module.norm.LayerNorm.forward.0", "Module.fc.Linear.forward.0"]},
        )
    )
    names = [name for name in scoped.data if not name.endswith("parameters_grad")]
    assert names[0] == "Functional.layer_norm.0.forward" and "Module.fc.Linear.forward.0" in names
    assert "Functional.conv1d.0.forward" not in names and "Module.head.Linear.forward.0" not in names


def test_step_selection(tmp_path):
    dump_mixed(tmp_path, "statistics", "L1", step=[1])
    assert not (tmp_path / "statistics_L1" / "step0").exists()
    assert (tmp_path / "statistics_L1" / "step1" / "rank" / "dump.json").exists()


def test_training_is_bit_identical_with_and_without_the_tool(tmp_path):
    plain, plain_losses = train_mixed_net(None)
    dumped, dumped_losses = train_mixed_net(
        lambda model: PrecisionDebugger(task="tensor", level="mix", dump_path=str(tmp_path), model=model)
    )
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, dumped_losses))
    for (name, a), (_, b) in zip(plain.named_parameters(), dumped.named_parameters()):
        assert torch.equal(a, b), name
    # and nothing of the tool is left behind
    assert not hasattr(F.linear, "__msprobe_original__") and not hasattr(torch.Tensor.add_, "__msprobe_original__")
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in plain.modules())
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in dumped.modules())


def _measure_with(monkeypatch, measure):
    """Every tensor's statistics taken by ``measure``: the usual entries' path in C is turned off too
    (test_fast_path.py injects failures into that one)."""
    from msprobe.pytorch.dump import fast_path, measuring

    monkeypatch.setattr(measuring, "measure", measure)
    monkeypatch.setattr(fast_path, "AVAILABLE", False)


def test_an_exception_inside_the_tool_is_logged_once_and_training_goes_on(tmp_path, monkeypatch, caplog):
    from msprobe.pytorch.dump import measuring

    original = measuring.measure

    def flaky(tensor):
        if tensor.dim() == 2 and tensor.shape[-1] == 16:
            raise RuntimeError("simulated failure")
        return original(tensor)

    _measure_with(monkeypatch, flaky)
    train_beside_a_failing_tool(tmp_path, caplog)
    assert "Functional.relu.0.forward" in load(tmp_path).data


@pytest.mark.parametrize("where", ["argument", "config"])
def test_strict_raises_the_tool_s_own_errors(tmp_path, monkeypatch, where):

    def broken(tensor):
        raise RuntimeError("simulated failure")

    _measure_with(monkeypatch, broken)
    if where == "argument":
        debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path), strict=True)
    else:
        (tmp_path / "c.json").write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path), "strict": True}))
        debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start()
    with pytest.raises(RuntimeError, match="simulated failure"):
        torch.relu(torch.ones(2))
    debugger.stop()
    torch.relu(torch.ones(2))  # nothing of the tool is left in the way


def test_a_device_error_met_by_the_tool_is_raised_to_the_training(tmp_path, monkeypatch):
    """An asynchronous kernel failure surfaces at the next sync, which may be the tool's: it is not the tool's."""

    def device_failure(tensor):
        raise torch.AcceleratorError("CUDA error: device-side assert triggered")

    _measure_with(monkeypatch, device_failure)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    debugger.start()
    with pytest.raises(torch.AcceleratorError):
        torch.relu(torch.ones(2))
    debugger.stop()


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_gradients_are_not_held_after_their_backward_entry_is_written(tmp_path, level):
    """The hooks live as long as the graph (here: as long as `loss`); the gradients must not."""
    import gc
    import weakref

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    debugger = PrecisionDebugger(task="statistics", level=level, dump_path=str(tmp_path), model=model)
    debugger.start()
    hidden = model[0](torch.ones(3, 4))
    seen = []
    hidden.register_hook(lambda grad: seen.append(weakref.ref(grad)))
    loss = model[1](hidden).sum()
    loss.backward()
    debugger.stop()
    debugger.step()
    gc.collect()
    assert seen and seen[0]() is None  # `loss` and its graph are still alive
    entries = read_dump(tmp_path / "step0" / "rank" / "dump.json").data
    assert any(name.endswith("backward") or ".backward." in name for name in entries)
    del loss


def test_a_module_that_raises_leaves_the_hierarchy_as_it_was(tmp_path):
    """A caught exception in a forward (an out-of-memory retry, say) must not file later entries under it."""

    class Flaky(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(2, 2)
            self.fail = True

        def forward(self, x):
            y = self.inner(x)
            if self.fail:
                self.fail = False
                raise RuntimeError("out of memory (simulated)")
            return y

    model = torch.nn.Sequential(Flaky(), torch.nn.Linear(2, 2))
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path), model=model)
    debugger.start()
    with pytest.raises(RuntimeError, match=r"out of memory \(simulated\)"):
        model(torch.ones(1, 2))
    model(torch.ones(1, 2)).sum().backward()
    debugger.stop()
    debugger.step()
    folder = tmp_path / "step0" / "rank"
    parents = json.loads((folder / "construct.json").read_text())
    assert parents["Module.0.Flaky.forward.1"] is None
    assert parents["Module.1.Linear.forward.0"] is None
    assert parents["Tensor.sum.0.forward"] is None
    assert parents["Module.0.inner.Linear.forward.1"] == "Module.0.Flaky.forward.1"
    assert "Module.0.Flaky.forward.0" not in read_dump(folder / "dump.json").data  # it never returned


def test_a_scope_ends_at_its_last_api_even_when_that_call_raises(tmp_path):
    x, bad = torch.ones(2, 2), torch.ones(3, 3)
    scope = ["Torch.add.0.forward", "Torch.matmul.0.forward"]
    config = {"task": "statistics", "level": "L1", "dump_path": str(tmp_path), "statistics": {"scope": scope}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start()
    torch.add(x, 1)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.matmul(x, bad)  # shapes do not match
    torch.add(x, 2)
    debugger.stop()
    debugger.step()
    assert list(read_dump(tmp_path / "step0" / "rank" / "dump.json").data) == ["Torch.add.0.forward"]


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_marks_the_recomputed_forward(tmp_path, reentrant):
    """As the reference does; torch's checkpoint (non-reentrant) also stops recomputing by raising inside."""
    from torch.utils.checkpoint import checkpoint

    block, head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
    model = torch.nn.ModuleList([block, head])
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path), model=model)
    debugger.start()
    x = torch.randn(2, 4, requires_grad=True)
    hidden = checkpoint(lambda h: torch.relu(block(h)), x, use_reentrant=reentrant)
    hidden.register_hook(lambda grad: torch.mul(grad, 1.0))  # runs during backward, but recomputes nothing
    head(hidden).sum().backward()
    head(x)  # after the backward: filed at the top, not under a recomputed call
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "step0" / "rank" / "dump.json")
    assert dump.data["Functional.linear.0.forward"]["is_recompute"] is False  # the first pass
    assert dump.data["Module.0.Linear.forward.0"]["is_recompute"] is False
    assert dump.data["Functional.linear.2.forward"]["is_recompute"] is True  # the block again, during backward
    assert dump.data["Module.0.Linear.forward.1"]["is_recompute"] is True
    assert dump.data["Module.1.Linear.forward.1"]["is_recompute"] is False
    assert dump.data["Torch.mul.0.forward"]["is_recompute"] is False  # as the reference decides too
    assert dump.construct["Module.1.Linear.forward.1"] is None


class _WithScriptedPart(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))

    def forward(self, x):
        return self.scripted(self.first(x))


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_torchscript_modules_are_left_out_with_one_warning(tmp_path, caplog, level):
    """TorchScript takes no module hooks: start() must not fail, and the rest of the model is dumped."""
    torch.manual_seed(0)
    model = _WithScriptedPart()
    debugger = PrecisionDebugger(task="statistics", level=level, dump_path=str(tmp_path), model=model)
    x = torch.randn(2, 4)
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        for _ in range(2):
            debugger.start()
            model(x).sum().backward()
            debugger.stop()
            debugger.step()
    warnings = [record.getMessage() for record in caplog.records if "TorchScript" in record.getMessage()]
    assert len(warnings) == 1 and warnings[0].endswith(": scripted")
    for step in (0, 1):
        names = list(load(tmp_path, step).data)
        assert "Module.first.Linear.forward.0" in names and "Module.first.Linear.backward.0" in names
        assert not [name for name in names if "scripted" in name]

    scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    debugger = PrecisionDebugger(task="statistics", level=level, dump_path=str(tmp_path / "whole"), model=scripted)
    debugger.start()  # a model scripted as a whole: nothing to hook, still no failure
    scripted(x).sum().backward()
    debugger.stop()


def test_bad_calls(tmp_path):
    from msprobe.core.errors import UsageError

    with pytest.raises(UsageError, match="level L0 dumps modules"):
        PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path)).start()
    with pytest.raises(UsageError, match="model must be a pytorch model"):
        PrecisionDebugger(dump_path=str(tmp_path), model=[torch.nn.ReLU(), 3])


def test_a_dump_path_that_cannot_be_created_is_a_config_error_before_training(tmp_path):
    from msprobe.core.errors import ConfigError

    blocker = tmp_path / "taken"
    blocker.write_text("a file, not a folder")
    config = tmp_path / "config.json"
    for dump_path, reason in ((blocker / "dump", "Not a directory"), (blocker, "a file of that name is in the way")):
        config.write_text(json.dumps({"task": "statistics", "level": "L1", "dump_path": str(dump_path)}))
        with pytest.raises(ConfigError) as caught:
            PrecisionDebugger(config_path=str(config))
        assert str(caught.value) == f"{config}: dump_path: {dump_path}: cannot be created" + (
            f" ({reason})" if reason == "Not a directory" else f": {reason}"
        )
    good = tmp_path / "new" / "dump"
    PrecisionDebugger(task="statistics", level="L1", dump_path=str(good))
    assert good.is_dir()


@pytest.mark.parametrize(
    "config",
    [
        {"task": "statistics", "level": "L1"},
        {"task": "statistics", "level": "mix", "statistics": {"summary_mode": "md5"}},
        {"task": "tensor", "level": "mix"},
    ],
)
def test_inference_mode_is_dumped_as_no_grad_is(tmp_path, config):
    """Tensors made under torch.inference_mode() have no version counter; the dump must not depend on one."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    x = torch.randn(4, 8)
    dumps = {}
    for mode in (torch.no_grad, torch.inference_mode):
        (tmp_path / mode.__name__).mkdir()
        config_file = tmp_path / mode.__name__ / "config.json"
        config_file.write_text(json.dumps({**config, "dump_path": str(tmp_path / mode.__name__ / "dump")}))
        debugger = PrecisionDebugger(config_path=str(config_file), model=model)
        debugger.start()
        with mode():
            y = model(x)
            y.add_(1)  # an in-place write the statistics must follow without a version counter
            y.sum()
        debugger.stop()
        debugger.step()
        dumps[mode.__name__] = load(tmp_path / mode.__name__ / "dump").data
    expected, inference = dumps["no_grad"], dumps["inference_mode"]
    assert list(inference) == list(expected) and "Tensor.add_.0.forward" in inference
    assert inference == json.loads(json.dumps(expected).replace("no_grad", "inference_mode"))


@pytest.mark.parametrize("strict", [False, True])
def test_a_step_folder_that_cannot_be_made_skips_that_step_only(tmp_path, caplog, strict):
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path), strict=strict)
    (tmp_path / "step1").write_text("a file where step 1's folder would go")
    x = torch.ones(3)
    results = []
    for step in range(3):
        if strict and step == 1:
            with pytest.raises(Exception, match="step1"):
                debugger.start()
            return
        with caplog.at_level(logging.ERROR, logger="msprobe"):
            debugger.start()
        results.append(torch.relu(x * step))
        debugger.stop()
        debugger.step()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        f"msprobe: step 1 is not dumped: {tmp_path / 'step1' / 'rank'}: cannot be created (Not a directory)"
    ]
    assert "Torch.relu.0.forward" in load(tmp_path, 0).data and "Torch.relu.0.forward" in load(tmp_path, 2).data
    assert [r.tolist() for r in results] == [[0.0] * 3, [1.0] * 3, [2.0] * 3]


def test_a_parameter_replaced_between_steps_is_the_one_dumped(tmp_path):
    """Module hooks are made once and put on again at each start(); what they report must follow the model."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    debugger = PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path), model=model)
    x = torch.ones(2, 4)
    for step in range(2):
        if step == 1:
            model[0].weight = torch.nn.Parameter(torch.full((3, 4), 7.0))
            model[0].bias.requires_grad_(False)
        debugger.start()
        model(x).sum().backward()
        debugger.stop()
        debugger.step()
        model.zero_grad()
    entry = load(tmp_path, 1).data["Module.0.Linear.forward.0"]
    assert entry["parameters"]["weight"]["Max"] == entry["parameters"]["weight"]["Min"] == 7.0
    grads = load(tmp_path, 1).data["Module.0.Linear.parameters_grad"]
    assert list(grads) == ["weight"] and grads["weight"][0]["Max"] == 2.0  # two rows of ones, each output used once


def test_meta_tensors_are_described_without_data(tmp_path, caplog):
    """Meta tensors (shapes without memory, as in deferred initialisation) have no values and no file."""
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="msprobe"):
        debugger.start()
        torch.relu(torch.empty(2, 3, device="meta"))
        debugger.stop()
        debugger.step()
    assert not caplog.records
    (output,) = load(tmp_path).data["Torch.relu.0.forward"]["output"]
    nulls = {"Max": None, "Min": None, "Mean": None, "Norm": None}  # the reference's entry for a tensor with no values
    described = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3]}
    assert output == {**described, **nulls, "requires_grad": False}


def test_async_dump_writes_the_same_statistics(tmp_path):
    sync = load(dump_mixed(tmp_path / "sync", "statistics", "L1"))
    deferred = load(dump_mixed(tmp_path / "async", "statistics", "L1", async_dump=True))
    assert list(sync.data) == list(deferred.data)
    for name, entry in sync.data.items():
        for a, b in zip(leaves(entry), leaves(deferred.data[name])):
            for key in ("Max", "Min", "Mean", "Norm"):
                if key in a:
                    assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), (name, key)


def test_async_tensor_dump_writes_the_listed_tensors_at_step_end(tmp_path):
    path = dump_mixed(tmp_path, "tensor", "L1", async_dump=True, tensor={"list": ["relu"]})
    dump = load(path)
    assert set(dump.data) == {"Functional.relu.0.forward", "Functional.relu.0.backward"}
    for leaf in leaves(dump.data["Functional.relu.0.forward"]):
        tensor = torch.load(dump.tensor_dir() / leaf["data_name"], weights_only=True)
        assert tensor.max().item() == pytest.approx(leaf["Max"])


def test_async_tensor_files_are_all_tried_when_one_cannot_be_written(tmp_path, caplog):
    blocked = tmp_path / "tensor_L1" / "step0" / "rank" / "dump_tensor_data" / "Functional.relu.0.forward.output.0.pt"
    blocked.mkdir(parents=True)  # a directory in the way of one file
    path = dump_mixed(tmp_path, "tensor", "L1", async_dump=True, tensor={"list": ["relu"]})
    assert "Functional.relu.0.forward.output.0.pt" in caplog.text
    dump = load(path)
    for name in ("Functional.relu.0.forward", "Functional.relu.0.backward"):
        for leaf in leaves(dump.data[name]):
            if leaf["data_name"] != blocked.name:
                tensor = torch.load(dump.tensor_dir() / leaf["data_name"], weights_only=True)
                assert tensor.max().item() == pytest.approx(leaf["Max"])
    assert load(path, step=1).data  # the next step is dumped as usual


def test_save_at_debug_level(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="debug", task="tensor")
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    PrecisionDebugger.save({"a": y, "b": [1, "s"]}, "var")  # the reference calls it on the class
    debugger.save(y, "var")
    y.sum().backward()
    debugger.step()
    debugger.save(torch.ones(2), "var", save_backward=False)
    debugger.finish()
    step0 = json.loads((tmp_path / "step0" / "rank" / "debug.json").read_text())
    assert list(step0["data"]) == ["var.0.debug", "var.1.debug", "var_grad.0.debug", "var_grad.1.debug"]
    assert step0["data"]["var.0.debug"]["b"] == [{"type": "int", "value": 1}, {"type": "str", "value": "s"}]
    grad_file = tmp_path / "step0" / "rank" / "dump_tensor_data" / "var_grad.1.tensor.pt"
    assert torch.equal(torch.load(grad_file, weights_only=True), torch.ones(3))
    step1 = json.loads((tmp_path / "step1" / "rank" / "debug.json").read_text())
    assert list(step1["data"]) == ["var.0.debug"]


def test_npu_custom_ops_are_hooked_when_torch_npu_is_imported(tmp_path, monkeypatch):
    import sys
    import types

    fake = types.ModuleType("torch_npu")
    fake.npu_rms_norm = lambda x, gamma, epsilon=1e-6: (
        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon) * gamma,
    )
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    debugger.start()
    fake.npu_rms_norm(torch.ones(2, 4), torch.full((4,), 2.0))
    debugger.stop()
    debugger.step()
    entry = load(tmp_path).data["NPU.npu_rms_norm.0.forward"]
    assert entry["output"][0]["Max"] == pytest.approx(2.0, rel=1e-5)
    assert "Torch.rsqrt.0.forward" not in load(tmp_path).data  # only the outermost call


def test_torch_npu_is_never_imported_by_the_tool(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys, torch; from msprobe.pytorch import PrecisionDebugger;"
        f"d = PrecisionDebugger(task='statistics', level='L1', dump_path={str(tmp_path)!r});"
        "d.start(); torch.ones(2).add(1); d.stop(); d.step();"
        "print('torch_npu' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_fast_mean_is_torch_mean_to_the_last_bit(dtype):
    from msprobe.pytorch.dump.measuring import mean_from_sum

    generator = torch.Generator().manual_seed(3)
    for shape in [(7,), (8, 64, 128), (1000003,), (3, 5)]:
        for scale in (1e-3, 1.0, 1e4):
            x = (torch.randn(shape, generator=generator) * scale + 0.3).to(dtype)
            assert mean_from_sum(x) == x.mean().item(), (shape, scale)
    for length in range(1, 300):  # every size a vectorised sum handles in its own way
        x = torch.randn(length, generator=generator).to(dtype) * 37.1
        assert mean_from_sum(x) == x.mean().item(), length
    # more elements than float32 counts exactly: the count itself is rounded, as torch rounds it
    x = torch.full(((1 << 24) + 3,), 0.7, dtype=dtype)
    assert mean_from_sum(x) == x.mean().item()


@pytest.mark.parametrize("archive_limit", [1 << 30, 0])
def test_tensor_files_load_back_equal_from_our_writer_or_torch_save(tmp_path, monkeypatch, archive_limit):
    from msprobe.pytorch.dump import pt_file

    monkeypatch.setattr(pt_file, "MAX_ARCHIVE_BYTES", archive_limit)  # 0: every file through torch.save
    values = torch.randn(3, 5).to(torch.bfloat16)
    pt_file.PtWriter().save(values, tmp_path / "t.pt")
    assert torch.equal(torch.load(tmp_path / "t.pt", weights_only=True), values)
    assert (tmp_path / "t.pt").stat().st_mode & 0o777 == 0o640


def test_md5_follows_in_place_changes_of_a_tensor_seen_before(tmp_path):
    config = {"task": "statistics", "level": "L1", "dump_path": str(tmp_path), "statistics": {"summary_mode": "md5"}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start()
    values = torch.ones(4).add(1.0)  # its md5 is taken as add's output, then reused as mul_'s input
    values.mul_(3.0)
    values.add(0.0)
    debugger.stop()
    debugger.step()
    data = read_dump(tmp_path / "step0" / "rank" / "dump.json").data

    def crc(tensor):
        return f"{zlib.crc32(tensor.numpy().tobytes()):08x}"

    assert data["Tensor.add.0.forward"]["output"][0]["md5"] == crc(torch.full((4,), 2.0))
    assert data["Tensor.mul_.0.forward"]["input_args"][0]["md5"] == crc(torch.full((4,), 2.0))
    assert data["Tensor.mul_.0.forward"]["output"][0]["md5"] == crc(torch.full((4,), 6.0))
    assert data["Tensor.add.1.forward"]["input_args"][0]["md5"] == crc(torch.full((4,), 6.0))


def test_statistics_follow_writes_that_torch_does_not_version(tmp_path):
    """Writes through `.data`, a view of it, or a swapped `.data` leave the tensor's version as it was."""
    config = {"task": "statistics", "level": "L1", "dump_path": str(tmp_path)}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    weight, x = torch.ones(4, 4), torch.ones(4)
    expected = []

    def use_weight():
        expected.append(weight.clone())
        torch.matmul(weight, x)

    debugger.start()
    use_weight()
    weight.data.mul_(3.0)  # the alias's version moves, the weight's does not
    use_weight()
    weight.data[1].zero_()  # a view of the alias, through a method the dump does not record
    use_weight()
    weight.data = torch.full((4, 4), -2.0)  # other memory, same object and version
    use_weight()
    debugger.stop()
    debugger.step()
    data = read_dump(tmp_path / "step0" / "rank" / "dump.json").data
    for index, values in enumerate(expected):
        stats = data[f"Torch.matmul.{index}.forward"]["input_args"][0]
        assert (stats["Max"], stats["Min"], stats["Mean"]) == (values.max(), values.min(), values.mean()), index


def test_module_parameters_follow_writes_through_data_at_l0(tmp_path):
    config = {"task": "statistics", "level": "L0", "dump_path": str(tmp_path)}
    (tmp_path / "c.json").write_text(json.dumps(config))
    layer = torch.nn.Linear(3, 2)
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=layer)
    expected = []

    def use_layer():
        expected.append(layer.weight.detach().clone())
        layer(torch.ones(1, 3))

    debugger.start()
    use_layer()
    layer.weight.data.mul_(4.0)  # listed, but not dumped at L0
    use_layer()
    layer.weight.data.zero_()
    use_layer()
    debugger.stop()
    debugger.step()
    data = read_dump(tmp_path / "step0" / "rank" / "dump.json").data
    for index, values in enumerate(expected):
        stats = data[f"Module.Linear.Linear.forward.{index}"]["parameters"]["weight"]
        assert (stats["Max"], stats["Min"]) == (values.max().item(), values.min().item()), index


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int16,
        torch.bool,
        torch.complex64,
    ],
)
def test_crc32_hex_reads_every_dtype_in_place_as_zlib_would(dtype):
    from msprobe.pytorch.dump.measuring import crc32_hex

    values = (torch.randn(6, 5) * 10).to(dtype)
    for tensor in (values, values.t(), values[0, 0], values[:0]):  # contiguous, transposed, 0-d, empty
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        assert crc32_hex(tensor) == f"{zlib.crc32(raw) & 0xFFFFFFFF:08x}"


def one_tensor_step(model, x, level, path):
    """One step dumped in tensor mode, and a reader of the gradients a backward entry saved as its output."""
    debugger = PrecisionDebugger(task="tensor", level=level, dump_path=str(path), model=model)
    debugger.start()
    model(x).backward()
    debugger.stop()
    debugger.step()
    dump = load(path)

    def saved(name):
        [leaving] = dump.data[name]["output"]
        return torch.load(dump.tensor_dir() / leaving["data_name"])

    return dump, saved


class Residual(torch.nn.Module):
    """Inputs used inside a module and outside it too, a module that uses its input twice, a leaf input."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(4)
        self.fc = torch.nn.Linear(4, 4)
        self.square = Square()

    def forward(self, x):
        h = x * 1.5
        h = h + self.fc(self.norm(h))  # norm's input also takes the residual path
        return (self.square(h) + h).sum() + self.square(x).sum()  # x is a leaf that needs a gradient


class Square(torch.nn.Module):
    def forward(self, x):
        return x * x


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_module_backward_holds_the_module_s_own_input_gradient(tmp_path, level):
    """As a full backward hook reports it: what the module sends back, not the input's whole gradient."""
    torch.manual_seed(0)
    model, x = Residual(), torch.randn(2, 4, requires_grad=True)
    expected = {}
    for name, module in (("norm", model.norm), ("square", model.square)):  # one at a time: each hook alters the graph
        handle = module.register_full_backward_hook(
            lambda module, grad_input, grad_output, name=name: expected.setdefault(name, []).append(grad_input[0])
        )
        model(x).backward()
        handle.remove()
    _dump, saved = one_tensor_step(model, x, level, tmp_path / "d")

    torch.testing.assert_close(saved("Module.norm.LayerNorm.backward.0"), expected["norm"][0], rtol=0, atol=0)
    # numbered in the order backward reaches the calls, as the reference numbers them
    torch.testing.assert_close(saved("Module.square.Square.backward.0"), expected["square"][0], rtol=0, atol=0)
    torch.testing.assert_close(saved("Module.square.Square.backward.1"), expected["square"][1], rtol=0, atol=0)


def test_module_input_gradients_without_torch_s_node_counter(tmp_path, monkeypatch):
    """A torch without autograd's sequence counter: the search is bounded by the inputs alone, same values."""
    from msprobe.pytorch.dump import grad_taps

    monkeypatch.setattr(grad_taps, "_NEXT_SEQUENCE_NR", None)
    test_module_backward_holds_the_module_s_own_input_gradient(tmp_path, "L0")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.act = torch.nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x)) + self.act(x)


class BlockTwice(torch.nn.Module):
    """One block called twice, a module called twice inside it: four Tanh calls."""

    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.block(self.block(x * 2.0))).sum()


def test_module_backward_numbers_follow_backward_order_as_the_reference_numbers_them(tmp_path):
    """backward.0 is the call whose backward ran first (here the last forward call); parents name backward calls.

    The names, parents and values are those the reference tool 1.2.2 writes for this model.
    """
    torch.manual_seed(0)
    model, x = BlockTwice(), torch.randn(2, 4, requires_grad=True)
    handle = model.block.register_full_backward_hook(
        lambda module, grad_input, grad_output: fired.append(grad_input[0])
    )
    fired = []
    model(x).backward()
    handle.remove()
    dump, saved = one_tensor_step(model, x, "mix", tmp_path / "d")

    for number, expected in enumerate(fired):
        torch.testing.assert_close(saved(f"Module.block.Block.backward.{number}"), expected, rtol=0, atol=0)
    parents = dump.construct
    assert parents["Module.block.act.Tanh.backward.0"] == "Module.block.Block.backward.0"
    assert parents["Module.block.act.Tanh.backward.3"] == "Module.block.Block.backward.1"
    assert parents["Torch.tanh.3.backward"] == "Module.block.act.Tanh.backward.0"
    assert parents["Functional.linear.1.backward"] == "Module.block.fc.Linear.backward.0"
    assert parents["Module.block.fc.Linear.backward.0"] == "Module.block.Block.backward.0"
    backward = [name for name in dump.data if name.startswith("Module.block.Block.backward")]
    assert backward == ["Module.block.Block.backward.0", "Module.block.Block.backward.1"]


def dump_block_twice(path, **statistics):
    torch.manual_seed(0)
    model, x = BlockTwice(), torch.randn(2, 4, requires_grad=True)
    config = {"task": "statistics", "dump_path": str(path), "level": "L0", "statistics": statistics}
    (path.parent / f"{path.name}.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(path.parent / f"{path.name}.json"), model=model)
    debugger.start()
    model(x).backward()
    debugger.stop()
    debugger.step()
    return load(path)


def test_list_filter_selects_a_module_backward_entry_by_its_backward_number(tmp_path):
    name = "Module.block.Block.backward.0"
    listed = dump_block_twice(tmp_path / "listed", list=[name])
    assert [entry for entry in listed.data if ".backward." in entry] == [name]
    everything = dump_block_twice(tmp_path / "all")
    order = list(everything.data)
    assert order.index(name) < order.index("Module.block.Block.backward.1")  # written, so run, first
    assert listed.data[name] == everything.data[name]  # the same call, though filtered before its number was known
    assert everything.data[name] != everything.data["Module.block.Block.backward.1"]


def test_tensor_files_hold_the_values_of_the_call_though_written_right_after(tmp_path):
    """What a file holds is the tensor as the call left it, however soon the training writes it."""
    x = torch.tensor([[-1.0, 2.0], [3.0, -4.0]])
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    y = F.relu(x)
    y.add_(100.0)  # written right after: the relu output file must not see it
    debugger.stop()
    debugger.step()
    dump = load(tmp_path / "d")
    [relu_output] = dump.data["Functional.relu.0.forward"]["output"]
    torch.testing.assert_close(torch.load(dump.tensor_dir() / relu_output["data_name"]), F.relu(x))
    [add_output] = dump.data["Tensor.add_.0.forward"]["output"]
    torch.testing.assert_close(torch.load(dump.tensor_dir() / add_output["data_name"]), F.relu(x) + 100.0)


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
@pytest.mark.parametrize("task", ["statistics", "md5", "tensor"])
def test_nested_tensors_show_their_padded_shape_and_the_statistics_of_their_values(tmp_path, caplog, layout, task):
    parts = [torch.randn(2, 4), torch.randn(3, 4) - 1.5]
    nested = torch.nested.nested_tensor(parts, layout=layout)
    config = {"task": "statistics", "statistics": {"summary_mode": "md5"}} if task == "md5" else {"task": task}
    (tmp_path / "config.json").write_text(json.dumps({**config, "level": "L1", "dump_path": str(tmp_path / "d")}))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "config.json"))
    debugger.start()
    torch.relu(nested)
    debugger.stop()
    debugger.step()
    assert "failed" not in caplog.text
    dump = read_dump(tmp_path / "d" / "step0" / "rank" / "dump.json")
    [given] = dump.data["Torch.relu.0.forward"]["input_args"]
    values = torch.cat([part.reshape(-1) for part in parts]).numpy()
    assert given["shape"] == [2, 3, 4]
    assert given["Max"] == pytest.approx(values.max()) and given["Min"] == pytest.approx(values.min())
    assert given["Mean"] == pytest.approx(values.mean(), rel=1e-5)
    assert given["Norm"] == pytest.approx(np.linalg.norm(values), rel=1e-5)
    if task == "md5":
        assert given["md5"] == f"{zlib.crc32(values.tobytes()):08x}"
    if task == "tensor":
        saved = torch.load(dump.tensor_dir() / given["data_name"], weights_only=True)
        assert torch.equal(saved, torch.nested.to_padded_tensor(nested, 0.0))


def test_a_transformer_encoder_on_its_padding_free_path_is_dumped_at_mix(tmp_path, caplog):
    """In eval mode with a padding mask, nn.TransformerEncoder runs its layers on nested tensors."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 2 + [True] * 3])
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="mix", task="statistics")
    debugger.start(encoder)
    with torch.no_grad():
        encoder(torch.randn(3, 5, 16), src_key_padding_mask=mask)
    debugger.stop()
    debugger.step()
    assert "failed" not in caplog.text
    dump = read_dump(tmp_path / "step0" / "rank" / "dump.json")
    attention = dump.data["Module.layers.0.self_attn.MultiheadAttention.forward.0"]
    assert attention["input_args"][0]["shape"] == [3, 5, 16]
    assert (
        "Functional.linear.3.forward" in dump.data and "Module.layers.1.TransformerEncoderLayer.forward.0" in dump.data
    )


@pytest.mark.parametrize("task", ["statistics", "md5", "tensor"])
def test_calls_inside_torch_func_transforms_show_the_whole_batch(tmp_path, caplog, task):
    """Under vmap a function sees one sample at a time; the dump measures all of them (the batch dimension shown)."""
    torch.manual_seed(0)
    x, w = torch.randn(4, 3), torch.randn(3, 2)
    config = {"task": "statistics", "statistics": {"summary_mode": "md5"}} if task == "md5" else {"task": task}
    (tmp_path / "config.json").write_text(json.dumps({**config, "level": "L1", "dump_path": str(tmp_path / "d")}))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "config.json"))

    def sample_loss(weights, row):
        return torch.sin(row @ weights).sum()

    debugger.start()
    batched = torch.func.vmap(lambda row: sample_loss(w, row))(x)
    per_sample_grads = torch.func.vmap(torch.func.grad(sample_loss), in_dims=(None, 0))(w, x)
    debugger.stop()
    debugger.step()
    assert "failed" not in caplog.text
    torch.testing.assert_close(batched, torch.sin(x @ w).sum(1))
    torch.testing.assert_close(per_sample_grads, torch.stack([torch.outer(r, torch.cos(r @ w)) for r in x]))
    dump = read_dump(tmp_path / "d" / "step0" / "rank" / "dump.json")
    [given] = dump.data["Torch.sin.0.forward"]["input_args"]
    expected = (x @ w).numpy()
    assert given["shape"] == [4, 2]
    assert given["Max"] == pytest.approx(expected.max()) and given["Min"] == pytest.approx(expected.min())
    assert given["Norm"] == pytest.approx(np.linalg.norm(expected), rel=1e-5)
    if task == "md5":
        assert given["md5"] == f"{zlib.crc32(np.ascontiguousarray(expected).tobytes()):08x}"
    if task == "tensor":
        torch.testing.assert_close(torch.load(dump.tensor_dir() / given["data_name"], weights_only=True), x @ w)
    assert {"Torch.sin.1.forward", "Torch.sin.1.backward"} <= set(dump.data)  # inside vmap(grad(...))


def test_an_optimizer_step_that_raised_does_not_adopt_the_calls_after_it(tmp_path):
    """mix: torch runs no post hook for a step() that raised; a training that catches it and goes on is not
    filed under the optimizer node."""

    class Flaky(torch.optim.SGD):
        def step(self, closure=None):
            raise FloatingPointError("loss scale overflow")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    optimizer = Flaky(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path), model=model)
    debugger.start()
    model(torch.ones(2, 4)).sum().backward()
    with pytest.raises(FloatingPointError):
        optimizer.step()
    model(torch.ones(2, 4)).sum()  # the training goes on
    debugger.stop()
    debugger.step()
    parents = load(tmp_path).construct
    assert parents["optimizer"] is None
    second = [name for name in parents if name.startswith("Module.") and name.endswith("forward.1")]
    assert second and all(parents[name] is None for name in second), {name: parents[name] for name in second}


def test_async_tensor_dump_keeps_its_file_threads_for_the_run(tmp_path):
    import threading

    (tmp_path / "c.json").write_text(
        json.dumps(
            {
                "task": "tensor",
                "level": "L1",
                "dump_path": str(tmp_path / "d"),
                "async_dump": True,
                "tensor": {"list": ["relu"]},
            }
        )
    )
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    threads_per_step = []
    for _ in range(3):
        debugger.start()
        for _ in range(6):
            torch.relu(torch.randn(64))
        debugger.stop()
        debugger.step()
        threads_per_step.append({t for t in threading.enumerate() if t.name.startswith("msprobe-files")})
    assert threads_per_step[0] and threads_per_step[1] <= threads_per_step[0] >= threads_per_step[2]
    debugger.finish()
    assert not any(thread.is_alive() for thread in threads_per_step[0])
    assert len(list((tmp_path / "d" / "step2" / "rank" / "dump_tensor_data").iterdir())) == 12


def test_torch_func_transforms_at_mix(tmp_path, caplog):
    """Module and API entries inside vmap, in their hierarchy, measured over the whole batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh())
    x = torch.randn(4, 3)
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path), model=model)
    debugger.start()
    out = torch.func.vmap(model)(x)
    debugger.stop()
    debugger.step()
    assert "failed" not in caplog.text
    torch.testing.assert_close(out, model(x))
    dump = load(tmp_path)
    assert dump.construct["Functional.linear.0.forward"] == "Module.0.Linear.forward.0"
    assert dump.construct["Module.0.Linear.forward.0"] is None  # as in the eager run: the root is no entry
    assert dump.construct["Torch.tanh.0.forward"] == "Module.1.Tanh.forward.0"
    with torch.no_grad():
        expected = model[0](x).numpy()
    [output] = dump.data["Functional.linear.0.forward"]["output"]
    assert output["shape"] == [4, 2]
    assert output["Max"] == pytest.approx(expected.max()) and output["Min"] == pytest.approx(expected.min())
    [module_output] = dump.data["Module.0.Linear.forward.0"]["output"]
    assert module_output["Max"] == output["Max"]


def test_the_overflow_check_inside_vmap_names_the_api_that_overflowed(tmp_path, caplog):
    x = torch.tensor([[1.0], [20.0]], dtype=torch.float16)  # exp(20) is beyond float16's range for one sample
    debugger = PrecisionDebugger(task="overflow_check", level="L1", dump_path=str(tmp_path))
    debugger.start()
    out = torch.func.vmap(lambda row: torch.exp(row) * 2)(x)
    debugger.stop()
    debugger.step()
    assert "failed" not in caplog.text
    assert torch.isinf(out[1]).all() and torch.isfinite(out[0]).all()
    dump = load(tmp_path)
    assert set(dump.data) == {"Torch.exp.0.forward"}  # the multiplication only passed the inf on
    [output] = dump.data["Torch.exp.0.forward"]["output"]
    assert output["shape"] == [2, 1] and output["Max"] == math.inf


@pytest.mark.parametrize("with_fast_path", [True, False], ids=["C-path", "Python-path"])
def test_calls_that_write_in_place_or_hand_their_input_back_get_a_backward_entry(tmp_path, monkeypatch, with_fast_path):
    """relu_ replaces its input's autograd node, dropout with p=0 returns its input: both have a backward."""
    from msprobe.pytorch.dump import fast_path

    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path and fast_path.AVAILABLE)
    weight = torch.tensor([1.0, 1.0], requires_grad=True)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path))
    debugger.start()
    hidden = weight * torch.tensor([-1.0, 2.0])
    out = torch.nn.functional.dropout(torch.relu_(hidden), p=0.0, training=True)
    (out * 3).sum().backward()
    debugger.stop()
    debugger.step()
    data = load(tmp_path).data
    relu, dropout = data["Torch.relu_.0.backward"], data["Functional.dropout.0.backward"]
    # hand-derived: d(3*sum)/d(out) = 3 everywhere; relu passes it where its input was positive
    assert (dropout["input"][0]["Max"], dropout["input"][0]["Min"]) == (3.0, 3.0)
    assert (dropout["output"][0]["Max"], dropout["output"][0]["Min"]) == (3.0, 3.0)
    assert (relu["output"][0]["Max"], relu["output"][0]["Min"], relu["output"][0]["Mean"]) == (3.0, 0.0, 1.5)
    assert list(data).index("Functional.dropout.0.backward") < list(data).index("Torch.relu_.0.backward")


def test_parameter_gradients_only_for_modules_whose_forward_ran(tmp_path):
    """nn.MultiheadAttention uses out_proj's weight without calling out_proj: no entry, as the reference."""
    model = torch.nn.Sequential(torch.nn.MultiheadAttention(8, 2, batch_first=True))
    debugger = PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path), model=model)
    debugger.start()
    x = torch.randn(2, 3, 8)
    model[0](x, x, x)[0].sum().backward()
    debugger.stop()
    debugger.step()
    names = list(load(tmp_path).data)
    # its weight did get a gradient, the one a run without the dump gets
    plain = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    plain.load_state_dict(model[0].state_dict())
    plain(x, x, x)[0].sum().backward()
    assert torch.allclose(model[0].out_proj.weight.grad, plain.out_proj.weight.grad, rtol=0, atol=1e-6)
    assert plain.out_proj.weight.grad.abs().sum() > 0
    assert "Module.0.MultiheadAttention.parameters_grad" in names
    assert not any(".out_proj." in name for name in names)


def test_a_module_handing_its_input_back_passes_the_gradient_through(tmp_path):
    """nn.Dropout(p=0) returns its input: its backward entry's input gradient is the output's (hand-derived: 2)."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.0))
    debugger = PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path), model=model)
    debugger.start()
    (model(torch.ones(2, 3)) * 2).sum().backward()
    debugger.stop()
    debugger.step()
    entry = load(tmp_path).data["Module.1.Dropout.backward.0"]
    for side in ("input", "output"):  # the gradient arriving, and the one passed on to the Linear
        assert (entry[side][0]["Max"], entry[side][0]["Min"]) == (2.0, 2.0), side


def test_a_step_whose_files_cannot_be_written_never_lends_its_folder_to_the_next(tmp_path, monkeypatch, caplog):
    """A full disk at step 0's end: step 1's entries and files go to step 1's folder, and the log says what of
    step 0 was lost, with its step, rank and path."""
    import errno

    from msprobe.core.dump import writer as writer_module

    real_close = writer_module.DumpWriter.close

    def full_disk_on_step0(self):
        if "step0" in str(self.folder):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_close(self)

    monkeypatch.setattr(writer_module.DumpWriter, "close", full_disk_on_step0)
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path))
    for step in range(2):
        debugger.start()
        torch.relu(torch.full((2,), float(step + 1)))
        debugger.stop()
        with caplog.at_level(logging.WARNING, logger="msprobe"):
            debugger.step()
    step0 = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())["data"]  # flushed before the end
    assert "Torch.relu.1.forward" not in step0 and step0["Torch.relu.0.forward"]["output"][0]["Max"] == 1.0
    step1 = load(tmp_path, 1)
    assert step1.data["Torch.relu.0.forward"]["output"][0]["Max"] == 2.0  # step 1's value, in step 1's folder
    assert (tmp_path / "step1" / "rank" / "dump_tensor_data" / "Torch.relu.0.forward.output.0.pt").exists()
    assert not (tmp_path / "step0" / "rank" / "dump_tensor_data" / "Torch.relu.1.forward.output.0.pt").exists()
    message = caplog.text
    assert "step 0, rank -" in message and str(tmp_path / "step0" / "rank") in message and "No space left" in message


def test_a_step_folder_planted_as_a_symlink_is_not_written_through(tmp_path, caplog):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "step1").symlink_to(elsewhere)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "dump"))
    for _ in range(2):
        debugger.start()
        torch.relu(torch.ones(2))
        debugger.stop()
        debugger.step()
    assert (tmp_path / "dump" / "step0" / "rank" / "dump.json").exists()
    assert not list(elsewhere.iterdir())  # step 1 was not written into the link's target
    assert "symbolic link" in caplog.text


def test_folders_are_0750_and_files_0640_all_the_way_down(tmp_path):
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "a" / "b"))
    debugger.start()
    torch.relu(torch.ones(2))
    debugger.stop()
    debugger.step()
    for folder in ("a", "a/b", "a/b/step0", "a/b/step0/rank", "a/b/step0/rank/dump_tensor_data"):
        assert (tmp_path / folder).stat().st_mode & 0o777 == 0o750, folder  # parents used to get 0755
    for file in (tmp_path / "a/b/step0/rank").rglob("*.*"):
        assert file.stat().st_mode & 0o777 == 0o640, file


@pytest.mark.parametrize(("task", "level", "extra"), [
    ("statistics", "mix", {}),
    ("tensor", "L1", {}),
    ("statistics", "L0", {"statistics": {"summary_mode": "md5"}}),
])  # fmt: skip
def test_our_dump_files_fit_the_published_models(tmp_path, task, level, extra):
    from msprobe.core.dump.schema import ConstructFile, DumpFile, StackFile

    path = dump_mixed(tmp_path, task, level, **extra)
    folder = path / "step0" / "rank"
    dump = DumpFile.model_validate(json.loads((folder / "dump.json").read_text()))
    assert dump.task == task and dump.data
    StackFile.model_validate(json.loads((folder / "stack.json").read_text()))
    ConstructFile.model_validate(json.loads((folder / "construct.json").read_text()))


@pytest.mark.parametrize("with_fast_path", [True, False])
def test_keyword_tensors_files_are_named_kwargs_as_the_references(tmp_path, monkeypatch, with_fast_path):
    """mindstudio-probe 1.2.2 writes ``F.linear(x, weight=w)``'s weight to Functional.linear.0.forward.kwargs.weight
    (seen in its tensor dumps); its tensor-mode compare names the row after the file, so the name must match."""
    from msprobe.pytorch.dump import fast_path

    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path and fast_path.AVAILABLE)
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    F.linear(x, weight=w)
    debugger.stop()
    debugger.step()
    dump = load(tmp_path / "d")
    entry = dump.data["Functional.linear.0.forward"]
    assert entry["input_args"][0]["data_name"] == "Functional.linear.0.forward.input.0.pt"
    assert entry["input_kwargs"]["weight"]["data_name"] == "Functional.linear.0.forward.kwargs.weight.pt"
    torch.testing.assert_close(torch.load(dump.tensor_dir() / "Functional.linear.0.forward.kwargs.weight.pt"), w)


@pytest.mark.parametrize("with_fast_path", [True, False])
def test_zero_dimensional_tensors_are_written_as_the_reference_writes_them(tmp_path, monkeypatch, with_fast_path):
    """mindstudio-probe 1.2.2's own dump of these calls: a 0-d tensor's value is all four statistics, an int for
    an integer tensor; inf or nan also gets the ``*_except_inf_nan`` pair, the value itself."""
    from msprobe.pytorch.dump import fast_path

    monkeypatch.setattr(fast_path, "AVAILABLE", with_fast_path and fast_path.AVAILABLE)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    torch.tensor(float("inf")) * 1
    torch.tensor(float("nan")) * 1
    torch.tensor(-3, dtype=torch.int8) * 1
    torch.tensor(2.5, dtype=torch.float16) * 1
    debugger.stop()
    debugger.step()
    text = (tmp_path / "d" / "step0" / "rank" / "dump.json").read_text()
    outputs = [json.dumps(entry["output"][0]) for entry in json.loads(text)["data"].values()]
    stats = '"Max": {0}, "Min": {0}, "Mean": {0}, "Norm": {0}, "requires_grad": false'
    assert outputs == [
        f'{{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [], {stats.format("Infinity")}, '
        '"Max_except_inf_nan": Infinity, "Min_except_inf_nan": Infinity}',
        f'{{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [], {stats.format("NaN")}, '
        '"Max_except_inf_nan": NaN, "Min_except_inf_nan": NaN}',
        f'{{"type": "torch.Tensor", "dtype": "torch.int8", "shape": [], {stats.format("-3")}}}',
        f'{{"type": "torch.Tensor", "dtype": "torch.float16", "shape": [], {stats.format("2.5")}}}',
    ]

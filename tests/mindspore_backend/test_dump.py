"""MindSpore PyNative dump on CPU MindSpore 2.10: L0, L1 and mix, statistics and tensor."""

import json
import math

import mindspore as ms
import numpy as np
import pytest
from dump_values import leaves
from mindspore import Tensor, mint, nn, ops

from msprobe.core.dump.reader import read_dump
from msprobe.mindspore import PrecisionDebugger
from msprobe.mindspore.common.utils import MsprobeStep

ms.set_context(mode=ms.PYNATIVE_MODE)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, pad_mode="valid", has_bias=True)
        self.fc = nn.Dense(2 * 4 * 4, 8)
        self.norm = nn.LayerNorm((8,))
        self.dropout = nn.Dropout(p=0.0)
        self.head = nn.Dense(8, 2)

    def construct(self, x):
        x = self.conv(x).reshape(x.shape[0], -1)
        h = mint.nn.functional.relu(self.norm(self.fc(x)))
        return self.head(self.dropout(h))


def train(dump_path, level, task, steps=2, **extra):
    ms.set_seed(0)
    net = Net()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    config = {"task": task, "level": level, "dump_path": str(dump_path), **extra}
    (dump_path.parent / f"{dump_path.name}.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(dump_path.parent / f"{dump_path.name}.json"), model=net)

    def loss_fn(x, y):
        return ((net(x) - y) ** 2).mean()

    grad_fn = ms.value_and_grad(loss_fn, None, optimizer.parameters)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        debugger.start()
        x = Tensor(rng.standard_normal((3, 1, 6, 6)).astype(np.float32))
        y = Tensor(np.zeros((3, 2), np.float32))
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        losses.append(float(loss.asnumpy()))
        debugger.stop()
        debugger.step()
    return losses


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_levels_write_the_reference_names(tmp_path, level):
    train(tmp_path / "d", level, "statistics")
    first_step = None
    for step in (0, 1):
        dump = read_dump(tmp_path / "d" / f"step{step}" / "rank" / "dump.json")
        assert dump.framework == "mindspore" and dump.level == level
        names = list(dump.data)
        assert sorted(names) == sorted(first_step or names)  # each step dumps the same calls
        first_step = names
        if level in ("L0", "mix"):
            for expected in (
                "Cell.conv.Conv2d.forward.0",
                "Cell.fc.Dense.forward.0",
                "Cell.fc.Dense.backward.0",
                "Cell.fc.Dense.parameters_grad",
                "Cell.norm.LayerNorm.forward.0",
            ):
                assert expected in names
        if level in ("L1", "mix"):
            assert "MintFunctional.relu.0.forward" in names and "MintFunctional.relu.0.backward" in names
        entry = next(iter(dump.data.values()))
        leaf = next(leaves(entry))
        assert leaf["type"] == "mindspore.Tensor" and leaf["dtype"] == "Float32"
    if level == "mix":
        assert dump.construct["MintFunctional.relu.0.forward"] is None
        assert dump.construct["Cell.fc.Dense.forward.0"] is None


def test_tensor_files_and_statistics_agree_with_numpy(tmp_path):
    train(tmp_path / "d", "mix", "tensor")
    dump = read_dump(tmp_path / "d" / "step0" / "rank" / "dump.json")
    checked = 0
    for entry in dump.data.values():
        for leaf in leaves(entry):
            if "data_name" not in leaf:
                continue
            array = np.load(dump.tensor_dir() / leaf["data_name"]).astype(np.float64)
            for key, value in (
                ("Max", array.max()),
                ("Min", array.min()),
                ("Mean", array.mean()),
                ("Norm", np.linalg.norm(array.ravel())),
            ):
                assert math.isclose(leaf[key], value, rel_tol=1e-5, abs_tol=1e-6), (leaf["data_name"], key)
            checked += 1
    assert checked > 20
    grad = dump.data["Cell.fc.Dense.parameters_grad"]["weight"][0]
    assert grad["data_name"] == "Cell.fc.Dense.parameters_grad.weight.npy"
    assert np.load(dump.tensor_dir() / grad["data_name"]).shape == (8, 32)


def test_md5_and_structure(tmp_path):
    """Each md5 is zlib's CRC-32 of the tensor's bytes: the same run dumped in tensor mode gives the bytes."""
    import zlib

    train(tmp_path / "md5", "L1", "statistics", statistics={"summary_mode": "md5"})
    dump = read_dump(tmp_path / "md5" / "step0" / "rank" / "dump.json")
    train(tmp_path / "tensors", "L1", "tensor")
    saved = read_dump(tmp_path / "tensors" / "step0" / "rank" / "dump.json")
    checked = 0
    for name, entry in dump.data.items():
        for ours, file_leaf in zip(leaves(entry), leaves(saved.data.get(name, {}))):
            if "md5" not in ours or "data_name" not in file_leaf:
                continue
            values = np.load(saved.tensor_dir() / file_leaf["data_name"])
            assert ours["md5"] == f"{zlib.crc32(np.ascontiguousarray(values).tobytes()):08x}", (name, ours)
            checked += 1
    assert checked > 20
    train(tmp_path / "structure", "mix", "structure")
    dump = read_dump(tmp_path / "structure" / "step0" / "rank" / "dump.json")
    assert dump.data and all(not list(leaves(entry)) for entry in dump.data.values())


def test_training_is_unchanged_by_the_tool(tmp_path):
    plain = train(tmp_path / "off", "L1", "statistics", step=[99])  # nothing selected: no hooks at all
    dumped = train(tmp_path / "on", "mix", "tensor")
    assert plain == dumped


def test_model_train_with_msprobe_step(tmp_path):
    from mindspore import dataset as ds
    from mindspore.train import Model

    ms.set_seed(0)
    net = Net()
    loss = nn.MSELoss()
    model = Model(net, loss_fn=loss, optimizer=nn.SGD(net.trainable_params(), learning_rate=0.1))
    data = ds.NumpySlicesDataset(
        {
            "x": np.random.default_rng(0).standard_normal((6, 1, 6, 6)).astype(np.float32),
            "y": np.zeros((6, 2), np.float32),
        },
        shuffle=False,
    ).batch(3)
    debugger = PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path), model=net)
    model.train(1, data, callbacks=[MsprobeStep(debugger)], dataset_sink_mode=False)
    for step in (0, 1):
        dump = read_dump(tmp_path / f"step{step}" / "rank" / "dump.json")
        assert "Cell.fc.Dense.forward.0" in dump.data


def test_save_at_debug_level(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="debug", task="tensor")
    w = ms.Parameter(Tensor(np.array([1.0, -2.0, 3.0], np.float32)), name="w")

    def loss(x):
        y = x * w
        PrecisionDebugger.save(y, "y")  # on the class, as the reference documents it
        debugger.save({"scale": 2, "y": y}, "nested", save_backward=False)
        return (y * 2).sum()

    ms.grad(loss)(Tensor(np.ones(3, np.float32)))
    debugger.step()
    data = json.loads((tmp_path / "step0" / "rank" / "debug.json").read_text())["data"]
    assert list(data) == ["y.0.debug", "nested.0.debug", "y_grad.0.debug"]
    assert data["nested.0.debug"]["scale"] == {"type": "int", "value": 2}
    grad = np.load(tmp_path / "step0" / "rank" / "dump_tensor_data" / data["y_grad.0.debug"]["data_name"])
    assert np.array_equal(grad, np.full(3, 2.0, np.float32))


def test_primitives_inside_cells_are_dumped_when_the_model_is_given(tmp_path):

    train(tmp_path / "d", "mix", "tensor", steps=1)
    dump = read_dump(tmp_path / "d" / "step0" / "rank" / "dump.json")
    names = list(dump.data)
    for expected in (
        "Primitive.conv2d.Conv2D.0.forward",
        "Primitive.matmul.MatMul.0.forward",
        "Primitive.matmul.MatMul.1.forward",  # fc, then head
        "Primitive.bias_add.BiasAdd.0.forward",
        "Primitive.matmul.MatMul.0.backward",
    ):
        assert expected in names, names
    assert dump.construct["Primitive.matmul.MatMul.0.forward"] == "Cell.fc.Dense.forward.0"
    assert dump.construct["Primitive.matmul.MatMul.1.forward"] == "Cell.head.Dense.forward.0"
    folder = tmp_path / "d" / "step0" / "rank" / "dump_tensor_data"
    entry = dump.data["Primitive.matmul.MatMul.0.forward"]
    x, weight = (np.load(folder / arg["data_name"]) for arg in entry["input_args"][:2])
    output = np.load(folder / entry["output"][0]["data_name"])
    np.testing.assert_allclose(output, x @ weight.T, rtol=1e-5, atol=1e-6)  # Dense: transpose_b
    assert entry["output"][0]["Max"] == pytest.approx(float(output.max()), rel=1e-6)


def test_primitives_are_not_dumped_without_the_model_and_are_put_back(tmp_path):
    net = Net()
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "plain"))
    debugger.start()
    net(Tensor(np.ones((1, 1, 6, 6), np.float32)))
    debugger.stop()
    debugger.step()
    assert not [n for n in read_dump(tmp_path / "plain" / "step0" / "rank").data if n.startswith("Primitive.")]
    with_model = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "model"), model=net)
    with_model.start()
    assert type(net.fc.matmul).__name__ == "_HookedPrimitive"
    net(Tensor(np.ones((1, 1, 6, 6), np.float32)))
    with_model.stop()
    with_model.step()
    assert type(net.fc.matmul).__name__ == "MatMul" and net.fc._primitives["matmul"] is net.fc.matmul


class JitBlock(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 2)

    @ms.jit
    def construct(self, x):
        return mint.nn.functional.relu(self.fc(x))


class WithJit(nn.Cell):
    def __init__(self):
        super().__init__()
        self.block = JitBlock()
        self.head = nn.Dense(2, 1)

    def construct(self, x):
        return self.head(self.block(x * 2))


def test_jit_cells_are_dumped_as_one_api(tmp_path):
    net = WithJit()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    grad_fn = ms.value_and_grad(lambda x: net(x).sum(), None, optimizer.parameters)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    debugger = PrecisionDebugger(task="tensor", level="mix", dump_path=str(tmp_path / "d"), model=net)
    debugger.start()
    _, grads = grad_fn(Tensor(x))
    optimizer(grads)
    debugger.stop()
    debugger.step()
    folder = tmp_path / "d" / "step0" / "rank"
    dump = read_dump(folder)
    assert {"Jit.JitBlock.0.forward", "Jit.JitBlock.0.backward", "Primitive.matmul.MatMul.0.forward"} <= set(dump.data)
    assert dump.construct["Jit.JitBlock.0.forward"] == "Cell.block.JitBlock.forward.0"
    entry = dump.data["Jit.JitBlock.0.forward"]
    weight, bias = net.block.fc.weight.asnumpy(), net.block.fc.bias.asnumpy()  # after one SGD step: recompute
    weight = weight + 0.1 * grads[0].asnumpy()
    bias = bias + 0.1 * grads[1].asnumpy()
    output = np.load(folder / "dump_tensor_data" / entry["output"][0]["data_name"])
    np.testing.assert_allclose(output, np.maximum(2 * x @ weight.T + bias, 0), rtol=1e-5, atol=1e-6)
    # the head's primitive is dumped, the jit block's inner one is not (it runs inside the compiled graph)
    assert dump.construct["Primitive.matmul.MatMul.0.forward"] == "Cell.head.Dense.forward.0"
    assert type(net.head.matmul).__name__ == "MatMul"


class Around(nn.Cell):
    """``first``, then a Dense head."""

    def __init__(self, first):
        super().__init__()
        self.first = first
        self.head = nn.Dense(2, 2)

    def construct(self, x):
        return self.head(self.first(x))


def test_a_cell_that_raises_leaves_the_hierarchy_as_it_was(tmp_path):
    """A caught exception in a construct must not file the later entries under that call."""

    class Flaky(nn.Cell):
        def __init__(self):
            super().__init__()
            self.inner = nn.Dense(2, 2)
            self.fail = True

        def construct(self, x):
            y = self.inner(x)
            if self.fail:
                self.fail = False
                raise RuntimeError("out of memory (simulated)")
            return y

    net = Around(Flaky())
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path / "d"), model=net)
    debugger.start()
    with pytest.raises(RuntimeError, match=r"out of memory \(simulated\)"):
        net(Tensor(np.ones((1, 2), np.float32)))
    net(Tensor(np.ones((1, 2), np.float32)))
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    assert dump.construct["Cell.first.Flaky.forward.1"] is None
    assert dump.construct["Cell.head.Dense.forward.0"] is None
    assert dump.construct["Cell.first.inner.Dense.forward.1"] == "Cell.first.Flaky.forward.1"
    assert "Cell.first.Flaky.forward.0" not in dump.data


def test_a_scope_ends_at_its_last_api_even_when_that_call_raises(tmp_path, caplog):
    """The call's own error reaches the caller at the call, not the tool's statistics afterwards."""
    x, bad = Tensor(np.ones((2, 2), np.float32)), Tensor(np.ones((3, 3), np.float32))
    scope = ["Mint.add.0.forward", "Mint.matmul.0.forward"]
    config = {"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "d"), "statistics": {"scope": scope}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start()
    mint.add(x, 1)
    with pytest.raises((RuntimeError, ValueError)):
        mint.matmul(x, bad)  # shapes do not match
    mint.add(x, 2)
    debugger.stop()
    debugger.step()
    assert list(read_dump(tmp_path / "d" / "step0" / "rank").data) == ["Mint.add.0.forward"]
    assert "failed" not in caplog.text


def test_an_error_of_a_call_on_inputs_still_being_computed_reaches_the_caller(tmp_path, caplog):
    """PyNative runs ahead: the check of a call on pending inputs waits for its first use, which is the tool's."""
    x, bad = Tensor(np.ones((2, 2), np.float32)), Tensor(np.ones((3, 3), np.float32))
    config = {"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "d")}
    (tmp_path / "c.json").write_text(json.dumps({**config, "statistics": {"data_mode": ["forward"]}}))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"))
    debugger.start()
    with pytest.raises(RuntimeError, match=r"shape1\[-1\] must be equal to shape2\[-2\], but got 2 and 3"):
        mint.matmul(mint.add(x, 1), mint.add(bad, 1))
    debugger.stop()
    debugger.step()
    assert "failed" not in caplog.text


def test_an_error_inside_a_cell_reaches_the_caller_at_l0(tmp_path, caplog):
    class Broken(nn.Cell):
        def construct(self, x):
            return mint.matmul(mint.add(x, 1), mint.add(x[:1, :1].broadcast_to((3, 3)), 1))

    net = Around(Broken())
    debugger = PrecisionDebugger(task="statistics", level="L0", dump_path=str(tmp_path / "d"), model=net)
    debugger.start()
    with pytest.raises(RuntimeError, match=r"shape1\[-1\] must be equal to shape2\[-2\], but got 2 and 3"):
        net(Tensor(np.ones((2, 2), np.float32)))
    net.head(Tensor(np.ones((1, 2), np.float32)))
    debugger.stop()
    debugger.step()
    assert "failed" not in caplog.text
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    assert dump.construct["Cell.head.Dense.forward.0"] is None


def test_strict_raises_the_tool_s_own_errors(tmp_path, monkeypatch):
    from msprobe.mindspore.dump import tensors

    def broken(tensor, dtype=None):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(tensors, "measure", broken)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"), strict=True)
    debugger.start()
    with pytest.raises(RuntimeError, match="simulated failure"):
        mint.abs(Tensor(np.ones((2,), np.float32)))
    debugger.stop()


class WritesItsCellsOutputs(nn.Cell):
    """Writes in place to a cell's output and, inside a cell, to that cell's input."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(2, 2)
        self.scale = Scale()

    def construct(self, x):
        y = self.fc(x)
        ops.assign(y, y * 2)
        return self.scale(y).sum()


class Scale(nn.Cell):
    def construct(self, x):
        ops.assign(x, x * 3)  # reaches the caller's tensor
        return x


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_in_place_writes_to_cell_outputs_and_inputs_work_as_without_the_tool(tmp_path, level):
    def run(dumping):
        ms.set_seed(0)
        net = WritesItsCellsOutputs()
        x = Tensor(np.arange(4, dtype=np.float32).reshape(2, 2))
        debugger = PrecisionDebugger(task="statistics", level=level, dump_path=str(tmp_path / level), model=net)
        if dumping:
            debugger.start()
        loss, grads = ms.value_and_grad(net, None, net.trainable_params())(x)
        if dumping:
            debugger.stop()
            debugger.step()
        return float(loss.asnumpy()), [g.asnumpy() for g in grads]

    plain_loss, plain_grads = run(False)
    loss, grads = run(True)
    assert loss == plain_loss
    for got, expected in zip(grads, plain_grads):
        np.testing.assert_array_equal(got, expected)
    dump = read_dump(tmp_path / level / "step0" / "rank")
    assert {"Cell.fc.Dense.backward.0", "Cell.scale.Scale.backward.0"} <= set(dump.data)


class Lookup(nn.Cell):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 2)
        self.fc = nn.Dense(2, 1)

    def construct(self, ids):
        return self.fc(self.embed(ids)).sum()


def test_cells_with_integer_inputs_and_users_own_backward_hooks(tmp_path):
    net = Lookup()
    seen = []
    net.fc.register_backward_hook(lambda cell, grad_in, grad_out: seen.append(len(grad_out)))
    grad_fn = ms.value_and_grad(net, None, net.trainable_params())
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path / "d"), model=net)
    for _ in range(2):
        debugger.start()
        grad_fn(Tensor(np.array([[1, 2, 4]], np.int32)))
        debugger.stop()
        debugger.step()
    assert seen == [1, 1]  # the user's hook still runs
    for step in (0, 1):
        dump = read_dump(tmp_path / "d" / f"step{step}" / "rank")
        assert not [name for name in dump.data if "CellBackwardHook" in name]  # MindSpore's hook machinery
        entry = dump.data["Cell.embed.Embedding.backward.0"]
        assert entry["input"][0]["shape"] == [1, 3, 2] and entry["output"] == [None]  # no gradient for the ids


def test_api_backward_lists_a_gradient_per_tensor_argument_including_parameters(tmp_path):
    """As MindSpore's cell hooks list them: one per positional tensor, None where none flows, none for other values."""
    weight = ms.Parameter(Tensor(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)), name="weight")
    index = Tensor(np.array([[1, 0], [0, 0]], np.int64))

    def loss(x):
        return mint.gather(mint.matmul(x, weight), 1, index).sum()

    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    _, weight_grad = ms.value_and_grad(loss, None, [weight])(Tensor(np.ones((2, 2), np.float32)))
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    matmul = dump.data["Mint.matmul.0.backward"]["output"]
    assert len(matmul) == 2
    saved = np.load(dump.tensor_dir() / matmul[1]["data_name"])
    np.testing.assert_array_equal(saved, weight_grad[0].asnumpy())  # the Parameter's gradient from this call
    gather = dump.data["Mint.gather.0.backward"]["output"]
    assert len(gather) == 2 and gather[0]["shape"] == [2, 2] and gather[1] is None  # x, then the integer index


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4)
        self.act = nn.Tanh()

    def construct(self, x):
        return self.act(self.fc(x)) + self.act(x)


class BlockTwice(nn.Cell):
    """One block called twice, a cell called twice inside it: four Tanh calls."""

    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Dense(4, 1)

    def construct(self, x):
        return self.head(self.block(self.block(x * 2.0))).sum()


def test_cell_backward_numbers_follow_backward_order_as_the_reference_numbers_them(tmp_path):
    """backward.0 is the call whose backward ran first (the reference's backward pre-hook takes the next number)."""
    ms.set_seed(0)
    net, x = BlockTwice(), Tensor(np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32))
    fired = []
    handle = net.block.register_backward_hook(lambda cell, grad_in, grad_out: fired.append(grad_in[0].asnumpy()))
    ms.grad(net)(x)
    handle.remove()
    assert len(fired) == 2
    debugger = PrecisionDebugger(task="tensor", level="mix", dump_path=str(tmp_path / "d"), model=net)
    debugger.start()
    ms.grad(net)(x)
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    for number, expected in enumerate(fired):
        [leaving] = dump.data[f"Cell.block.Block.backward.{number}"]["output"]
        np.testing.assert_array_equal(np.load(dump.tensor_dir() / leaving["data_name"]), expected)
    backward = [name for name in dump.data if name.startswith("Cell.block.Block.backward")]
    assert backward == ["Cell.block.Block.backward.0", "Cell.block.Block.backward.1"]
    parents = dump.construct
    assert parents["Cell.block.act.Tanh.backward.0"] == "Cell.block.Block.backward.0"
    assert parents["Cell.block.act.Tanh.backward.3"] == "Cell.block.Block.backward.1"
    assert parents["Cell.block.fc.Dense.backward.0"] == "Cell.block.Block.backward.0"
    assert parents["Cell.block.Block.backward.0"] is None
    # the last Tanh call's primitive ran in the Tanh call whose backward ran first
    assert parents["Primitive.tanh.Tanh.3.backward"] == "Cell.block.act.Tanh.backward.0"
    assert parents["Primitive.matmul.MatMul.0.backward"] == "Cell.block.fc.Dense.backward.1"


def test_list_filter_selects_a_cell_backward_entry_by_its_backward_number(tmp_path):
    def dump(name, **extra):
        ms.set_seed(0)
        net, x = BlockTwice(), Tensor(np.ones((2, 4), np.float32))
        config = {"task": "statistics", "level": "L0", "dump_path": str(tmp_path / name), "statistics": extra}
        (tmp_path / f"{name}.json").write_text(json.dumps(config))
        debugger = PrecisionDebugger(config_path=str(tmp_path / f"{name}.json"), model=net)
        debugger.start()
        ms.grad(net)(x)
        debugger.stop()
        debugger.step()
        return read_dump(tmp_path / name / "step0" / "rank")

    name = "Cell.block.Block.backward.0"
    listed = dump("listed", list=[name])
    everything = dump("all")
    assert [entry for entry in listed.data if ".backward." in entry] == [name]
    assert listed.data[name] == everything.data[name]  # the same call, though filtered before its number was known
    assert everything.data[name] != everything.data["Cell.block.Block.backward.1"]


def test_tensors_read_late_show_their_values_before_a_later_write(tmp_path):
    """On CPU tensors are read in batches (no wait for PyNative's queue per call): a write the dump sees reads first."""
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"))
    x = Tensor(np.array([[-3.0, 1.0], [2.0, -0.5]], np.float32))
    debugger.start()
    y = mint.abs(x)
    ops.assign(y, y * 10)  # an API that writes: dumped, its input read as it was
    z = mint.neg(x)
    z[0] = 100.0  # a write the dump only watches
    w = mint.exp(x)
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    expected = np.abs(x.asnumpy())
    [abs_output] = dump.data["Mint.abs.0.forward"]["output"]
    assert (abs_output["Max"], abs_output["Min"]) == (3.0, 0.5)
    assert math.isclose(abs_output["Norm"], float(np.linalg.norm(expected)), rel_tol=1e-6)
    assign = dump.data["Functional.assign.0.forward"]
    assert assign["input_args"][0]["Max"] == 3.0 and assign["output"][0]["Max"] == 30.0
    assert dump.data["Mint.neg.0.forward"]["output"][0]["Max"] == 3.0  # before z[0] = 100
    assert math.isclose(dump.data["Mint.exp.0.forward"]["output"][0]["Max"], float(np.exp(2.0)), rel_tol=1e-6)
    assert float(w.asnumpy().max()) == pytest.approx(np.exp(2.0))


def test_tensors_read_late_reach_the_journal_when_read(tmp_path, monkeypatch):
    """What a killed process leaves: entries whose tensors were read; the limit on waiting tensors bounds the rest."""
    from msprobe.mindspore.dump import tensors

    monkeypatch.setattr(tensors, "_SETTLE_COUNT", 4)
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"))
    x = Tensor(np.array([1.0, -2.0], np.float32))
    debugger.start()
    for _ in range(3):
        x = mint.abs(mint.neg(x))  # two tensors read per call: inputs are outputs already waiting
    journal = tmp_path / "d" / "step0" / "rank" / ".dump.json.journal"
    dump = read_dump(journal.parent)  # no dump.json yet: replayed from the journal, as after a kill
    [neg_output] = dump.data["Mint.neg.0.forward"]["output"]
    assert (neg_output["Max"], neg_output["Min"]) == (2.0, -1.0)
    assert all(value is not None for entry in dump.data.values() for value in leaves(entry))
    debugger.stop()
    debugger.step()
    assert len(read_dump(tmp_path / "d" / "step0" / "rank").data) == 6


def test_parameters_are_read_at_once_as_optimizers_write_them_unseen(tmp_path):
    weight = ms.Parameter(Tensor(np.array([1.0, 2.0], np.float32)), name="w")
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    mint.abs(weight)
    weight.set_data(Tensor(np.array([5.0, 6.0], np.float32)), slice_shape=True)
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    assert dump.data["Mint.abs.0.forward"]["input_args"][0]["Max"] == 2.0


def test_npy_files_hold_the_values_of_the_call_though_written_right_after(tmp_path):
    x = Tensor(np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32))
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    y = mint.abs(x)
    ops.assign(y, Tensor(np.zeros((2, 2), np.float32)))
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    [abs_output] = dump.data["Mint.abs.0.forward"]["output"]
    np.testing.assert_array_equal(np.load(dump.tensor_dir() / abs_output["data_name"]), np.abs(x.asnumpy()))
    assert not y.asnumpy().any()


EXITS_WITHOUT_STOP = """
import sys
import numpy as np
import mindspore as ms
from mindspore import Tensor, mint
from msprobe.mindspore import PrecisionDebugger

ms.set_context(mode=ms.PYNATIVE_MODE)
debugger = PrecisionDebugger(task=sys.argv[2], level="L1", dump_path=sys.argv[1])
debugger.start()
y = mint.abs(Tensor(np.array([-3.0, 1.0], np.float32)))
raise SystemExit(3)  # the script ends mid-step: no stop(), no step()
"""


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_tensors_waiting_to_be_read_are_read_when_the_process_exits_mid_step(tmp_path, task):
    import subprocess
    import sys

    (tmp_path / "run.py").write_text(EXITS_WITHOUT_STOP)
    result = subprocess.run(
        [sys.executable, str(tmp_path / "run.py"), str(tmp_path / "d"), task],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    assert not dump.recovered  # dump.json written at exit, with the values
    [output] = dump.data["Mint.abs.0.forward"]["output"]
    assert (output["Max"], output["Min"]) == (3.0, 1.0)
    if task == "tensor":
        np.testing.assert_array_equal(np.load(dump.tensor_dir() / output["data_name"]), [3.0, 1.0])


def test_a_tensor_file_that_cannot_be_written_is_reported_and_the_others_are_written(tmp_path, caplog):
    """The files of a batch are written on several threads: one failing stops none of the others."""
    x = Tensor(np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32))
    blocked = tmp_path / "d" / "step0" / "rank" / "dump_tensor_data" / "Mint.abs.0.forward.output.0.npy"
    blocked.mkdir(parents=True)
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    y = mint.neg(mint.abs(x))
    z = mint.exp(y)
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    assert "Mint.abs.0.forward.output.0.npy" in caplog.text
    for name, expected in (("Mint.neg.0.forward", -np.abs(x.asnumpy())), ("Mint.exp.0.forward", z.asnumpy())):
        [output] = dump.data[name]["output"]
        np.testing.assert_allclose(np.load(dump.tensor_dir() / output["data_name"]), expected, rtol=1e-6)
    [abs_input] = dump.data["Mint.abs.0.forward"]["input_args"]
    np.testing.assert_array_equal(np.load(dump.tensor_dir() / abs_input["data_name"]), x.asnumpy())


def test_26x_fields_extra_info_and_proc_folder(tmp_path):
    """extra_info false: dump.json alone, with the entries of a full dump; folder_without_rank 'proc': proc{pid}."""
    import os

    train(tmp_path / "full", "mix", "statistics", steps=1)
    train(tmp_path / "bare", "mix", "statistics", steps=1, extra_info=False, folder_without_rank="proc")
    bare = tmp_path / "bare" / "step0" / f"proc{os.getpid()}"
    assert sorted(p.name for p in bare.iterdir() if not p.name.startswith(".")) == ["dump.json"]
    full = tmp_path / "full" / "step0" / "rank"
    assert (full / "stack.json").exists() and (full / "construct.json").exists()
    assert read_dump(bare / "dump.json").data == read_dump(full / "dump.json").data


def test_flight_recorder_writes_the_window_at_the_first_nan(tmp_path):
    """log(|dense(x)| * 0) at step 4 makes -inf from finite inputs: steps 2 to 4 are written, and only then."""
    net = nn.Dense(4, 4)
    config = {"task": "flight_recorder", "level": "L1", "dump_path": str(tmp_path / "dump"),
              "flight_recorder": {"window": 3}}  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "c.json"), model=net)
    for step in range(6):
        debugger.start()
        scale = 0.0 if step == 4 else 1.0 / (step + 1)
        ops.log(ops.abs(net(Tensor(np.ones((2, 4), np.float32)))) * scale).sum()
        debugger.stop()
        debugger.step()
        if step < 4:
            assert not (tmp_path / "dump").exists() or not any((tmp_path / "dump").iterdir())
    assert sorted(p.name for p in (tmp_path / "dump").iterdir() if p.is_dir()) == ["step2", "step3", "step4"]
    report = json.loads((tmp_path / "dump" / "flight_recorder_report.json").read_text())
    assert report["first_nonfinite"]["api"] == "Functional.log.0.forward" and report["last_finite_step"] == 3
    assert (tmp_path / "dump" / "step4" / "rank" / "dump_tensor_data").is_dir()


def test_operators_that_only_look_in_place_keep_their_backward(tmp_path):
    """``x * w + b`` (``__mul__``, ``__add__``) is no in-place write: its gradient, w for x, is dumped."""
    weight = ms.Parameter(Tensor(np.array([2.0, 3.0], np.float32)), name="weight")

    def loss(x):
        return (x * weight + 1.0).sum()

    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    ms.value_and_grad(loss, 0)(Tensor(np.array([1.0, 1.0], np.float32)))
    debugger.stop()
    debugger.step()
    dump = read_dump(tmp_path / "d" / "step0" / "rank")
    backward = [name for name in dump.data if name.endswith(".backward")]
    assert any("__mul__" in name for name in backward) and any("__add__" in name for name in backward), backward
    mul = next(name for name in backward if "__mul__" in name)
    first = dump.data[mul]["output"][0]
    np.testing.assert_array_equal(np.load(dump.tensor_dir() / first["data_name"]), [2.0, 3.0])  # d(x*w)/dx = w


def test_request_id_keeps_one_requests_rows_of_a_flat_batch(tmp_path):
    """The serving cut of msprobe.core.recording.tensor_cuts, applied by the MindSpore summarizer: request "c" of
    a forward of three, on the flat token dimension (3 + 2 + 4 tokens) and on the per-request dimension."""
    config = {"task": "statistics", "level": "L1", "dump_path": str(tmp_path / "dump"),
              "statistics": {"request_id": "c", "slice": [{}, {"end": 2}]}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "config.json"))
    tokens = np.arange(9 * 4, dtype=np.float32).reshape(9, 4) / 7
    last = np.arange(3 * 4, dtype=np.float32).reshape(3, 4)
    debugger.start(request_ids=["a", "b", "c"], scheduled_tokens=[3, 2, 4])
    mint.nn.functional.relu(Tensor(tokens))
    mint.nn.functional.relu(Tensor(last))
    debugger.stop()
    debugger.step()
    debugger.start(request_ids=["a"], scheduled_tokens=[1])  # "c" is not in this forward: no step of it
    mint.nn.functional.relu(Tensor(tokens[:1]))
    debugger.stop()
    debugger.step()
    assert sorted(path.name for path in (tmp_path / "dump").iterdir()) == ["step0"]
    data = json.loads((tmp_path / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    for index, expected in ((0, tokens[5:9, :2]), (1, last[2:3, :2])):
        entry = next(v for k, v in data.items() if k.endswith(f"relu.{index}.forward"))["input_args"][0]
        assert entry["shape"] == list(expected.shape)
        assert entry["Max"] == pytest.approx(float(expected.max()), rel=1e-6)
        assert entry["Mean"] == pytest.approx(float(expected.astype(np.float64).mean()), rel=1e-6)


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"statistics": {"summary_mode": "xor"}}, "statistics.summary_mode: 'xor' is not written by the mindspore"),
        ({"task": "tensor", "tensor": {"summary_mode": "md5", "bench_path": "."}}, "tensor.bench_path:"),
    ],
)
def test_what_only_pytorch_writes_is_refused_when_the_debugger_is_made(tmp_path, fields, field):
    """Before any training: the debugger refuses it as it is made, and config validate says it first."""
    from click.testing import CliRunner

    from msprobe.cli.main import cli
    from msprobe.core.errors import ConfigError

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), **fields}))
    with pytest.raises(ConfigError, match=f"config.json: {field}"):
        PrecisionDebugger(config_path=str(config))
    result = CliRunner().invoke(cli, ["config", "validate", str(config)])
    assert result.exit_code == 2 and field in result.output, result.output

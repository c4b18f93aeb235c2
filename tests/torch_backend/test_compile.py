"""Models run through torch.compile are dumped as their eager run is, and compile again after the dump."""

import csv
import json
import logging
import re
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from dump_values import leaves
from torch import nn

from msprobe.core.dump.reader import read_dump
from msprobe.pytorch import PrecisionDebugger


class Net(nn.Module):
    def __init__(self, tensor_methods=True):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 2)
        self.tensor_methods = tensor_methods

    def forward(self, x):
        h = self.norm(torch.relu(self.fc1(x)))
        if self.tensor_methods:
            h.mul_(2.0)
        return self.fc2(h)


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given and runs them as they are."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


def train(tmp_path, name, level, backend, tensor_methods=True, steps=2):
    torch.manual_seed(0)
    model = Net(tensor_methods)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"task": "statistics", "level": level, "dump_path": str(tmp_path / name)}))
    debugger = PrecisionDebugger(config_path=str(config), model=model)
    run = torch.compile(model, backend=backend) if backend else model
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        debugger.start()
        loss = F.mse_loss(run(x), torch.zeros(4, 2))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        debugger.stop()
        debugger.step()
        losses.append(loss.item())
    dumps = [read_dump(tmp_path / name / f"step{step}" / "rank" / "dump.json") for step in range(steps)]
    return run, x, losses, dumps


def statistics(dump):
    return {
        name: [leaf[key] for leaf in leaves(entry) if "Max" in leaf for key in ("Max", "Min", "Mean", "Norm")]
        for name, entry in dump.data.items()
    }


def assert_same_dumps(compiled_dumps, eager_dumps):
    for compiled, eager in zip(compiled_dumps, eager_dumps, strict=True):
        assert list(compiled.data) == list(eager.data)  # nothing compiled away unseen, nothing made up by tracing
        expected = statistics(eager)
        for name, values in statistics(compiled).items():
            assert values == pytest.approx(expected[name], rel=1e-6), name


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_a_compiled_model_is_dumped_as_its_eager_run_and_compiles_again_after(tmp_path, caplog, level):
    _, _, eager_losses, eager_dumps = train(tmp_path, "eager", level, None)
    backend = CountingBackend()
    with caplog.at_level(logging.WARNING):
        run, x, losses, dumps = train(tmp_path, "compiled", level, backend)
    assert losses == pytest.approx(eager_losses, rel=1e-6)
    assert_same_dumps(dumps, eager_dumps)
    assert backend.graphs == 0  # eager while dumping: the tool's code was never traced
    assert not [record for record in caplog.records if record.name.startswith("msprobe")]
    run(x)  # the dump is off: torch.compile works again
    assert backend.graphs >= 1


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_without_compiler_stances_the_tool_s_code_runs_outside_the_trace(tmp_path, caplog, monkeypatch, level):
    """torch before 2.6: dynamo breaks its graph at each wrapped function and hooked module instead."""
    _, _, eager_losses, eager_dumps = train(tmp_path, "eager", level, None, tensor_methods=False)
    monkeypatch.delattr(torch.compiler, "set_stance")
    backend = CountingBackend()
    with caplog.at_level(logging.WARNING):
        _, _, losses, dumps = train(tmp_path, "compiled", level, backend, tensor_methods=False)
    assert losses == pytest.approx(eager_losses, rel=1e-6)
    assert_same_dumps(dumps, eager_dumps)
    if level == "L0":
        assert backend.graphs >= 1  # the modules' bodies compiled between the hooks (at L1 every API breaks)
    # the tool's code never ran on dynamo's placeholder tensors, and its counters caused no recompilation
    assert not [record for record in caplog.records if record.name.startswith("msprobe")]
    assert not [record for record in caplog.records if "recompile" in record.getMessage()]


def test_the_free_benchmark_checks_the_apis_of_compiled_code(tmp_path, monkeypatch):
    def fragile(x, r1, r2):
        """Cancels in its input dtype: (x + 4096) - 4096 loses x in float16, keeps it in float32."""
        big = torch.full_like(x, 4096.0)
        return (x + big) - big + r1 * 0 + r2 * 0

    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(npu_rotary_mul=fragile))
    config = {"task": "free_benchmark", "level": "L1", "dump_path": str(tmp_path), "free_benchmark": {}}
    (tmp_path / "fb.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "fb.json"))
    backend = CountingBackend()

    @torch.compile(backend=backend)
    def layer(x):
        return torch.relu(sys.modules["torch_npu"].npu_rotary_mul(x, x, x))

    x = torch.tensor([0.3, 1.7, -2.2], dtype=torch.float16)
    debugger.start()
    layer(x)
    debugger.stop()
    debugger.step()
    rows = list(csv.DictReader((tmp_path / "free_benchmark.csv").open()))
    assert [row["api_name"] for row in rows] == ["NPU.npu_rotary_mul.0.forward"]
    assert backend.graphs == 0


NEVER_OR_LATE_COMPILED = """
import json, sys, tempfile
import torch
from msprobe.pytorch import PrecisionDebugger

graphs = []


def backend(graph_module, example_inputs):
    graphs.append(1)
    return graph_module.forward


model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
debugger = PrecisionDebugger(dump_path=tempfile.mkdtemp(), task="statistics", level=sys.argv[1], model=model)
original_compile = torch.compile
debugger.start()
model(torch.randn(2, 4)).sum().backward()
debugger.stop()
debugger.step()
result = {"dynamo_loaded_by_the_tool": "torch._dynamo" in sys.modules}
run = model
for step in range(2):
    debugger.start()
    if step == 0:  # compiled while the dump is on; "alias": through torch.compile taken before the dump started
        compile_function = original_compile if sys.argv[2] == "alias" else torch.compile
        run = compile_function(model, backend=backend)
    run(torch.randn(2, 4)).sum().backward()
    debugger.stop()
    debugger.step()
result["graphs_while_dumping"] = len(graphs)
result["compile_restored"] = torch.compile is original_compile
run(torch.randn(2, 4))
result["graphs_after"] = len(graphs)
print(json.dumps(result))
"""


@pytest.mark.parametrize("level, name", [("L1", "torch.compile"), ("mix", "torch.compile"), ("L1", "alias")])
def test_dynamo_is_left_unloaded_until_the_user_compiles_and_a_model_compiled_mid_dump_runs_eagerly(
    tmp_path, level, name
):
    import subprocess

    (tmp_path / "run.py").write_text(NEVER_OR_LATE_COMPILED)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "run.py"), level, name], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not _tool_warnings(done.stderr)  # dynamo tracing the tool would cause them
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {
        "dynamo_loaded_by_the_tool": False,  # loading it costs over a second
        "graphs_while_dumping": 0,
        "compile_restored": True,
        "graphs_after": 1,
    }


IMPORTED_MID_DUMP = """
import json, sys, tempfile
import torch
from msprobe.pytorch import PrecisionDebugger

graphs = []


def backend(graph_module, example_inputs):
    graphs.append(1)
    return graph_module.forward


model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
debugger = PrecisionDebugger(dump_path=tempfile.mkdtemp(), task="statistics", level="L1")
debugger.start()
model(torch.randn(2, 4))
import torch._dynamo  # a library loading the compiler in the middle of a step, as transformers does
debugger.stop()
debugger.step()
torch.compile(model, backend=backend)(torch.randn(2, 4))
print(json.dumps({"graphs": len(graphs), "loader": type(torch._dynamo.__loader__).__name__}))
"""


def test_the_compiler_loaded_mid_dump_knows_torch_s_own_functions_afterwards(tmp_path):
    import subprocess

    (tmp_path / "run.py").write_text(IMPORTED_MID_DUMP)
    done = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["graphs"] == 1  # one graph: not broken at every torch call
    assert "msprobe" not in result["loader"].lower() and "Originals" not in result["loader"]


NO_STANCES_COMPILED_AFTER_THE_DEBUGGER = """
import json, sys, tempfile
import torch
del torch.compiler.set_stance  # torch before 2.6
from msprobe.pytorch import PrecisionDebugger

model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
debugger = PrecisionDebugger(dump_path=tempfile.mkdtemp(), task="statistics", level="L1")
run = model
for step in range(3):
    debugger.start()
    if step == 1:
        run = torch.compile(model, backend="eager")  # compiled after the dump's first step
    run(torch.randn(2, 4)).sum().backward()
    debugger.stop()
    debugger.step()
print("done")
"""


def test_without_stances_the_escape_is_ready_for_a_model_compiled_after_the_first_step(tmp_path):
    import subprocess

    (tmp_path / "run.py").write_text(NO_STANCES_COMPILED_AFTER_THE_DEBUGGER)
    done = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not _tool_warnings(done.stderr) and "recompile" not in done.stderr.lower(), done.stderr[-3000:]


def _tool_warnings(stderr: str) -> list[str]:
    """Lines naming msprobe but its own information (where the dump went, what a step cost): its warnings and
    errors, and anything else (dynamo's warnings name the files they trace)."""
    information = re.compile(r"msprobe: (?!warning: |error: )")
    return [line for line in stderr.splitlines() if "msprobe" in line and not information.match(line)]

"""Where two runs part ways: two runs that differ in one layer are localised to it, on every surface.

The runs share a seed; the debug run's ``blocks.1.ffn.up`` weight is scaled
by 1.5. By construction (three blocks of layer_norm, up, gelu, down and a
residual add), that layer's Linear is the third ``F.linear`` call, so the
first divergent API is ``Functional.linear.2.forward``, inside
``Module.blocks.1.ffn.up.Linear.forward.0``; everything before it agrees.
"""

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from msprobe.cli.main import cli
from msprobe.core.diagnosis import diagnose_pair
from msprobe.core.graph.run import run_graph
from msprobe.pytorch import PrecisionDebugger

MODULE = "Module.blocks.1.ffn.up.Linear.forward.0"
API = "Functional.linear.2.forward"


class FFN(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.ffn = nn.LayerNorm(8), FFN()

    def forward(self, x):
        return x + self.ffn(self.ln(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _dump(folder, level, changed, summary_mode="statistics"):
    torch.manual_seed(0)
    model = Net()
    if changed:
        with torch.no_grad():
            model.blocks[1].ffn.up.weight.mul_(1.5)
    config = folder.with_suffix(".json")
    config.write_text(json.dumps({"task": "statistics", "level": level, "dump_path": str(folder),
                                  "statistics": {"summary_mode": summary_mode}}))  # fmt: skip
    debugger = PrecisionDebugger(config_path=str(config), model=model)
    debugger.start()
    model(torch.randn(4, 8, generator=torch.Generator().manual_seed(1))).square().mean().backward()
    debugger.stop()
    debugger.step()
    return folder / "step0" / "rank"


@pytest.mark.parametrize("summary_mode", ["statistics", "md5"])
def test_one_changed_layer_is_localised_to_its_module_and_api(tmp_path, summary_mode):
    debug = _dump(tmp_path / "debug", "mix", True, summary_mode)
    bench = _dump(tmp_path / "bench", "mix", False, summary_mode)
    found = diagnose_pair(debug, bench)
    assert (found.verdict, found.module, found.api, found.cause) == ("divergence", "blocks.1.ffn.up", API, "weights")
    assert found.line().startswith(f"the runs part ways at {API} (step 0, forward, module blocks.1.ffn.up)")


def test_the_command_prints_the_answer_and_writes_it(tmp_path):
    debug = _dump(tmp_path / "debug", "mix", True)
    bench = _dump(tmp_path / "bench", "mix", False)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(debug / "dump.json"), "bench_path": str(bench / "dump.json")}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence"])
    answer = diagnose_pair(debug, bench).line()
    assert result.output.count(answer) == 2  # the compare's line, and the --first-divergence line
    (written,) = (tmp_path / "out").glob("first_divergence_*.json")
    assert json.loads(written.read_text())["module"] == "blocks.1.ffn.up"
    assert json.loads(written.read_text())["answer"] == answer


def test_identical_runs_have_no_divergence(tmp_path):
    found = diagnose_pair(_dump(tmp_path / "a", "mix", False), _dump(tmp_path / "b", "mix", False))
    assert (found.verdict, found.module, found.api) == ("none", None, None)
    assert found.line().startswith("the runs do not part ways")


def test_at_l1_the_first_divergent_api_is_named(tmp_path):
    found = diagnose_pair(_dump(tmp_path / "debug", "L1", True), _dump(tmp_path / "bench", "L1", False))
    assert found.api == API and found.module is None and found.cause == "weights"


def test_the_graph_page_marks_the_located_layer(tmp_path):
    debug = _dump(tmp_path / "debug", "mix", True)
    bench = _dump(tmp_path / "bench", "mix", False)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(debug), "bench_path": str(bench)}))
    (summary,) = run_graph(spec, tmp_path / "graph")
    assert summary.first_suspect == API
    page = next((tmp_path / "graph").glob("*.html")).read_text()
    assert f'"n": "{MODULE}"' in page and '"d": "module"' in page and '"d": "api"' in page
    assert diagnose_pair(debug, bench).line().replace('"', '\\"') in page


@pytest.mark.parametrize("given", ["dump.json", "rank folder", "step folder", "dump_path"])
def test_every_path_the_docs_allow_gives_the_same_answer_and_verdict(tmp_path, given):
    """docs/first_divergence.md: npu_path and bench_path may be dump.json files, step or rank folders, or a
    whole dump_path; each gives the one answer, the verdict that goes with it, and exit code 1."""
    debug = _dump(tmp_path / "debug", "mix", True)
    bench = _dump(tmp_path / "bench", "mix", False)
    answer = diagnose_pair(debug, bench).line()
    pick = {"dump.json": lambda rank: rank / "dump.json", "rank folder": lambda rank: rank,
            "step folder": lambda rank: rank.parent, "dump_path": lambda rank: rank.parent.parent}[given]  # fmt: skip
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(pick(debug)), "bench_path": str(pick(bench))}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence"])
    assert result.exit_code == 1, result.output
    first = result.output.splitlines()[0]
    assert "SUSPICIOUS" in first and answer in first
    (written,) = (tmp_path / "out").glob("first_divergence_*.json")
    assert json.loads(written.read_text())["answer"] == answer


class _ScaledGradient(torch.autograd.Function):
    """Identity forward; the backward scales the gradient by ``factor`` (a custom op's derivative)."""

    @staticmethod
    def forward(ctx, value, factor):
        ctx.factor = factor
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


class _FFNWithCustomBackward(FFN):
    factor = 1.0

    def forward(self, x):
        return self.down(_ScaledGradient.apply(torch.nn.functional.gelu(self.up(x)), self.factor))


@pytest.mark.parametrize("changed", ["argument", "extra call"])
def test_a_backward_change_in_a_modules_own_code_is_placed_in_that_module(tmp_path, changed):
    """The custom backward runs between ``blocks.1.ffn.down``'s backward and ``blocks.1.ffn.up``'s: inside the
    backward of ``blocks.1.ffn``, whose own code applies it. Changed by its factor (a differing argument of the
    multiplication it makes), or added in one run only (an extra call)."""

    def dump(folder, factor):
        torch.manual_seed(0)
        model = Net()
        ffn = model.blocks[1].ffn
        if factor is not None:
            ffn.__class__ = _FFNWithCustomBackward
            ffn.factor = factor
        debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(folder), model=model)
        debugger.start()
        model(torch.randn(4, 8, generator=torch.Generator().manual_seed(1))).square().mean().backward()
        debugger.stop()
        debugger.step()
        return folder / "step0" / "rank"

    golden = dump(tmp_path / "golden", 1.0 if changed == "argument" else None)
    found = diagnose_pair(dump(tmp_path / "debug", 1.5), golden)
    assert (found.verdict, found.phase, found.module) == ("divergence", "backward", "blocks.1.ffn")
    assert found.api.startswith("Tensor.__mul__.")

"""``msprobe compare --first-divergence``: two runs that differ in one layer are localised to it.

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
from msprobe.core.graph.api import run_graph
from msprobe.core.graph.divergence import first_divergence
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
    found = first_divergence(debug, bench)
    assert (found.module, found.api, found.first_entry) == (MODULE, API, API)
    assert found.line() == f"first divergence: {MODULE} (its inputs agree, its outputs differ), first API {API}"


def test_the_command_prints_one_line_and_writes_the_answer(tmp_path):
    debug = _dump(tmp_path / "debug", "mix", True)
    bench = _dump(tmp_path / "bench", "mix", False)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(debug / "dump.json"), "bench_path": str(bench / "dump.json")}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence"])
    assert f"first divergence: {MODULE} (its inputs agree, its outputs differ), first API {API}" in result.output
    (written,) = (tmp_path / "out").glob("first_divergence_*.json")
    assert json.loads(written.read_text())["module"] == MODULE


def test_identical_runs_have_no_divergence(tmp_path):
    found = first_divergence(_dump(tmp_path / "a", "mix", False), _dump(tmp_path / "b", "mix", False))
    assert (found.first_entry, found.module, found.api) == (None, None, None)
    assert found.line().startswith("first divergence: none")


def test_at_l1_the_first_divergent_api_is_named(tmp_path):
    found = first_divergence(_dump(tmp_path / "debug", "L1", True), _dump(tmp_path / "bench", "L1", False))
    assert found.first_entry == API and found.module is None


def test_the_graph_page_marks_the_located_layer(tmp_path):
    debug = _dump(tmp_path / "debug", "mix", True)
    bench = _dump(tmp_path / "bench", "mix", False)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(debug), "bench_path": str(bench)}))
    (summary,) = run_graph(spec, tmp_path / "graph")
    assert summary.first_suspect == API
    page = next((tmp_path / "graph").glob("*.html")).read_text()
    assert f'"n": "{MODULE}"' in page and '"d": "module"' in page and '"d": "api"' in page
    assert f"first divergence: {MODULE}" in page

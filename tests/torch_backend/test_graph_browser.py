"""Graph pages of a small transformer, opened in Debian's Chromium through Playwright.

Two runs of the same model with the same seed differ in one place: the
debug run's ``blocks.1.ffn.up`` weight is scaled by 1.5. The comparison page
must lead from the root straight to that layer's linear API.
Screenshots land in ``test-artifacts/`` (or ``$MSPROBE_TEST_ARTIFACTS``); ``nox -s screenshots``
writes them to docs/img, where the docs show them.
"""

import json
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from repo_paths import REPO_ROOT
from torch import nn

from browser import launch, open_page
from msprobe.core.dump.reader import read_dump
from msprobe.core.graph.model import API, build_graph
from msprobe.core.graph.run import run_graph
from msprobe.pytorch import PrecisionDebugger, seed_all

ARTIFACTS = Path(os.environ.get("MSPROBE_TEST_ARTIFACTS", REPO_ROOT / "test-artifacts"))
INJECTED_MODULE = "Module.blocks.1.ffn.up.Linear.forward.0"


class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        weights = torch.softmax(q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5), dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(batch, length, width))


class FeedForward(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(width), Attention(width, heads)
        self.ln2, self.ffn = nn.LayerNorm(width), FeedForward(width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 4, depth: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def dump_run(folder: Path, inject: bool) -> Path:
    seed_all(7)
    model = TinyLM()
    if inject:
        with torch.no_grad():
            model.blocks[1].ffn.up.weight.mul_(1.5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.randint(0, 64, (2, 8))
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(folder), model=model, step=[0])
    debugger.start()
    logits = model(tokens)
    F.cross_entropy(logits.reshape(-1, 64), tokens.reshape(-1)).backward()
    optimizer.step()
    debugger.stop()
    debugger.step()
    return folder / "step0" / "rank"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph")
    npu, bench = dump_run(root / "npu", inject=True), dump_run(root / "bench", inject=False)
    spec = root / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    single = root / "single.json"
    single.write_text(json.dumps({"npu_path": str(npu)}))
    [compared] = run_graph(spec, root / "out")
    [built] = run_graph(single, root / "out")
    return {"npu": npu, "compared": compared, "built": built}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = launch(playwright)
        yield instance
        instance.close()


def screenshot(page, name: str) -> None:
    """docs/img publishes these very pictures (``nox -s screenshots`` takes them again)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))
    assert (ARTIFACTS / name).stat().st_size > 10_000
    assert (REPO_ROOT / "docs" / "img" / name).is_file(), f"docs/img lacks {name}: run nox -s screenshots"


def test_first_suspect_is_the_injected_layer(runs):
    graph = build_graph(read_dump(runs["npu"]))
    injected_api = next(c for c in graph[INJECTED_MODULE].subnodes if graph[c].node_type == API)
    assert runs["compared"].first_suspect == injected_api
    assert runs["compared"].matched == runs["compared"].nodes


def test_compare_page_in_chromium(runs, browser):
    page, errors = open_page(browser, runs["compared"].files[1])
    graph = build_graph(read_dump(runs["npu"]))
    injected_api = next(c for c in graph[INJECTED_MODULE].subnodes if graph[c].node_type == API)

    # the first level is drawn at once; deeper levels are not laid out yet
    first_level = page.locator("#spacer .row").evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert first_level == ["DefaultModel", *graph["DefaultModel"].subnodes]
    assert page.locator(f'.row[data-id="{injected_api}"]').count() == 0

    page.click("#first-suspect")
    selected = page.locator(".row.selected")
    assert selected.get_attribute("data-id") == injected_api
    assert selected.get_attribute("data-suspect") == "1"
    colour = selected.evaluate("row => getComputedStyle(row).backgroundColor")
    assert colour not in ("rgb(255, 255, 255)", "rgb(255, 252, 243)")  # not white, not the lightest band
    assert page.locator("#detail-name").inner_text() == injected_api
    for ancestor in ("Module.blocks.1.ffn.FeedForward.forward.0", INJECTED_MODULE):
        assert page.locator(f'.row[data-id="{ancestor}"]').count() == 1
    upstream = page.locator('.row[data-id="Module.blocks.0.Block.forward.0"]')
    assert upstream.get_attribute("data-suspect") == "0"
    screenshot(page, "graph_compare_first_suspect.png")

    page.fill("#search", "blocks.0.attn.qkv")
    page.press("#search", "Enter")
    assert "node(s)" in page.locator("#results .count").first.inner_text()
    hits = page.locator("#results .result").all_inner_texts()
    assert hits and all("blocks.0.attn.qkv" in hit for hit in hits)
    assert page.locator(".row.selected").get_attribute("data-id") == hits[0]
    screenshot(page, "graph_compare_search.png")

    page.click("#filter-unmatched")
    assert page.locator("#results .count").first.inner_text() == "Unmatched: 0 node(s)"
    page.click("#filter-suspect")
    suspects = page.locator("#results .result").all_inner_texts()
    assert injected_api in suspects and "Module.blocks.0.Block.forward.0" not in suspects

    page.click('.side[data-side="1"]')
    assert page.locator("#spacer .row").first.get_attribute("data-id") == "DefaultModel"
    assert errors == []
    page.close()


def test_single_run_page_in_chromium(runs, browser):
    page, errors = open_page(browser, runs["built"].files[1])
    block = page.locator('.row[data-id="Module.blocks.0.Block.forward.0"]')
    block.click()
    assert page.locator('.row[data-id="Module.blocks.0.attn.Attention.forward.0"]').count() == 1
    page.wait_for_selector("#detail-name")  # details are unpacked on selection
    assert page.locator("#detail-name").inner_text() == "Module.blocks.0.Block.forward.0"
    assert "Inputs" in page.locator("#details").inner_text()
    screenshot(page, "graph_single_run.png")
    assert errors == []
    page.close()

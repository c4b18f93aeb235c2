"""Graph view on a synthetic 20,000-node model: build/compare time and page responsiveness in headless Chromium.

    python bench/bench_graph.py [--layers 40] [--modules 5] [--apis 100] [--chromium /usr/bin/chromium]

Targets: the page of a 20,000-node hierarchy weighs at most 10 MB and opens
and shows its first level in at most 0.5 s. Also timed: expanding a layer,
expanding a module of 100 APIs, a name search, jumping to the first suspect
node, and selecting a node (its details unpacked from their chunk).
Needs msprobe-core, msprobe-cli and Playwright for Python (no torch).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

from msprobe.core.graph.run import run_graph

TARGET_OPEN_SECONDS = 0.5
TARGET_PAGE_MB = 10.0


def _stat(value: float) -> dict:
    return {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": [8, 64],
        "Max": value,
        "Min": -value,
        "Mean": value / 10,
        "Norm": value * 5,
        "requires_grad": False,
    }


def write_dump(folder: Path, layers: int, modules: int, apis: int, drift_layer: int | None) -> int:
    """A mix-level dump of ``layers`` blocks, each of ``modules`` modules calling ``apis`` APIs."""
    folder.mkdir(parents=True)
    data, construct, stack = {}, {}, {}
    count = 0
    for layer in range(layers):
        block = f"Module.layers.{layer}.Block.forward.0"
        construct[block] = None
        data[block] = {"input_args": [_stat(1.0)], "input_kwargs": {}, "output": [_stat(1.0)]}
        for module in range(modules):
            name = f"Module.layers.{layer}.m{module}.Linear.forward.0"
            construct[name] = block
            data[name] = {"input_args": [_stat(1.0)], "input_kwargs": {}, "output": [_stat(1.0)]}
            for _ in range(apis):
                api = f"Functional.linear.{count}.forward"
                count += 1
                construct[api] = name
                drift = 1.5 if drift_layer is not None and layer >= drift_layer else 1.0
                data[api] = {"input_args": [_stat(1.0)], "input_kwargs": {}, "output": [_stat(drift)]}
                stack[api] = [f"File model.py, line {count}, in forward, \n y = F.linear(x, w)"]
    (folder / "dump.json").write_text(
        json.dumps({"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data})
    )
    (folder / "construct.json").write_text(json.dumps(construct))
    (folder / "stack.json").write_text(json.dumps(stack))
    return len(construct) + 1


def _select_and_wait(page, node_id: str) -> None:
    page.click(f'.row[data-id="{node_id}"] .name')
    page.wait_for_function("name => (document.getElementById('detail-name') || {}).textContent === name", arg=node_id)


def time_page(chromium: str, page_file: Path, first_level: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    timings = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 850})
        start = time.perf_counter()
        page.goto(page_file.resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']")
        timings["open + first level"] = time.perf_counter() - start
        rows = page.locator("#spacer .row").count()
        assert rows >= min(first_level, 30), f"only {rows} rows drawn"
        for label, action in (
            ("expand a layer", lambda: page.click('.row[data-id="Module.layers.0.Block.forward.0"] .toggle')),
            ("expand 100 APIs", lambda: page.click('.row[data-id="Module.layers.0.m0.Linear.forward.0"] .toggle')),
            ("search", lambda: (page.fill("#search", "linear.19999"), page.press("#search", "Enter"))),
            ("first suspect", lambda: page.click("#first-suspect")),
            ("select, details unpacked", lambda: _select_and_wait(page, "Module.layers.20.Block.forward.0")),
        ):
            start = time.perf_counter()
            action()
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
            timings[label] = time.perf_counter() - start
        browser.close()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--modules", type=int, default=5)
    parser.add_argument("--apis", type=int, default=100)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--no-browser", action="store_true", help="the compare alone, not the page's timings")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        nodes = write_dump(root / "npu", args.layers, args.modules, args.apis, drift_layer=args.layers // 2)
        write_dump(root / "bench", args.layers, args.modules, args.apis, drift_layer=None)
        spec = root / "compare.json"
        spec.write_text(json.dumps({"npu_path": str(root / "npu"), "bench_path": str(root / "bench")}))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        start = time.perf_counter()
        [summary] = run_graph(spec, root / "out")
        build_seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        page_file = summary.files[1]
        print(f"nodes: {nodes} (+ API groups), compared in {build_seconds:.2f} s; {summary.line()}")
        page_mb = page_file.stat().st_size / 1e6
        print(f"page: {page_mb:.1f} MB, .vis: {summary.files[0].stat().st_size / 1e6:.1f} MB")
        print(f"peak resident memory: {peak} MiB ({before} MiB before the compare, the dumps' writing included)")
        if args.no_browser:
            return
        timings = time_page(args.chromium, page_file, args.layers + 2)
    for label, seconds in timings.items():
        print(f"{label:>20}: {seconds * 1000:8.0f} ms")
    ratio = timings["open + first level"] / TARGET_OPEN_SECONDS
    print(f"open + first level vs the 0.5 s target: {ratio:.2f}x of the budget ({'met' if ratio <= 1 else 'NOT met'})")
    size = page_mb / TARGET_PAGE_MB
    print(f"page size vs the 10 MB target: {size:.2f}x of the budget ({'met' if size <= 1 else 'NOT met'})")


if __name__ == "__main__":
    main()

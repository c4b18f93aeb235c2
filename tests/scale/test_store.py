"""msprobe db build / query / trend and data2db on a synthetic 256-rank x 20-step run.

Expected values come from the dump.json files themselves, read with json and
pandas (not through the store's row code), and from the closed-form values
the synthetic run is written with.
"""

from __future__ import annotations

import csv
import json
import math
import os

import pandas as pd
import pytest
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.errors import DataFileError, UsageError
from msprobe.core.store.build import MANIFEST, build_store
from msprobe.core.store.query import run_query
from msprobe.core.store.trend import write_trend
from synthetic_ranks import SPIKE, api_name, value, write_rank, write_run

RANKS, STEPS, CALLS = 256, 20, 12
BAD = (7, 130, 9)  # from step 7 on, rank 130's call 9 outputs inf
SPIKED = (12, 40, 2)  # at step 12 only, rank 40's call 2 output is 1000x


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    write_run(root / "dump", RANKS, STEPS, CALLS, bad=BAD, spike=SPIKED)
    summary = build_store(root / "dump", root / "store")
    return root, summary


def _dump_frame(root) -> pd.DataFrame:
    """Every tensor of every dump.json, flattened with json and pandas alone."""
    records = []
    for step in range(STEPS):
        for rank in range(RANKS):
            data = json.loads((root / "dump" / f"step{step}" / f"rank{rank}" / "dump.json").read_text())["data"]
            for name, entry in data.items():
                for io, values in (("input", entry["input_args"]), ("output", entry["output"])):
                    for position, tensor in enumerate(values):
                        records.append({"step": step, "rank": rank, "name": name, "io": io, "arg": str(position),
                                        "norm": float(tensor["Norm"]), "max": float(tensor["Max"])})  # fmt: skip
    return pd.DataFrame(records)


def test_every_tensor_of_every_step_and_rank_is_a_row(run):
    root, summary = run
    assert len(summary.added) == RANKS * STEPS and summary.rows == RANKS * STEPS * CALLS * 2
    assert sorted(p.name for p in (root / "store" / "stats").iterdir())[:2] == ["step=0", "step=1"]
    assert (root / "store" / "stats" / "step=19" / "rank=255" / "dump.parquet").is_file()
    counts = run_query(root / "store", "SELECT step, rank, count(*) AS n FROM stats GROUP BY step, rank")
    assert len(counts) == RANKS * STEPS and set(counts["n"]) == {CALLS * 2}


def test_sql_results_match_pandas_over_the_dump_files(run):
    root, _ = run
    expected = _dump_frame(root)
    finite = expected[expected["norm"].map(math.isfinite)]
    want = finite.groupby(["step", "io"])["norm"].agg(["sum", "max", "count"]).reset_index()
    got = run_query(
        root / "store",
        "SELECT step, io, sum(norm) AS sum, max(norm) AS max, count(*) AS count FROM stats "
        "WHERE isfinite(norm) GROUP BY step, io ORDER BY step, io",
    )
    pd.testing.assert_frame_equal(got.astype({"count": "int64"}), want.astype({"count": "int64"}), check_exact=False,
                                  rtol=1e-12, check_dtype=False)  # fmt: skip
    top = run_query(root / "store", "SELECT rank, max(max) AS m FROM stats WHERE step = 3 GROUP BY rank ORDER BY rank")
    assert top["m"].tolist() == expected[expected.step == 3].groupby("rank")["max"].max().tolist()


def test_columns_hold_what_the_dump_says(run):
    root, _ = run
    row = run_query(
        root / "store",
        "SELECT name, module, direction, io, arg, dtype, shape, norm, min, mean, md5, stack_id FROM stats "
        "WHERE step = 5 AND rank = 17 AND seq = 7",
    ).iloc[0]
    assert row["name"] == api_name(3) and row["io"] == "output" and row["arg"] == "0"
    assert row["module"] == "layers.0" and row["direction"] == "forward"  # from construct.json
    assert row["dtype"] == "torch.float32" and list(row["shape"]) == [8, 64]
    assert row["norm"] == value(5, 17, 3, 1) and row["min"] == -value(5, 17, 3, 1) / 2
    stacks = run_query(root / "store", f"SELECT stack FROM stacks WHERE stack_id = {int(row['stack_id'])}")
    assert stacks["stack"].tolist() == ["File model.py, line 13, in forward, \n y = F.layer_norm(x)"]
    inf = run_query(root / "store", "SELECT norm FROM stats WHERE step = 9 AND rank = 130 AND seq = 19")
    assert inf["norm"].tolist() == [math.inf]  # Infinity in dump.json is inf in the store


def test_a_second_build_adds_only_new_or_changed_sources(tmp_path):
    store = tmp_path / "store"
    small = tmp_path / "dump"
    write_run(small, 4, 3, 2)
    assert len(build_store(small, store).added) == 12
    again = build_store(small, store)
    assert again.added == [] and again.unchanged == 12
    for rank in range(4):
        write_rank(small, 3, rank, 2)  # a new step
    changed = write_rank(small, 1, 2, 2, drift=2.0)  # and one rewritten dump
    os.utime(changed / "dump.json", ns=(1, 1))  # a changed mtime, whatever the clock's resolution
    third = build_store(small, store)
    assert sorted(third.added) == ["dump/step1/rank2", *(f"dump/step3/rank{r}" for r in range(4))]
    norm = run_query(store, "SELECT norm FROM stats WHERE step = 1 AND rank = 2 AND seq = 1")["norm"].tolist()
    assert norm == [value(1, 2, 0, 1) * 2.0]
    assert run_query(store, "SELECT count(*) AS n FROM stats")["n"].tolist() == [4 * 4 * 2 * 2]


def test_monitor_csvs_become_rows(tmp_path):
    run_dir = tmp_path / "monitor" / "Nov26_10-00-00-rank3"
    run_dir.mkdir(parents=True)
    (run_dir / "actv_0-1.csv").write_text(
        "vpp_stage,name,step,micro_step,norm,max,min,mean\n"
        "0,layers.0.attn/input,0,0,1.5,2.0,-2.0,0.1\n"
        "0,layers.0.attn/input,1,0,inf,3.0,-3.0,nan\n"
    )
    (run_dir / "grad_reduced_0-1.csv").write_text(
        "vpp_stage,name,step,norm\n0,layers.0.weight,0,0.25\n0,layers.0.weight,1,0.5\n"
    )
    summary = build_store(tmp_path / "monitor", tmp_path / "store", data_format="monitor")
    assert summary.rows == 4
    table = run_query(
        tmp_path / "store", "SELECT step, rank, source, name, io, arg, norm, max FROM stats ORDER BY io, step"
    )
    assert table["rank"].tolist() == [3] * 4 and set(table["source"]) == {"monitor"}
    assert table["io"].tolist() == ["actv", "actv", "grad_reduced", "grad_reduced"]
    assert table["norm"].tolist()[:3] == [1.5, math.inf, 0.25] and table["max"].isna().tolist()[2:] == [True, True]
    assert table["arg"].tolist()[:2] == ["0", "0"]  # the micro-step


def test_trend_names_the_first_nonfinite_and_the_first_jump(run):
    root, _ = run
    summary = write_trend(root / "store", root / "trend.html", ".*")
    bad = summary.nonfinite
    assert (bad.step, bad.rank, bad.name, bad.io, bad.statistic) == (7, 130, api_name(BAD[2]), "output", "norm")
    jump = summary.jump
    assert (jump.step, jump.rank, jump.name, jump.io) == (12, 40, api_name(SPIKED[2]), "output")
    assert jump.value == pytest.approx(value(12, 40, 2, 1) * SPIKE)
    assert summary.matched == CALLS * 2 and summary.drawn == CALLS * 2
    only_linear = write_trend(root / "store", root / "linear.html", r"^Functional\.gelu")
    assert only_linear.nonfinite is None and only_linear.jump is None


def test_trend_page_in_the_browser_names_the_injected_rank_and_step(run):
    from playwright.sync_api import sync_playwright

    from browser import launch, open_page

    root, _ = run
    page_file = write_trend(root / "store", root / "page.html", "layer_norm|linear").page
    html = page_file.read_text()
    for external in ("http://", "https://", "src=", "<link"):
        assert external not in html, external
    with sync_playwright() as playwright:
        browser = launch(playwright)
        page, errors = open_page(browser, page_file)
        finding = page.locator("#finding-nonfinite")
        assert finding.get_attribute("data-step") == "7" and finding.get_attribute("data-rank") == "130"
        assert "step 7, rank 130" in finding.inner_text() and api_name(BAD[2]) in finding.inner_text()
        assert page.locator("#series option:checked").inner_text().startswith(api_name(BAD[2]))
        assert page.locator("#line-rank").inner_text() == "130"
        page.locator("#finding-jump").click()
        assert page.locator("#line-rank").inner_text() == "40"
        page.select_option("#series", label=f"{api_name(BAD[2])} output.0")
        width = int(page.locator("#heatmap").get_attribute("data-cell-width"))
        height = int(page.locator("#heatmap").get_attribute("data-cell-height"))
        page.locator("#heatmap").click(position={"x": 8 * width + 1, "y": 130 * height + 1})
        assert page.locator("#cell").inner_text() == "step 8, rank 130: inf"
        assert page.locator("#line-rank").inner_text() == "130"
        page.locator("#heatmap").click(position={"x": 3 * width + 1, "y": 2 * height + 1})
        assert page.locator("#cell").inner_text() == f"step 3, rank 2: {value(3, 2, BAD[2], 1)}"
        assert errors == []
        browser.close()


def test_cli_build_query_trend_and_data2db(run, tmp_path):
    root, _ = run
    runner = CliRunner()
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"Functional.": "F."}))
    small = write_run(tmp_path / "dump", 2, 2, 3)
    result = runner.invoke(
        cli, ["data2db", "--data", str(small), "--db", str(tmp_path / "db"), "--mapping", str(mapping)]
    )
    assert result.exit_code == 0, result.output
    assert "4 source(s) added" in result.output and (tmp_path / "db" / MANIFEST).is_file()
    result = runner.invoke(cli, ["db", "query", str(tmp_path / "db"), "SELECT DISTINCT name FROM stats ORDER BY name"])
    assert result.exit_code == 0 and "F.linear.0.forward" in result.output and "Functional." not in result.output
    out = tmp_path / "names.csv"
    sql = "SELECT step, rank, norm FROM stats WHERE NOT isfinite(norm)"
    result = runner.invoke(cli, ["db", "query", str(root / "store"), sql, "-o", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert len(table) == STEPS - BAD[0] and set(table["rank"]) == {130}
    result = runner.invoke(
        cli, ["db", "trend", str(root / "store"), "-n", "layer_norm", "-o", str(tmp_path / "t.html")]
    )
    assert result.exit_code == 0, result.output
    assert "first non-finite at step 7, rank 130" in result.output and (tmp_path / "t.html").is_file()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["db", "query", "{missing}", "SELECT 1"], "not an msprobe store"),
        (["db", "query", "{store}", "SELECT nope FROM stats"], "query failed"),
        (["db", "trend", "{store}", "-n", "("], "is not a regular expression"),
        (["db", "trend", "{store}", "-n", "no_such_api"], "no tensor in"),
        (["db", "build", "-i", "{missing}", "-o", "{out}"], "not a folder"),
        (["db", "build", "-i", "{empty}", "-o", "{out}"], "holds no step{N}/rank{R}/dump.json folders"),
        (["db", "build", "-i", "{dump}", "-o", "{notstore}"], "is not an msprobe store"),
    ],
)
def test_bad_input_is_one_clear_line(run, tmp_path, arguments, message):
    root, _ = run
    (tmp_path / "empty").mkdir()
    (tmp_path / "notstore").mkdir()
    (tmp_path / "notstore" / "precious.txt").write_text("keep me")
    names = {"missing": tmp_path / "missing", "store": root / "store", "out": tmp_path / "out",
             "empty": tmp_path / "empty", "dump": root / "dump", "notstore": tmp_path / "notstore"}  # fmt: skip
    result = CliRunner().invoke(cli, [a.format(**names) for a in arguments])
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output
    assert (tmp_path / "notstore" / "precious.txt").read_text() == "keep me"


def test_a_damaged_dump_names_its_file(tmp_path):
    write_run(tmp_path / "dump", 2, 1, 2)
    (tmp_path / "dump" / "step0" / "rank1" / "dump.json").write_text("{cut")
    with pytest.raises(DataFileError, match="rank1"):
        build_store(tmp_path / "dump", tmp_path / "store")
    with pytest.raises(UsageError, match="format 'xml'"):
        build_store(tmp_path / "dump", tmp_path / "store", data_format="xml")


def test_trend_names_where_the_inf_is_made_in_the_order_calls_ran(tmp_path):
    """Three Linear layers, then a division by zero after the last: its output is the first inf made, and every
    gradient is inf or nan after it. dump.json lists layers.0's parameter gradients beside its forward entry,
    before the division; in call order they arrive in the backward, after it."""
    import torch

    from msprobe.core.diagnosis import first_nonfinite
    from msprobe.core.dump.reader import read_dump
    from msprobe.pytorch import PrecisionDebugger

    class Layers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    torch.manual_seed(0)
    model = Layers()
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(tmp_path / "dump"), model=model)
    debugger.start()
    h = model(torch.randn(2, 4))
    (h / torch.zeros_like(h)).sum().backward()
    debugger.stop()
    debugger.step()
    folder = tmp_path / "dump" / "step0" / "rank"
    listed = list(json.loads((folder / "dump.json").read_text())["data"])
    grads = next(name for name in listed if name.endswith(".0.Linear.parameters_grad"))
    assert listed.index(grads) < listed.index("Tensor.__truediv__.0.forward")  # where dump.json has it
    build_store(tmp_path / "dump", tmp_path / "store")
    seq = run_query(tmp_path / "store", "SELECT name, min(seq) AS seq FROM stats GROUP BY name").set_index("name")[
        "seq"
    ]
    backward = next(name for name in listed if name.endswith(".0.Linear.backward.0"))
    assert seq[grads] > seq[backward] > seq["Tensor.__truediv__.0.forward"]  # where the gradients arrive
    summary = write_trend(tmp_path / "store", tmp_path / "trend.html", ".*")
    assert summary.nonfinite.name == "Tensor.__truediv__.0.forward" and summary.nonfinite.io == "output"
    assert summary.nonfinite.name == first_nonfinite(read_dump(folder)).name  # the flight recorder's rule


def test_the_store_its_query_results_and_its_page_are_never_written_through_a_link(tmp_path, monkeypatch):
    from links import plant_links, regular_results

    from msprobe.core.jobs import Engine

    small = write_run(tmp_path / "dump", 2, 2, 3)
    planted = plant_links(tmp_path, monkeypatch)
    build_store(small, tmp_path / "store", engine=Engine(workers=1))  # the links are planted in this process
    runner = CliRunner()
    result = runner.invoke(
        cli, ["db", "query", str(tmp_path / "store"), "SELECT 1 AS one", "-o", str(tmp_path / "q.csv")]
    )
    assert result.exit_code == 0, result.output
    write_trend(tmp_path / "store", tmp_path / "trend.html", ".*")
    regular_results(tmp_path, planted, {".parquet", ".json", ".csv", ".html"})


def test_query_results_keep_formulas_as_text(tmp_path):
    small = write_run(tmp_path / "dump", 1, 1, 2)
    build_store(small, tmp_path / "store")
    sql = "SELECT '=HYPERLINK(\"http://x\")' AS cell, 1.5 AS number"
    result = CliRunner().invoke(cli, ["db", "query", str(tmp_path / "store"), sql, "-o", str(tmp_path / "q.csv")])
    assert result.exit_code == 0, result.output
    rows = list(csv.reader((tmp_path / "q.csv").open(newline="")))
    assert rows == [["cell", "number"], ['\'=HYPERLINK("http://x")', "1.5"]]


def test_a_folder_gone_from_the_data_is_removed_from_the_store(tmp_path):
    import shutil

    write_run(tmp_path / "dump", 3, 2, 2)
    build_store(tmp_path / "dump", tmp_path / "store")
    shutil.rmtree(tmp_path / "dump" / "step1" / "rank2")
    again = build_store(tmp_path / "dump", tmp_path / "store")
    assert again.removed == ["dump/step1/rank2"] and again.unchanged == 5
    ranks = run_query(tmp_path / "store", "SELECT DISTINCT step, rank FROM stats ORDER BY step, rank")
    assert list(zip(ranks["step"], ranks["rank"])) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def test_two_folders_for_one_step_are_refused_naming_both(tmp_path):
    write_run(tmp_path / "dump", 1, 2, 1)
    write_rank(tmp_path / "dump", 1, 0, 1)
    (tmp_path / "dump" / "step1").rename(tmp_path / "dump" / "step01")
    write_rank(tmp_path / "dump", 1, 0, 1)  # step1 beside step01
    with pytest.raises(
        DataFileError, match=r"step01.*is step1/rank0 of the store, as .*step1/rank0 is|step1.*as .*step01"
    ):
        build_store(tmp_path / "dump", tmp_path / "store")


def test_a_first_build_killed_midway_is_resumed(tmp_path):
    """The build is killed with SIGKILL after its first rank: the next one keeps that rank and does the rest."""
    import signal
    import subprocess
    import sys

    write_run(tmp_path / "dump", 4, 2, 2)
    script = (
        "import os, signal, sys\n"
        "from msprobe.core.store import build\n"
        "real = build._write_manifest\n"
        "calls = []\n"
        "def write(store, manifest):\n"
        "    real(store, manifest)\n"
        "    calls.append(1)\n"
        "    if len(calls) == 2: os.kill(os.getpid(), signal.SIGKILL)  # after the first rank's parts\n"
        "build._write_manifest = write\n"
        "from msprobe.core.jobs import Engine\n"
        f"build.build_store({str(tmp_path / 'dump')!r}, {str(tmp_path / 'store')!r}, engine=Engine(workers=1))\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = build_store(tmp_path / "dump", tmp_path / "store")
    assert resumed.unchanged == 2 and len(resumed.added) == 6  # rank 0's two steps were kept
    assert run_query(tmp_path / "store", "SELECT count(*) AS n FROM stats")["n"].tolist() == [4 * 2 * 2 * 2]


def test_a_damaged_part_is_named_by_the_query_and_repaired_by_the_next_build(tmp_path):
    write_run(tmp_path / "dump", 2, 2, 2)
    build_store(tmp_path / "dump", tmp_path / "store")
    part = tmp_path / "store" / "stats" / "step=1" / "rank=0" / "dump.parquet"
    part.write_bytes(part.read_bytes()[:100])  # cut short
    with pytest.raises(DataFileError, match="a part is damaged.*run msprobe db build again"):
        run_query(tmp_path / "store", "SELECT count(*) AS n FROM stats")
    again = build_store(tmp_path / "dump", tmp_path / "store")
    assert again.repaired == ["dump/step1/rank0"] and again.unchanged == 3
    assert run_query(tmp_path / "store", "SELECT count(*) AS n FROM stats")["n"].tolist() == [2 * 2 * 2 * 2]


@pytest.mark.parametrize(
    "sources",
    [{"dump/step0/rank0": "x"}, {"dump/step0/rank0": {"fingerprint": [1, 2], "parts": ["../../etc/passwd"]}}],
)
def test_a_tampered_manifest_is_one_line(tmp_path, sources):
    write_run(tmp_path / "dump", 1, 1, 1)
    build_store(tmp_path / "dump", tmp_path / "store")
    manifest = json.loads((tmp_path / "store" / MANIFEST).read_text())
    manifest["sources"] = sources
    (tmp_path / "store" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(DataFileError, match=r"msprobe_store.json: field 'sources\.dump/step0/rank0"):
        build_store(tmp_path / "dump", tmp_path / "store")


def test_db_build_shows_a_bar_on_a_terminal_only(tmp_path):
    import subprocess
    import sys

    from terminal import on_a_terminal

    small = write_run(tmp_path / "dump", 3, 2, 3)
    line = [sys.executable, "-m", "msprobe.cli.main", "db", "build", "-i", str(small), "-o"]
    shown = on_a_terminal([*line, str(tmp_path / "tty")], tmp_path)
    assert "ranks: " in shown and "/3 [" in shown  # a bar over each step's three ranks
    piped = subprocess.run([*line, str(tmp_path / "pipe")], capture_output=True, text=True)
    assert piped.returncode == 0, piped.stderr
    assert "ranks: " not in piped.stdout + piped.stderr


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT 1) TO '{outside}/written.csv'",
        "SELECT * FROM read_text('/etc/passwd')",
        "INSTALL httpfs",
        "SET enable_external_access = true",
        "ATTACH '{outside}/other.duckdb'",
    ],
    ids=["copy-to", "read-text", "install", "unlock", "attach"],
)
def test_a_query_reads_the_store_and_nothing_else(run, tmp_path, sql, monkeypatch):
    """docs/scale.md says the store is only read: a query may not write a file, read one outside the store,
    install or download an extension (and create ~/.duckdb), or switch that off."""
    root, _ = run
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(UsageError, match="query failed"):
        run_query(root / "store", sql.format(outside=tmp_path))
    assert not list(tmp_path.glob("written.csv")) and not list(tmp_path.glob("other.duckdb"))
    assert not (home / ".duckdb").exists()
    assert len(run_query(root / "store", "SELECT count(*) AS n FROM stats")) == 1  # the store itself still reads

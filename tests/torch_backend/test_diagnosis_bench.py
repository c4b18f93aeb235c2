"""The diagnosis on injected faults: the quick subset of bench/bench_diagnosis.py, and one answer everywhere.

Each fault of bench/diagnosis_faults.py says where it is from the change itself (which module's code or
state, which call); the bench trains it beside an untouched twin and scores the diagnosis's answer. Here the
quick subset must meet the bench's targets, and for a set of cases every surface that says where two runs
part ways (the compare summary and its advisor file, ``compare --first-divergence``, the graph page, the
live md5 diff, a multi-rank compare, the flight recorder) must print the same answer.
"""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner
from repo_paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import bench_diagnosis as bench
from diagnosis_faults import AT_L0, FAULTS

from msprobe.cli.main import cli
from msprobe.core.compare.run import compare_pair
from msprobe.core.diagnosis import diagnose_pair, diagnose_runs
from msprobe.core.graph.run import run_graph

BY_NAME = {fault.name: fault for fault in FAULTS}


def test_the_quick_subset_meets_the_targets(tmp_path):
    faults = [BY_NAME[name] for name in bench.QUICK]
    scores = bench.run(faults, ["statistics", "md5"], ["exact", "noisy"], tmp_path)
    lines, met = bench.table(scores)
    wrong = [(s.regime, s.mode, s.fault.name, s.answer.line()) for s in scores if not s.module_right]
    assert met and not [w for w in wrong if w[0] == "exact"], "\n".join(lines + [str(w) for w in wrong])
    assert sum(not s.control for s in scores) >= 30 and sum(s.control for s in scores) >= 8


def test_the_quick_subset_at_level_l0_meets_its_targets(tmp_path):
    """Level L0 dumps hold modules alone: faults are placed by diagnosis_faults.AT_L0's rules there."""
    assert set(AT_L0) <= set(BY_NAME), "AT_L0 names a fault that does not exist"
    faults = [BY_NAME[name] for name in bench.QUICK]
    scores = bench.run(faults, ["statistics", "md5"], ["exact", "noisy"], tmp_path, level="L0")
    lines, met = bench.table(scores, "L0")
    wrong = [(s.regime, s.mode, s.fault.name, s.answer.line()) for s in scores if not s.module_right]
    assert met and not [w for w in wrong if w[0] == "exact"], "\n".join(lines + [str(w) for w in wrong])


def _surfaces(tmp_path, npu_step, bench_step) -> dict[str, str]:
    """The answer each two-run surface prints for one step of two runs."""
    answers = {"diagnosis": diagnose_pair(npu_step, bench_step).line()}
    summary, _ = compare_pair(npu_step / "dump.json", bench_step / "dump.json", tmp_path / "compare")
    answers["compare summary"] = summary.diagnosis.line()
    advisor = next((tmp_path / "compare").glob("advisor_*.txt")).read_text().splitlines()[0]
    answers["advisor file"] = advisor
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(npu_step / "dump.json"), "bench_path": str(bench_step / "dump.json")}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "cli"), "--first-divergence"])
    (written,) = (tmp_path / "cli").glob("first_divergence_*.json")
    answers["--first-divergence file"] = json.loads(written.read_text())["answer"]
    answers["compare command"] = result.output.splitlines()[-2]  # the --first-divergence line, before "results:"
    graph_spec = tmp_path / "graph.json"
    graph_spec.write_text(json.dumps({"npu_path": str(npu_step), "bench_path": str(bench_step)}))
    (graph,) = run_graph(graph_spec, tmp_path / "graph")
    answers["graph summary"] = graph.answer
    page = next((tmp_path / "graph").glob("*.html")).read_text()
    assert json.dumps(graph.answer)[1:-1] in page  # the page shows it, and its First suspect button opens it
    return answers


AGREEMENT = [
    "attention.weight",
    "attention.gelu_approximate",
    "cnn.relu_to_leaky",
    "attention.fc_gradient",
    "cnn.fc_weight_decay",
    "moe.router_temperature",
    "cnn.overflow_made_step1",
    "cnn.control_torch_relu",
]


@pytest.mark.parametrize("name", AGREEMENT)
def test_every_surface_gives_the_same_answer(tmp_path, name):
    fault = BY_NAME[name]
    golden = bench.train(None, fault.arch, "md5", False, tmp_path / "golden")
    tested = bench.train(fault, fault.arch, "md5", False, tmp_path / "tested")
    step = fault.expect.step if fault.expect else 0
    npu_step, bench_step = tested / f"step{step}" / "rank", golden / f"step{step}" / "rank"
    answers = _surfaces(tmp_path, npu_step, bench_step)
    answers["live md5 diff"] = _live_diff(tmp_path, fault, golden, step)
    assert len(set(answers.values())) == 1, json.dumps(answers, indent=1)
    # and the answer is the fault's own place (module, API kind, step, phase), written down from the change
    found = diagnose_runs(tested, golden)
    scored = bench.score(fault, "md5", "exact", found)
    assert scored.module_right and scored.api_right is not False, found.line()
    assert answers["diagnosis"].split(":")[0] == found.line().split(":")[0]  # the same call, step and module
    if fault.kind == "nan":  # one run alone: the flight recorder names the call the two-run answer names
        assert _flight_recorder(tmp_path, fault) == diagnose_runs(tested, golden).api


def _live_diff(tmp_path, fault, golden, step) -> str:
    """The faulty run again, diffed call by call against the golden md5 dump as it goes."""
    config = {"task": "tensor", "level": "mix", "dump_path": str(tmp_path / "live"), "step": [0, 1],
              "tensor": {"summary_mode": "md5", "bench_path": str(golden), "diff_nums": 1}}  # fmt: skip
    _train_with(fault, config, tmp_path / "live.json")
    report = json.loads((tmp_path / "live" / f"step{step}" / "rank" / "diff_report.json").read_text())
    return report["answer"]


def _flight_recorder(tmp_path, fault) -> str | None:
    config = {"task": "flight_recorder", "level": "mix", "dump_path": str(tmp_path / "flight"),
              "flight_recorder": {"window": 2}}  # fmt: skip
    _train_with(fault, config, tmp_path / "flight.json")
    report = json.loads((tmp_path / "flight" / "flight_recorder_report.json").read_text())
    return report["first_nonfinite"]["api"]


def _train_with(fault, config: dict, config_file) -> None:
    config_file.write_text(json.dumps(config))
    bench.train_with(fault, fault.arch, config_file)


def test_a_multi_rank_compare_ends_with_the_answer_over_every_rank(tmp_path):
    fault = BY_NAME["ranks.weight_on_rank1"]
    golden = bench.train(None, fault.arch, "statistics", False, tmp_path / "golden", world=2)
    tested = bench.train(fault, fault.arch, "statistics", False, tmp_path / "tested", world=2)
    spec = tmp_path / "compare.json"
    spec.write_text(json.dumps({"npu_path": str(tested / "step0"), "bench_path": str(golden / "step0")}))
    result = CliRunner().invoke(cli, ["compare", "-i", str(spec), "-o", str(tmp_path / "out"), "--first-divergence"])
    overall = diagnose_runs(tested / "step0", golden / "step0")
    assert f"all ranks: {overall.line()}" in result.output
    assert (overall.rank, overall.alone, overall.module) == (1, True, "blocks.0.fc")
    (written,) = (tmp_path / "out").glob("first_divergence_*.json")
    assert json.loads(written.read_text())["answer"] == overall.line()

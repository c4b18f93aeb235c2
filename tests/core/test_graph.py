"""Graph view from real reference dumps: hierarchy, matching, scores, .vis and page files."""

import base64
import gzip
import json
import math
import shutil

import pytest
from click.testing import CliRunner
from repo_paths import REFERENCE_DUMPS, REFERENCE_GRAPHS

from msprobe.cli.main import cli
from msprobe.core.dump.reader import read_dump
from msprobe.core.errors import DataFileError
from msprobe.core.graph.compare import compare_graphs
from msprobe.core.graph.model import build_graph
from msprobe.core.graph.overflow import overflow_level
from msprobe.core.graph.run import run_graph

MIX = REFERENCE_DUMPS / "pytorch" / "statistics_mix"
STEP0, STEP1 = MIX / "step0" / "rank", MIX / "step1" / "rank"


def _documented_index(vis: dict, node_id: str) -> float | None:
    """docs/graph.md's statistics-mode precision_index of a node of the reference's .vis, worked out from the
    statistics that file shows (not by our code): the largest relative error of each output's Max, Min, Mean and
    Norm against the bench's, a statistic smaller than the bench tensor's RMS (norm / sqrt(elements)) measured
    against the RMS, capped at 1; a group of APIs takes its worst API's."""
    npu_node = vis["NPU"]["node"][node_id]
    if not npu_node.get("output_data") and npu_node.get("subnodes"):
        inner = [_documented_index(vis, name) for name in npu_node["subnodes"]]
        return max((value for value in inner if value is not None), default=None)
    links = npu_node.get("matched_node_link") or []
    bench_node = vis["Bench"]["node"].get(links[-1], {}) if links else {}
    errors = []
    for ours, theirs in zip(npu_node.get("output_data", {}).values(), bench_node.get("output_data", {}).values()):
        try:
            elements = math.prod(json.loads(theirs["shape"])) or 1
            rms = abs(float(theirs["Norm"])) / math.sqrt(elements)
            for stat in ("Max", "Min", "Mean", "Norm"):
                mine, bench = float(ours[stat]), float(theirs[stat])
                scale = max(abs(bench), rms)
                errors.append(abs(mine - bench) / scale if scale else float(mine != bench))
        except (KeyError, TypeError, ValueError):
            continue  # not a tensor with statistics: it adds nothing to the index
    return min(max(errors), 1.0) if errors else None


def load_vis(path):
    return json.loads(path.read_text(encoding="utf-8"))


def write_compare_json(folder, npu, bench=None):
    spec = {"npu_path": str(npu)}
    if bench is not None:
        spec["bench_path"] = str(bench)
    path = folder / "compare.json"
    path.write_text(json.dumps(spec))
    return path


def copy_dump(source, target):
    shutil.copytree(source, target)
    return target


def edit_dump(folder, change):
    path = folder / "dump.json"
    dump = json.loads(path.read_text())
    change(dump["data"])
    path.write_text(json.dumps(dump))


def test_hierarchy_matches_the_reference_build():
    reference = load_vis(REFERENCE_GRAPHS / "build_statistics_mix_step0.vis")["node"]
    graph = build_graph(read_dump(STEP0))
    assert set(graph.nodes) == set(reference)
    for node_id, expected in reference.items():
        node = graph[node_id]
        assert node.node_type == expected["node_type"], node_id
        assert (node.upnode or "None") == expected["upnode"], node_id
        assert node.subnodes == expected["subnodes"], node_id
        assert node.stack_info == expected["stack_info"], node_id


def test_near_zero_means_do_not_make_a_node_suspect(tmp_path):
    bench = copy_dump(STEP0, tmp_path / "bench")
    edit_dump(bench, lambda data: data["Functional.relu.0.forward"]["output"][0].update(Mean=1e-9))
    npu = copy_dump(STEP0, tmp_path / "npu")
    edit_dump(npu, lambda data: data["Functional.relu.0.forward"]["output"][0].update(Mean=2e-9))
    npu_graph, bench_graph = build_graph(read_dump(npu)), build_graph(read_dump(bench))
    compare_graphs(npu_graph, bench_graph)
    assert npu_graph["Functional.relu.0.forward"].data["precision_index"] < 1e-6  # 100% of nothing is nothing
    edit_dump(npu, lambda data: data["Functional.relu.0.forward"]["output"][0].update(Max=3.0))  # a real change
    npu_graph = build_graph(read_dump(npu))
    compare_graphs(npu_graph, build_graph(read_dump(bench)))
    assert npu_graph["Functional.relu.0.forward"].data["precision_index"] > 0.5


def test_comparison_scores_match_the_reference(tmp_path):
    reference = load_vis(REFERENCE_GRAPHS / "compare_statistics_mix_step0_vs_step1.vis")
    [summary] = run_graph(write_compare_json(tmp_path, STEP0, STEP1), tmp_path / "out")
    vis_file = summary.files[0]
    assert vis_file.name.startswith("compare_") and vis_file.suffix == ".vis"
    ours = load_vis(vis_file)
    assert ours["task"] == reference["task"] == "summary"
    assert list(ours["Colors"]) == list(reference["Colors"])
    assert [c["value"] for c in ours["Colors"].values()] == [c["value"] for c in reference["Colors"].values()]
    for side in ("NPU", "Bench"):
        assert ours[side]["root"] == reference[side]["root"]
        for node_id, expected in reference[side]["node"].items():
            node = ours[side]["node"][node_id]
            assert node["matched_node_link"] == expected["matched_node_link"], node_id
            want = expected["data"].get("precision_index")
            got = node["data"].get("precision_index")
            assert (want is None) == (got is None), node_id
            if want is None:
                continue
            # the reference divides by the statistic itself; we floor the divisor at the tensor's RMS,
            # so a near-zero mean scores lower here and nothing scores higher
            assert got <= want + 1e-6, node_id
            # the .vis shows statistics to six digits: the worked-out index is as close as they allow; a node
            # with no output statistics (a module backward that passes no gradient on) keeps the reference's
            documented = _documented_index(reference, node_id)
            expected_index = want if documented is None else documented
            assert got == pytest.approx(expected_index, rel=1e-4, abs=1e-6), node_id
    relu = ours["NPU"]["node"]["Functional.relu.0.forward"]["output_data"]["Functional.relu.0.forward.output.0"]
    expected = reference["NPU"]["node"]["Functional.relu.0.forward"]["output_data"][
        "Functional.relu.0.forward.output.0"
    ]
    for key in ("Max diff", "MaxRelativeErr", "NormRelativeErr", "MinRelativeErr", "shape", "dtype"):
        assert relu[key] == expected[key], key
    assert summary.matched == summary.nodes == 27


def test_unmatched_nodes_are_marked_and_counted(tmp_path):
    bench = copy_dump(STEP1, tmp_path / "bench")
    edit_dump(bench, lambda data: data["Functional.relu.0.forward"]["output"][0].update(shape=[4, 999]))
    npu_graph, bench_graph = build_graph(read_dump(STEP0)), build_graph(read_dump(bench))
    comparison = compare_graphs(npu_graph, bench_graph)
    relu = npu_graph["Functional.relu.0.forward"]
    assert relu.matched is None and relu.matched_link == [] and "precision_index" not in relu.data
    assert bench_graph["Functional.relu.0.forward"].matched is None
    assert "Functional.relu.0.forward" not in comparison.matches
    [summary] = run_graph(write_compare_json(tmp_path, STEP0, bench), tmp_path / "out")
    assert summary.nodes - summary.matched == 1
    assert "1 unmatched" in summary.line()


def test_fuzzy_matching_ignores_call_counts(tmp_path):
    bench = copy_dump(STEP1, tmp_path / "bench")

    def renumber(text):
        return text.replace("Functional.relu.0.", "Functional.relu.7.")

    for name in ("dump.json", "construct.json", "stack.json"):
        path = bench / name
        path.write_text(renumber(path.read_text()))
    npu_graph = build_graph(read_dump(STEP0))
    exact = compare_graphs(npu_graph, build_graph(read_dump(bench)))
    assert "Functional.relu.0.forward" not in exact.matches
    fuzzy = compare_graphs(build_graph(read_dump(STEP0)), build_graph(read_dump(bench)), fuzzy=True)
    assert fuzzy.matches["Functional.relu.0.forward"] == "Functional.relu.7.forward"
    assert fuzzy.matches["Functional.relu.0.backward"] == "Functional.relu.7.backward"


def test_layer_mapping_matches_renamed_modules(tmp_path):
    bench = copy_dump(STEP1, tmp_path / "bench")
    for name in ("dump.json", "construct.json", "stack.json"):
        path = bench / name
        path.write_text(path.read_text().replace("Module.fc.Linear", "Module.head.Linear"))
    mapping = tmp_path / "layers.yaml"
    mapping.write_text("Net:\n  fc: head\n")
    spec = write_compare_json(tmp_path, STEP0, bench)
    [plain] = run_graph(spec, tmp_path / "plain")
    [mapped] = run_graph(spec, tmp_path / "mapped", layer_mapping=mapping)
    # the two fc modules and the three APIs inside them match only through the mapping
    assert (plain.matched, mapped.matched) == (22, 27)
    vis = load_vis(mapped.files[0])
    # matched_node_link is the partner's path: its last item names the bench node (what tb-graph-ascend reads)
    assert vis["NPU"]["node"]["Module.fc.Linear.forward.0"]["matched_node_link"] == [
        "DefaultModel",
        "Module.head.Linear.forward.0",
    ]
    assert vis["Bench"]["node"]["Module.head.Linear.forward.0"]["matched_node_link"][-1] == "Module.fc.Linear.forward.0"


def test_overflow_levels(tmp_path):
    folder = copy_dump(STEP0, tmp_path / "npu")

    def poison(data):
        data["Functional.relu.0.forward"]["output"][0]["Max"] = "inf"  # finite in, inf out
        data["Tensor.flatten.0.forward"]["input_args"][0]["Max"] = "inf"  # inf in, finite out
        data["Functional.linear.0.forward"]["input_args"][0]["Norm"] = "nan"
        data["Functional.linear.0.forward"]["output"][0]["Norm"] = "nan"

    edit_dump(folder, poison)
    graph = build_graph(read_dump(folder))
    assert overflow_level(graph["Functional.relu.0.forward"]) == "critical"
    assert overflow_level(graph["Tensor.flatten.0.forward"]) == "medium"
    assert overflow_level(graph["Functional.linear.0.forward"]) == "high"
    assert overflow_level(graph["Functional.conv2d.0.forward"]) is None
    [summary] = run_graph(write_compare_json(tmp_path, folder), tmp_path / "out", overflow_check=True)
    vis = load_vis(summary.files[0])
    assert vis["OverflowCheck"] is True
    assert vis["node"]["Functional.relu.0.forward"]["data"] == {"overflow_level": "critical"}
    assert summary.overflow == 3


def test_an_overflow_dump_gets_overflow_levels_without_asking(tmp_path):
    folder = copy_dump(STEP0, tmp_path / "npu")
    path = folder / "dump.json"
    dump = json.loads(path.read_text())
    dump["task"] = "overflow_check"
    dump["data"]["Functional.relu.0.forward"]["output"][0]["Min"] = "-inf"
    path.write_text(json.dumps(dump))
    [summary] = run_graph(write_compare_json(tmp_path, folder), tmp_path / "out")
    vis = load_vis(summary.files[0])
    assert vis["OverflowCheck"] is True
    assert vis["node"]["Functional.relu.0.forward"]["data"]["overflow_level"] == "critical"
    assert "1 node(s) with an overflow level" in summary.line()


def test_output_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("not a folder")
    with pytest.raises(DataFileError, match="output path is a file"):
        run_graph(write_compare_json(tmp_path, STEP0), tmp_path / "out")


def test_multi_rank_and_multi_step_layouts(tmp_path):
    for step in ("step0", "step1"):
        for rank in ("rank0", "rank1"):
            copy_dump(STEP0, tmp_path / "npu" / step / rank)
            copy_dump(STEP1, tmp_path / "bench" / step / rank)
    spec = write_compare_json(tmp_path, tmp_path / "npu", tmp_path / "bench")
    summaries = run_graph(spec, tmp_path / "out")
    names = sorted(f.name.rsplit("_", 1)[0] + f.suffix for s in summaries for f in s.files)
    assert names == sorted(
        f"compare_{s}_{r}{x}" for s in ("step0", "step1") for r in ("rank0", "rank1") for x in (".vis", ".html")
    )
    ranks = run_graph(write_compare_json(tmp_path, tmp_path / "npu" / "step1"), tmp_path / "ranks")
    assert sorted(f.name.split("_")[1] for s in ranks for f in s.files if f.suffix == ".vis") == ["rank0", "rank1"]
    assert all(f.name.startswith("build_") for s in ranks for f in s.files)
    # one rank against two at a step (a golden run of one process under torchrun): the ranks are merged, and
    # each step is one page of the global runs
    shutil.rmtree(tmp_path / "bench" / "step1" / "rank1")
    spec = write_compare_json(tmp_path, tmp_path / "npu", tmp_path / "bench")
    merged = run_graph(spec, tmp_path / "out2")
    assert sorted(f.name.rsplit("_", 1)[0] for s in merged for f in s.files if f.suffix == ".vis") == [
        "compare_step0_rank",
        "compare_step1_rank",
    ]
    assert (tmp_path / "out2" / "merged_npu" / "step1" / "rank" / "dump.json").is_file()


def test_page_is_self_contained_and_escapes_names(tmp_path):
    folder = copy_dump(STEP0, tmp_path / "npu<!--<script>")  # the page shows the dump's path
    stack_path = folder / "stack.json"
    stacks = json.loads(stack_path.read_text())
    stacks["Functional.relu.0.forward"] = ["File </script><b>x.py, line 1, in f, \n y = 1"]
    stack_path.write_text(json.dumps(stacks))
    [summary] = run_graph(write_compare_json(tmp_path, folder), tmp_path / "out")
    page = summary.files[1].read_text(encoding="utf-8")
    assert page.count("</script>") == 3  # the tree, the packed details and the viewer, nothing injected
    assert "<!--" not in page  # it would hide the real end of a script element, and blank the page
    for external in ("http://", "https://", "src=", "<link"):
        assert external not in page, external
    start = page.index('id="graph-data">') + len('id="graph-data">')
    data = json.loads(page[start : page.index("</script>", start)])
    names = [node["n"] for node in data["sides"][0]["nodes"]]
    assert names[0] == "DefaultModel" and len(names) == 27
    start = page.index('id="graph-details">') + len('id="graph-details">')
    packed = json.loads(page[start : page.index("</script>", start)])
    position = names.index("Functional.relu.0.forward")
    chunk = packed["sides"][0][position // packed["chunk"]]
    inputs, outputs, stack = json.loads(gzip.decompress(base64.b64decode(chunk)))[position % packed["chunk"]]
    assert stack == ["File </script><b>x.py, line 1, in f, \n y = 1"]
    assert "Functional.relu.0.forward.input.0" in inputs and "Functional.relu.0.forward.output.0" in outputs


@pytest.mark.parametrize(
    ("file_name", "content", "message"),
    [
        ("construct.json", json.dumps({"Module.a.A.forward.0": "Module.a.A.forward.0"}), "is its own ancestor"),
        ("construct.json", "[1, 2]", "expected a JSON object"),
        ("stack.json", "{cut", "invalid JSON"),
    ],
)  # fmt: skip
def test_damaged_side_files_are_named(tmp_path, file_name, content, message):
    folder = copy_dump(STEP0, tmp_path / "npu")
    (folder / file_name).write_text(content)
    result = CliRunner().invoke(
        cli, ["graph", "-i", str(write_compare_json(tmp_path, folder)), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code != 0 and message in result.output and file_name in result.output
    assert "Traceback" not in result.output


def test_cli_graph_and_alias(tmp_path):
    spec = write_compare_json(tmp_path, STEP0, STEP1)
    result = CliRunner().invoke(cli, ["graph", "-i", str(spec), "-o", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "compared 27 nodes, 27 matched, 0 unmatched" in result.output
    # step 1's weights are step 0's after one update: the first call given a weight is where the steps part ways
    assert "the runs part ways at Functional.conv2d.0.forward" in result.output and "weights" in result.output
    alias = CliRunner().invoke(cli, ["graph_visualize", "-i", str(spec), "-o", str(tmp_path / "b"), "-f", "-cs"])
    assert alias.exit_code == 0, alias.output
    vis = load_vis(next((tmp_path / "b").glob("*.vis")))
    assert len(vis["NPU"]["node"]["Functional.relu.0.forward"]["stack_info"]) > 1  # -cs keeps the whole stack


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "invalid JSON"),
        ('{"bench_path": "x"}', "npu_path"),
        ('{"npu_path": "/nowhere/at/all"}', "npu_path is not a folder"),
        ('{"npu_path": ".", "extra": 1}', "extra"),
    ],
)
def test_cli_bad_input_is_one_clear_line(tmp_path, content, message):
    spec = tmp_path / "compare.json"
    spec.write_text(content)
    result = CliRunner().invoke(cli, ["graph", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_api_groups_pair_by_their_apis_when_one_run_has_a_group_less(tmp_path):
    """Apis_Between_Modules.N counts groups: with the first group gone from one run, the later ones still pair."""
    bench = copy_dump(STEP1, tmp_path / "bench")
    removed = ("Tensor.view_as.0.forward", "Functional.relu.0.forward", "Tensor.flatten.0.forward")
    for name in ("dump.json", "construct.json", "stack.json"):
        path = bench / name
        content = json.loads(path.read_text())
        entries = content["data"] if name == "dump.json" else content
        for entry in removed:
            entries.pop(entry, None)
        path.write_text(json.dumps(content))
    npu_graph, bench_graph = build_graph(read_dump(STEP0)), build_graph(read_dump(bench))
    assert "Functional.cross_entropy.0.forward" in npu_graph["Apis_Between_Modules.1"].subnodes
    assert "Functional.cross_entropy.0.forward" in bench_graph["Apis_Between_Modules.0"].subnodes
    matches = compare_graphs(npu_graph, bench_graph).matches
    assert matches["Apis_Between_Modules.1"] == "Apis_Between_Modules.0"
    for name in ("Functional.cross_entropy.0.forward", "Torch.ones_like.0.forward", "Functional.relu.0.backward"):
        assert matches[name] == name
    assert not any(name in matches for name in removed)


def test_an_api_group_whose_apis_all_changed_pairs_with_the_group_in_its_place(tmp_path):
    bench = copy_dump(STEP1, tmp_path / "bench")
    renames = {
        "Tensor.view_as.0.": "Tensor.view_as.9.",
        "Functional.relu.0.": "Functional.gelu.0.",
        "Tensor.flatten.0.": "Tensor.reshape.0.",
    }
    for name in ("dump.json", "construct.json", "stack.json"):
        path = bench / name
        text = path.read_text()
        for old, new in renames.items():
            text = text.replace(old, new)
        path.write_text(text)
    matches = compare_graphs(build_graph(read_dump(STEP0)), build_graph(read_dump(bench))).matches
    assert matches["Apis_Between_Modules.0"] == "Apis_Between_Modules.0"
    assert "Functional.relu.0.forward" not in matches
    assert matches["Apis_Between_Modules.1"] == "Apis_Between_Modules.1"


def test_the_graph_is_never_written_through_a_symlinked_output_folder(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").symlink_to(elsewhere)
    npu = REFERENCE_DUMPS / "pytorch" / "statistics_mix" / "step0" / "rank"
    spec = write_compare_json(tmp_path, npu)
    result = CliRunner().invoke(cli, ["graph", "-i", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0 and "symbolic link" in result.output and "Traceback" not in result.output
    assert not list(elsewhere.iterdir())


def test_the_vis_written_node_by_node_is_json_dumps_of_the_whole(tmp_path, monkeypatch):
    """The .vis is encoded a node at a time (in pieces smaller than a node here, so every join is crossed);
    its bytes are those of json.dumps over the same content built whole, non-ASCII names and inf included."""
    from msprobe.core.graph import vis

    bench = copy_dump(STEP0, tmp_path / "bench")
    npu = copy_dump(STEP0, tmp_path / "npu")
    edit_dump(npu, lambda data: data["Functional.relu.0.forward"]["output"][0].update(Max=math.inf))
    npu_graph, bench_graph = build_graph(read_dump(npu)), build_graph(read_dump(bench))
    npu_graph[npu_graph.root].stack_info.append('File "模型.py", line 3')
    comparison = compare_graphs(npu_graph, bench_graph)
    content = vis.compare_vis(npu_graph, bench_graph, comparison, False)

    def whole(value):
        if isinstance(value, vis.NodeFields):
            return dict(value.items())
        return {key: whole(item) for key, item in value.items()} if isinstance(value, dict) else value

    expected = json.dumps(whole(content), ensure_ascii=False, default=vis._default).encode("utf-8")
    monkeypatch.setattr(vis, "_PIECE", 100)
    written = vis.write_vis(tmp_path / "c.vis", content).read_bytes()
    assert written == expected
    assert "模型" in written.decode("utf-8") and len(json.loads(written)["NPU"]["node"]) == len(npu_graph.nodes)

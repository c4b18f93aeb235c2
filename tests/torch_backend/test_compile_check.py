"""compile_check: wrong decompositions injected into one op's compilation are named at that op's first FX node,
and models compiled without a fault show none. The full table (more models, both backends) is
bench/bench_compile_check.py."""

from __future__ import annotations

import csv
import json
import sys

import pytest
import torch
from click.testing import CliRunner

pytest.importorskip("transformers")

from repo_paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import compile_faults

from msprobe.cli.main import cli
from msprobe.pytorch.compile.check import check_compiled


@pytest.mark.parametrize(
    ("models", "backends", "backward"),
    # the backward faults under aot_eager alone: inductor compiles the same joint graph's backward, and its own
    # part (kernels, their fusions) is checked on the forward, where its compile takes a third of the time
    [(["block"], ["aot_eager"], True), (["bert"], ["aot_eager"], False), (["block"], ["inductor"], False)],
)
def test_injected_compiler_faults_are_named_at_their_node_and_kernel_and_clean_runs_are_not(models, backends, backward):
    result = compile_faults.score(models, backends, backward)
    for case in result.cases:
        print("  ", case)
    right, cases = result.count("node_right")
    assert cases >= 4 and right == cases and result.clean_flagged == 0
    backward_faults = {case.fault for case in result.cases if case.fault in compile_faults.BACKWARD_FAULTS}
    if backward:  # the block's GELU, layer norm and softmax backward
        assert backward_faults == {"gelu_backward", "layer_norm_backward", "softmax_backward"}
        # a forward fault departs in no gradient row downstream of it: only in the changed op's own derivative
        contained, checked = result.count("backward_contained")
        assert checked >= 4 and contained == checked
    if backends == ["inductor"]:
        forward = [case for case in result.cases if case.fault in compile_faults.FAULTS]
        assert all(case.kernel_right and case.replay_departs for case in forward) and len(forward) == 4


SCRIPT = """
import torch

def model_and_inputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    return model.eval(), (torch.randn(4, 8),)
"""


def test_the_command_writes_a_row_per_node_and_gradient_and_its_answer(tmp_path):
    (tmp_path / "model.py").write_text(SCRIPT)
    result = CliRunner().invoke(
        cli, ["compile_check", "-s", str(tmp_path / "model.py"), "-b", "aot_eager", "-o", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert (
        "aot_eager: the runs do not part ways: no value of the aot_eager graph departs from eager beyond rounding "
        "(4 checked, each against its float64 replay); nor does any of the 9 gradients of its backward"
    ) in result.output
    with open(tmp_path / "out" / "compile_check_aot_eager.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    forward = [row for row in rows if row["Phase"] == "forward"]
    assert [row["Op"] for row in forward] == ["linear", "layer_norm", "gelu", "linear"]
    assert [row["Module"] for row in forward] == ["0", "1", "2", "3"]  # the Sequential's layers
    # the parameters need grad: each node's gradient but the last one's (the output's is the cotangent), and
    # the six parameters' gradients, named by the node whose backward made them, last node first
    backward = [row for row in rows if row["Phase"] == "backward"]
    fc1, norm, gelu, fc2 = [row["Node"] for row in forward]
    assert [row["Node"] for row in backward] == [fc2, gelu, norm, fc2, fc2, norm, norm, fc1, fc1]
    assert all(row["Result"] == "pass" for row in rows)
    skipped = CliRunner().invoke(
        cli, ["compile_check", "-s", str(tmp_path / "model.py"), "-b", "aot_eager", "--forward-only", "-o",
              str(tmp_path / "fwd")]
    )  # fmt: skip
    assert skipped.exit_code == 0 and "gradients" not in skipped.output


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("x = 1\n", "defines no model_and_inputs()"),
        ("def model_and_inputs():\n    return 3\n", "must return (model, inputs)"),
        ('raise RuntimeError("boom")\n', "the script raised RuntimeError: boom"),
        (
            'def model_and_inputs():\n    raise ValueError("no weights")\n',
            "model_and_inputs() raised ValueError: no weights",
        ),
        (
            "import torch\n"
            "def f(x):\n    return x * 2 if float(x.sum()) > 0 else x\n"
            "def model_and_inputs():\n    return f, (torch.ones(2),)\n",
            "does not compile to one graph",
        ),
        ("import sys\nsys.exit(0)\n", "the script called sys.exit(0) while it was loaded"),
        ("import sys\ndef model_and_inputs():\n    sys.exit(7)\n", "model_and_inputs() called sys.exit(7)"),
    ],
)
def test_a_script_the_check_cannot_use_is_one_clear_error(tmp_path, script, message):
    (tmp_path / "model.py").write_text(script)
    result = CliRunner().invoke(
        cli, ["compile_check", "-s", str(tmp_path / "model.py"), "-b", "aot_eager", "-o", str(tmp_path / "out")]
    )
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_a_script_imports_the_modules_beside_it_as_python_would(tmp_path):
    (tmp_path / "faults_beside.py").write_text("import torch\nSCALE = 3.0\n")
    (tmp_path / "model.py").write_text(
        "import torch\nfrom faults_beside import SCALE\n"
        "def model_and_inputs():\n    return torch.nn.Linear(2, 2), (torch.ones(1, 2) * SCALE,)\n"
    )
    result = CliRunner().invoke(
        cli, ["compile_check", "-s", str(tmp_path / "model.py"), "-b", "aot_eager", "-o", str(tmp_path / "out")]
    )
    assert "ModuleNotFoundError" not in result.output and result.exit_code in (0, 1), result.output


def test_the_report_holds_both_runs_as_dumps_their_compare_table_and_the_page_with_kernels_as_groups(tmp_path):
    model, inputs = compile_faults.model_and_inputs("block")
    gelu_fault = compile_faults.FAULTS["gelu"][0]
    check = check_compiled(model, inputs, "inductor", gelu_fault, forward_only=True, report_to=tmp_path)
    found = check.diagnosis()
    assert (found.api, found.phase) == ("h", "forward") and "cpp_fused_gelu" in found.detail
    base = tmp_path / "compile_check_inductor"
    construct = json.loads((base / "compiled" / "construct.json").read_text())
    kernel = construct["Fx.h.0.forward"]
    # the layer norm and the GELU after it are one kernel: one group of the page
    assert kernel.startswith("Module.cpp_fused_") and construct["Fx.layer_norm.0.forward"] == kernel
    with open(base / "compare_result_inductor.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {"NPU Name", "Bench Name", "MaxRelativeErr", "Result"} <= set(rows[0])
    outputs = {row["NPU Name"]: row for row in rows if ".output." in row["NPU Name"]}
    assert len(outputs) == len(check.nodes)
    gelu_out = torch.nn.functional.gelu(torch.nn.functional.layer_norm(model.fc1(inputs[0]), (32,), model.norm.weight,
                                                                      model.norm.bias)).detach()  # fmt: skip
    # the eager side's statistics are the eager GELU's, taken here with torch itself
    assert float(outputs["Fx.h.0.forward.output.0"]["Bench max"]) == pytest.approx(float(gelu_out.max()), rel=1e-6)
    page = (base / "graph.html").read_text()
    assert kernel.rsplit(".forward", 1)[0] in page and "Fx.h.0.forward" in page
    assert "cpp_fused_gelu" in page and "the runs part ways at Fx.h.0.forward (forward, outside every module)" in page


def test_kernels_are_read_from_inductors_provenance_record_in_call_order():
    from msprobe.pytorch.compile.kernels import kernels_of

    def f(x):
        a = x.sin()
        b = a.cos()
        return b @ b

    graph = torch.fx.symbolic_trace(f).graph
    names = [node.name for node in graph.nodes if node.op in {"call_method", "call_function"}]
    assert names == ["sin", "cos", "matmul"]
    mapping = {
        "cppCodeToPost": {"cpp_fused_cos_sin_0:2": ["cos_1", "sin_1"], "extern_kernels.mm:3": ["mm"],
                          "cpp_fused_gone_1:4": ["orphan"]},
        "postToPre": {"cos_1": ["cos"], "sin_1": ["sin"], "mm": ["matmul"], "orphan": ["not_in_graph"]},
    }  # fmt: skip
    source = "cpp_fused_cos_sin_0 = async_compile.cpp_pybinding(['float*'], r'''\nvoid kernel() {}\n''')\n"
    artifacts = {"inductor_provenance_tracking_node_mappings": json.dumps(mapping)}
    kernels = kernels_of(artifacts, [source], graph)
    # in the order of the handles Inductor numbered the calls with; nodes in graph order; a kernel with no node
    # of this graph is left out; an extern kernel is told apart by its call
    assert [(k.name, k.nodes, k.extern) for k in kernels] == [
        ("cpp_fused_cos_sin_0", ["sin", "cos"], False),
        ("extern_kernels.mm#3", ["matmul"], True),
    ]
    assert kernels[0].source.strip() == "void kernel() {}" and kernels[1].source == ""
    assert kernels_of({"inductor_provenance_tracking_node_mappings": "not json"}, [], graph) == []


@pytest.mark.parametrize("planted", ["output", "below"])
def test_a_linked_output_folder_is_refused_before_anything_is_written(tmp_path, planted):
    """`-o link`, or a link planted at OUT/compile_check_aot_eager: the dumps, tables and page went to the
    link's target, and only then was the folder refused."""
    (tmp_path / "model.py").write_text(
        "import torch\ndef model_and_inputs():\n    return torch.nn.Linear(2, 2), (torch.ones(1, 2),)\n"
    )
    target = tmp_path / "elsewhere"
    target.mkdir()
    output = tmp_path / "out"
    if planted == "output":
        output.symlink_to(target)
    else:
        output.mkdir()
        (output / "compile_check_aot_eager").symlink_to(target)
    result = CliRunner().invoke(
        cli, ["compile_check", "-s", str(tmp_path / "model.py"), "-b", "aot_eager", "-o", str(output)]
    )
    assert result.exit_code == 2 and "symbolic link" in result.output and "Traceback" not in result.output
    assert not list(target.iterdir())


def test_the_check_says_what_it_is_doing_on_a_terminal(tmp_path):
    """Compiling and replaying take tens of seconds on a real model: each stage is shown as it starts."""
    from terminal import on_a_terminal

    (tmp_path / "model.py").write_text(SCRIPT)
    command = [sys.executable, "-m", "msprobe.cli.main", "compile_check", "-s", str(tmp_path / "model.py"), "-b",
               "aot_eager", "-o", str(tmp_path / "out")]  # fmt: skip
    shown = on_a_terminal(command, tmp_path)
    stages = ["capturing the graph", "eagerly", "compiling with aot_eager", "replaying 4 nodes in float64",
              "checking the backward", "writing both runs' dumps"]  # fmt: skip
    positions = [shown.find(stage) for stage in stages]
    assert -1 not in positions and positions == sorted(positions), shown

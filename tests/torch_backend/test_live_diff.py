"""The live md5 diff: ``tensor.bench_path`` and ``diff_nums`` (mindstudio-probe 26.x).

The golden run is an md5 dump of a small script. The debug run changes one
reduction: ``torch.sum`` accumulates in float64 and is cast back, so
``Torch.sum.0.forward`` differs (its output dtype and bits) while every call
before it is bit for bit the same; everything after it differs because its
inputs do. Expected names are derived from that script by hand.
"""

import json
import re

import pytest
import torch
import torch.nn.functional as F

from msprobe.core.errors import ConfigError
from msprobe.pytorch import PrecisionDebugger

FIRST = "Torch.sum.0.forward"
SECOND = "Tensor.__mul__.0.forward"


def _run(tmp_path, name, variant, bench=None, diff_nums=1, summary_mode="md5", nudged=None):
    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
    if nudged is not None:  # fc2's weight at that index one unit in the last place up
        _one_ulp_up(fc2.weight, nudged)
    config = {"task": "tensor" if bench else "statistics", "level": "L1", "dump_path": str(tmp_path / name)}
    if bench:
        config["tensor"] = {"summary_mode": summary_mode, "bench_path": str(bench), "diff_nums": diff_nums}
    else:
        config["statistics"] = {"summary_mode": summary_mode}
    (tmp_path / f"{name}.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / f"{name}.json"))
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    debugger.start()
    if variant == "extra":
        F.relu(torch.ones(3))  # a call the golden run does not make; the next relu's count shifts
    h = F.relu(fc1(x))
    if variant == "changed":
        s = torch.sum(h, dim=-1, keepdim=True, dtype=torch.float64).float()
    else:
        s = torch.sum(h, dim=-1, keepdim=True)
    fc2(h * s).square().mean().backward()
    debugger.stop()
    debugger.step()
    return tmp_path / name / "step0" / "rank"


def _one_ulp_up(weight, index):
    with torch.no_grad():
        flat = weight.view(-1)
        flat[index] = torch.nextafter(flat[index], torch.tensor(float("inf")))


def _absorbed_index():
    """An element of the script's fc2 weight whose one-ulp change the forward rounds away (fc2's output the same
    bits) but the backward does not (the gradient fc2 sends to h differs), found with torch alone."""
    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
    h = F.relu(fc1(torch.randn(4, 8, generator=torch.Generator().manual_seed(1)))).detach()
    x = h * torch.sum(h, dim=-1, keepdim=True)

    def run(weight):
        given = x.clone().requires_grad_(True)
        out = F.linear(given, weight, fc2.bias)
        out.square().mean().backward()
        return out.detach(), given.grad

    base_out, base_grad = run(fc2.weight.detach())
    for index in range(fc2.weight.numel()):
        weight = fc2.weight.detach().clone()
        _one_ulp_up(weight, index)
        out, grad = run(weight)
        if torch.equal(out, base_out) and not torch.equal(grad, base_grad):
            return index
    raise AssertionError("no element of fc2's weight is absorbed by the forward alone")


def _files(folder):
    return sorted(p.name for p in (folder / "dump_tensor_data").iterdir())


@pytest.fixture
def golden(tmp_path):
    _run(tmp_path, "golden", "same")
    return tmp_path / "golden"


def test_the_first_divergent_api_is_named_and_only_its_tensors_are_written(tmp_path, golden):
    run = _run(tmp_path, "debug", "changed", golden)
    report = json.loads((run / "diff_report.json").read_text())
    first = report["first_divergence"]
    assert (first["api"], first["step"], first["rank"]) == (FIRST, 0, None)
    assert any("torch.sum" in frame for frame in first["stack"])
    assert report["divergent"][:2] == [FIRST, SECOND]  # nothing before it differs
    assert _files(run) == [f"{FIRST}.input.0.pt", f"{FIRST}.output.0.pt"]
    entry = json.loads((run / "dump.json").read_text())["data"][FIRST]
    assert entry["output"][0]["data_name"] == f"{FIRST}.output.0.pt" and "md5" in entry["output"][0]
    assert (
        "data_name" not in json.loads((run / "dump.json").read_text())["data"]["Functional.relu.0.forward"]["output"][0]
    )


def test_diff_nums_writes_the_tensors_of_that_many(tmp_path, golden):
    run = _run(tmp_path, "debug", "changed", golden, diff_nums=2)
    names = {name.split(".input")[0].split(".output")[0] for name in _files(run)}
    assert names == {FIRST, SECOND}
    every = _run(tmp_path, "all", "changed", golden, diff_nums=-1)
    report = json.loads((every / "diff_report.json").read_text())
    written = {name.split(".input")[0].split(".output")[0] for name in _files(every)}
    assert written == set(report["divergent"]) and report["divergent_count"] >= 5


def test_the_same_script_has_no_divergence_and_writes_no_tensor(tmp_path, golden):
    run = _run(tmp_path, "debug", "same", golden)
    report = json.loads((run / "diff_report.json").read_text())
    assert report["first_divergence"] is None and report["divergent"] == [] and _files(run) == []
    assert report["extra"] == [] and report["missing"] == []


def test_an_extra_call_is_reported_not_misaligned(tmp_path, golden):
    run = _run(tmp_path, "debug", "extra", golden)
    report = json.loads((run / "diff_report.json").read_text())
    assert report["extra"] == ["Functional.relu.0.forward"]  # ones(3): no bench call of that shape
    assert report["first_divergence"] is None  # relu.1 pairs with the golden run's relu.0, and agrees
    assert _files(run) == []


def test_xor_checksums_work_as_md5_does(tmp_path):
    _run(tmp_path, "golden", "same", summary_mode="xor")
    entry = json.loads((tmp_path / "golden" / "step0" / "rank" / "dump.json").read_text())["data"][
        "Functional.relu.0.forward"
    ]
    assert len(entry["output"][0]["md5"]) == 16 and "Max" not in entry["output"][0]
    run = _run(tmp_path, "debug", "changed", tmp_path / "golden", summary_mode="xor")
    assert json.loads((run / "diff_report.json").read_text())["first_divergence"]["api"] == FIRST


def test_xor_is_the_xor_of_the_64_bit_words():
    from msprobe.pytorch.dump.measuring import xor_checksum_hex

    words = torch.tensor([0x0102030405060708, 0x1111111111111111, 0x00000000000000FF], dtype=torch.int64)
    assert xor_checksum_hex(words) == f"{0x0102030405060708 ^ 0x1111111111111111 ^ 0xFF:016x}"
    three = torch.tensor([1, 2, 3], dtype=torch.int8)  # one word, zero-padded: 0x030201 little-endian
    assert xor_checksum_hex(three) == f"{0x030201:016x}"


def test_bench_path_needs_checksums(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"task": "tensor", "dump_path": str(tmp_path), "tensor": {"bench_path": "x"}}))
    with pytest.raises(ConfigError, match="bench_path: needs summary_mode 'md5'"):
        PrecisionDebugger(config_path=str(config))


def test_one_bench_dump_given_for_every_step_is_parsed_once(tmp_path, golden, monkeypatch):
    from msprobe.core.dump import reader

    bench = golden / "step0" / "rank"  # holds a dump.json: it stands for every step
    parsed = []
    read_dump = reader.read_dump
    monkeypatch.setattr(reader, "read_dump", lambda folder: parsed.append(folder) or read_dump(folder))
    torch.manual_seed(0)
    fc = torch.nn.Linear(8, 8)
    config = {"task": "tensor", "level": "L1", "dump_path": str(tmp_path / "steps"),
              "tensor": {"summary_mode": "md5", "bench_path": str(bench)}}  # fmt: skip
    (tmp_path / "steps.json").write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(tmp_path / "steps.json"))
    for _ in range(3):
        debugger.start()
        F.relu(fc(torch.ones(4, 8)))
        debugger.stop()
        debugger.step()
    assert [folder for folder in parsed if folder == bench] == [bench]  # the bench once, each step's own too
    reports = [
        json.loads((tmp_path / "steps" / f"step{n}" / "rank" / "diff_report.json").read_text()) for n in range(3)
    ]
    assert all(report["bench"] == str(bench) for report in reports)
    answers = {re.sub(r"step \d", "step N", report["answer"]) for report in reports}
    assert len(answers) == 1  # the kept bench is not changed by a step's diagnosis


def test_a_bench_that_cannot_be_read_is_named_in_the_report_and_training_goes_on(tmp_path, golden, caplog):
    bench = golden / "step0" / "rank" / "dump.json"
    text = bench.read_bytes()
    at = text.index(b'"Functional.relu.0.forward"') + 5
    bench.write_bytes(text[:at] + b"\\ud800" + text[at:])
    run = _run(tmp_path, "debug", "changed", golden)
    report = json.loads((run / "diff_report.json").read_text())
    assert "is half of a UTF-16 pair" in report["error"] and str(bench) in report["error"]
    assert report["first_divergence"] is None and _files(run) == []
    assert json.loads((run / "dump.json").read_text())["data"]  # the step itself is dumped
    assert caplog.text.count("is dumped without a diff") == 1


def test_a_weight_one_ulp_off_is_named_where_it_is_given_not_where_it_shows(tmp_path, golden):
    """The forward rounds the change away and the backward shows it: the answer is the forward call given the
    other weight (whose tensors are the ones written), saying that its outputs round the same."""
    run = _run(tmp_path, "debug", "same", golden, nudged=_absorbed_index())
    report = json.loads((run / "diff_report.json").read_text())
    assert report["first_divergence"]["api"] == "Functional.linear.1.forward"
    assert report["answer"].startswith("the runs part ways at Functional.linear.1.forward (step 0, forward")
    assert "differ (argument 1; its outputs round the same" in report["answer"]  # the weight is argument 1
    assert "the difference shows first in Functional.linear.1.backward" in report["answer"]
    assert "Functional.linear.1.forward.input.1.pt" in _files(run)

"""Two generations token by token, on hand-made responses whose answers are known."""

from __future__ import annotations

import math

from msprobe.core.generation.compare import compare_generations, compare_pair
from msprobe.core.generation.responses import Response


def test_the_first_logprob_and_the_first_token_that_part_ways_are_named():
    npu = Response("r", [5, 6, 7, 8, 9], [-0.1, -0.2, -0.3, -0.4, -0.5])
    bench = Response("r", [5, 6, 7, 1, 2], [-0.1, -0.2, -0.9, -0.4, -0.5])
    rows, answer = compare_pair(npu, bench)
    assert [row[-1] for row in rows] == ["pass", "pass", "logprob differs", "token differs", "after divergence"]
    assert (answer.first_logprob, answer.first_token, answer.tokens) == (2, 3, (8, 1))
    assert math.isclose(answer.logprob_gap, 0.6)
    assert (
        answer.line()
        == "r: log-probabilities part ways at token 2 (by 0.6 nats), the chosen tokens at token 3 (8 vs 1)"
    )


def test_within_the_tolerance_is_agreement_and_a_longer_side_is_reported():
    npu = Response("r", [1, 2, 3], [-0.1, -0.2, -0.3])
    bench = Response("r", [1, 2, 3, 4], [-0.1, -0.2 + 1e-4, -0.3, -0.7])
    rows, answer = compare_pair(npu, bench)
    assert [row[-1] for row in rows] == ["pass", "pass", "pass", "missing"]
    assert not answer.agrees and answer.first_logprob is None and answer.first_token is None
    assert answer.line() == "r: the chosen tokens agree over 3 tokens, the NPU response has 3 tokens, the bench 4"
    same = compare_pair(npu, Response("r", [1, 2, 3], [-0.1, -0.2, -0.3]))[1]
    assert same.agrees and same.line() == "r: the generations agree over 3 tokens (log-probabilities within 0.001 nats)"


def test_a_nan_on_one_side_is_a_difference_and_top_k_overlap_is_shared_over_k():
    npu = Response("r", [1, 2], [-0.1, math.nan], top_logprobs=[{1: -0.1, 4: -2.0}, {2: -1.0, 3: -1.1}])
    bench = Response("r", [1, 2], [-0.1, -0.2], top_logprobs=[{1: -0.1, 4: -2.0}, {2: -0.2, 9: -3.0}])
    rows, answer = compare_pair(npu, bench)
    assert answer.first_logprob == 1 and answer.logprob_gap == math.inf
    assert [row[7] for row in rows] == [1.0, 0.5]


def test_requests_pair_by_id_and_the_unpaired_are_counted():
    a = [Response("x", [1], [-0.1]), Response("y", [1], [-0.1])]
    b = [Response("y", [1], [-0.1]), Response("z", [1], [-0.1])]
    rows, answers, unmatched = compare_generations(a, b)
    assert [answer.response for answer in answers] == ["y"] and unmatched == 2 and len(rows) == 1


def test_first_divergence_with_two_generations_says_it_reads_dumps(tmp_path):
    import json

    from click.testing import CliRunner

    from msprobe.cli.main import cli

    line = json.dumps({"id": "r", "tokens": [1, 2], "logprobs": [-0.1, -0.2]}) + "\n"
    (tmp_path / "a.jsonl").write_text(line)
    (tmp_path / "c.json").write_text(json.dumps({"npu_path": str(tmp_path / "a.jsonl"),
                                                 "bench_path": str(tmp_path / "a.jsonl")}))  # fmt: skip
    result = CliRunner().invoke(cli, ["compare", "-i", str(tmp_path / "c.json"), "-o", str(tmp_path / "o"),
                                      "--first-divergence"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "--first-divergence reads dumps" in result.output and "1 request(s) agree" in result.output


def test_the_page_draws_each_request_with_its_divergence_marked_where_the_csv_says(tmp_path):
    import json
    import re

    from msprobe.core.generation.compare import compare_generation_files
    from msprobe.core.generation.page import LEFT, WIDTH

    def write(path, responses):
        path.write_text("".join(json.dumps(r) + "\n" for r in responses))

    npu = [{"id": "a", "tokens": [1, 2, 3, 4, 5], "logprobs": [-0.1, -0.2, -0.9, -0.4, -0.5]},
           {"id": "b<script>", "tokens": [1, 2, 3], "logprobs": [-0.1, -0.2, -0.3]}]  # fmt: skip
    bench = [{"id": "a", "tokens": [1, 2, 3, 7, 5], "logprobs": [-0.1, -0.2, -0.3, -0.4, -0.5]},
             {"id": "b<script>", "tokens": [1, 2, 3], "logprobs": [-0.1, -0.2, -0.3]}]  # fmt: skip
    write(tmp_path / "npu.jsonl", npu)
    write(tmp_path / "bench.jsonl", bench)
    found = compare_generation_files(tmp_path / "npu.jsonl", tmp_path / "bench.jsonl", tmp_path, "t")
    page = (tmp_path / "generation_compare_t.html").read_text()
    assert [path.name for path in found.files] == ["generation_compare_t.csv", "generation_compare_t.html"]
    assert page.count("<svg") == 2 and "<script>" not in page and "b&lt;script&gt;" in page
    # request a: log-probabilities part at token 2 and the tokens at token 3, of positions 0..4
    width = WIDTH - LEFT - 8
    marks = {
        css: float(x)
        for x, css in re.findall(r'<line x1="([\d.]+)" x2="[\d.]+" y1="\d+" y2="\d+" class="(first-[a-z]+)"/>', page)
    }
    assert marks == {"first-logprob": LEFT + width * 2 / 4, "first-token": LEFT + width * 3 / 4}
    assert "a: log-probabilities part ways at token 2" in page


def test_a_tolerance_that_is_no_finite_number_of_nats_is_refused(tmp_path):
    """nan compared with anything is false: "differ by more than nan nats" never held, and every compare
    passed, the consistency check included."""
    import json

    import pytest
    from click.testing import CliRunner

    from msprobe.cli.main import cli

    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "r", "tokens": [1, 2], "logprobs": [-0.1, -0.2]}) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"id": "r", "tokens": [1, 2], "logprobs": [-0.1, -9.0]}) + "\n")
    (tmp_path / "c.json").write_text(json.dumps({"npu_path": str(tmp_path / "a.jsonl"),
                                                 "bench_path": str(tmp_path / "b.jsonl")}))  # fmt: skip
    for value in ("nan", "inf"):
        for extra in ([], ["--consistent_check"]):
            result = CliRunner().invoke(cli, ["compare", "-i", str(tmp_path / "c.json"), "-o", str(tmp_path / "o"),
                                              "--logprob-tolerance", value, *extra])  # fmt: skip
            assert result.exit_code == 2 and "finite number of nats" in result.output, result.output
            assert "Traceback" not in result.output and "PASS" not in result.output
    from msprobe.core.errors import UsageError
    from msprobe.core.generation.compare import compare_generation_files

    with pytest.raises(UsageError, match="finite number of nats"):
        compare_generation_files(tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path, "s", math.nan)


def test_a_page_that_cannot_be_written_leaves_no_table_behind(tmp_path, monkeypatch):
    """The generation compare's CSV and page are its results together: a page that fails takes the CSV with it."""
    import json

    import pytest

    from msprobe.core.errors import DataFileError
    from msprobe.core.generation import compare as generation

    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "r", "tokens": [1, 2], "logprobs": [-0.1, -0.2]}) + "\n")

    def failing_page(*_args, **_kwargs):
        raise DataFileError(tmp_path / "out" / "page.html", "cannot be written (No space left on device)")

    monkeypatch.setattr(generation, "write_token_page", failing_page)
    (tmp_path / "out").mkdir()
    with pytest.raises(DataFileError, match="No space left"):
        generation.compare_generation_files(tmp_path / "a.jsonl", tmp_path / "a.jsonl", tmp_path / "out", "s")
    assert not list((tmp_path / "out").iterdir())


def test_ids_pair_by_value_and_type_and_tokens_must_be_numbers(tmp_path):
    """Four ways two files of responses were read too kindly: a duplicate id (the verdict then depended on the
    line order), a request on one side only (PASS, exit 0), an id 1 paired with "1", and numeric strings and
    booleans taken for tokens and log-probabilities."""
    import json

    from click.testing import CliRunner

    from msprobe.cli.main import cli

    def write(name, *records):
        (tmp_path / name).write_text("".join(json.dumps(record) + "\n" for record in records))

    def compare(npu, bench):
        (tmp_path / "c.json").write_text(json.dumps({"npu_path": str(tmp_path / npu),
                                                     "bench_path": str(tmp_path / bench)}))  # fmt: skip
        return CliRunner().invoke(cli, ["compare", "-i", str(tmp_path / "c.json"), "-o", str(tmp_path / "o")])

    same = {"id": "a", "tokens": [1, 2], "logprobs": [-0.1, -0.2]}
    write("dup.jsonl", same, {**same, "logprobs": [-0.1, -9.0]})
    write("one.jsonl", same)
    result = compare("dup.jsonl", "one.jsonl")
    assert result.exit_code == 2 and "line 2: id 'a' is line 1's id too" in result.output
    write("two.jsonl", same, {**same, "id": "b"})
    result = compare("two.jsonl", "one.jsonl")
    assert result.exit_code == 1 and "SUSPICIOUS" in result.output and "1 request(s) on one side only" in result.output
    write("int.jsonl", {**same, "id": 1})
    write("str.jsonl", {**same, "id": "1"})
    result = compare("int.jsonl", "str.jsonl")
    assert result.exit_code == 2 and "NO DATA" in result.output  # 1 and "1" are two requests
    for bad in ({**same, "tokens": ["1", 2]}, {**same, "tokens": [True, 2]}, {**same, "logprobs": ["-0.1", -0.2]},
                {**same, "logprobs": [False, -0.2]}):  # fmt: skip
        write("bad.jsonl", bad)
        result = compare("bad.jsonl", "one.jsonl")
        assert result.exit_code == 2 and "bad.jsonl: line 1" in result.output, result.output

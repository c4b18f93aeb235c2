"""response_anomaly: findings in one generated response, measured on injected faults of every kind, with
clean controls (synthetic sampled text and real English prose), as a score."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from msprobe.cli.main import cli
from msprobe.core.generation.anomaly import KINDS, Finding, Thresholds, response_anomalies

DOCS = Path(__file__).resolve().parents[2] / "docs"


def sampled_response(rng: random.Random, length: int = 400, vocabulary: int = 5000):
    """Text as a sampler makes it: Zipf-distributed tokens, mostly likely choices with some unlikely ones, and
    entropies around two nats."""
    weights = [1 / (rank**1.1) for rank in range(1, vocabulary + 1)]
    tokens = rng.choices(range(vocabulary), weights=weights, k=length)
    logprobs = [-rng.expovariate(1 / 0.3) if rng.random() < 0.6 else -rng.expovariate(1 / 2.5) for _ in tokens]
    entropies = [rng.lognormvariate(math.log(2.0), 0.6) for _ in tokens]
    return tokens, logprobs, entropies


def inject(kind: str, rng: random.Random, tokens: list, logprobs: list, entropies: list) -> tuple[int, int]:
    """One fault of ``kind`` at a random place; returns its span."""
    if kind == "nan":
        start, width = rng.randrange(20, len(tokens) - 20), rng.randint(1, 3)
        for index in range(start, start + width):
            if rng.random() < 0.5:
                logprobs[index] = rng.choice([math.nan, -math.inf])
            else:
                entropies[index] = math.nan
                logprobs[index] = math.nan
        return start, start + width
    if kind == "repetition":
        period = rng.randint(1, 12)
        repeats = max(rng.randint(3, 8), math.ceil(9 / period))
        start = rng.randrange(10, len(tokens) - period * repeats - 10)
        phrase = [rng.randrange(5000) for _ in range(period)]
        for index in range(period * repeats):
            tokens[start + index] = phrase[index % period]
        return start, start + period * repeats
    if kind == "entropy_collapse":
        width = rng.randint(30, 80)
        start = rng.randrange(10, len(tokens) - width - 10)
        for index in range(start, start + width):
            entropies[index] = rng.uniform(1e-4, 0.05)
            logprobs[index] = -rng.uniform(1e-5, 0.01)
        return start, start + width
    width = rng.randint(5, 12)  # garbled: a burst of tokens the distribution hardly allowed
    start = rng.randrange(10, len(tokens) - width - 10)
    for index in range(start, start + width):
        tokens[index] = rng.randrange(4000, 5000)
        logprobs[index] = -rng.uniform(10.0, 16.0)
    return start, start + width


def overlap(finding: Finding, start: int, end: int) -> float:
    shared = max(0, min(finding.end, end) - max(finding.start, start))
    return shared / (max(finding.end, end) - min(finding.start, start))


def prose_responses() -> list[list[int]]:
    """Real English, as word tokens: the user pages' paragraphs (code and tables left out), 300 words each."""
    words: list[str] = []
    for page in sorted(DOCS.glob("*.md")):
        text = re.sub(r"```.*?```", " ", page.read_text(encoding="utf-8"), flags=re.S)
        lines = [line for line in text.splitlines() if line and not line.lstrip().startswith(("|", "#", "<"))]
        words.extend(" ".join(lines).split())
    ids: dict[str, int] = {}
    tokens = [ids.setdefault(word.lower(), len(ids)) for word in words]
    return [tokens[start : start + 300] for start in range(0, len(tokens) - 300, 300)]


def test_injected_faults_are_found_at_their_tokens_and_clean_text_passes():
    rng = random.Random(7)
    per_kind = 60
    found = {kind: 0 for kind in KINDS}
    for kind in KINDS:
        for _ in range(per_kind):
            tokens, logprobs, entropies = sampled_response(rng)
            start, end = inject(kind, rng, tokens, logprobs, entropies)
            findings = response_anomalies(tokens, logprobs, entropies)
            if any(f.kind == kind and overlap(f, start, end) >= 0.5 for f in findings):
                found[kind] += 1
    clean_flagged = 0
    for _ in range(200):
        clean_flagged += bool(response_anomalies(*sampled_response(rng)))
    prose = prose_responses()
    prose_flagged = [
        finding for tokens in prose for finding in response_anomalies(tokens, [-0.5] * len(tokens))
    ]  # fmt: skip
    print(f"\nresponse_anomaly: found {found} of {per_kind} each; clean sampled flagged {clean_flagged}/200; "
          f"prose flagged {len(prose_flagged)}/{len(prose)}")  # fmt: skip
    assert all(count >= per_kind * 0.95 for count in found.values()), found
    assert clean_flagged == 0
    assert len(prose) > 20 and prose_flagged == []


def test_a_hand_made_response_names_each_span():
    tokens = list(range(100))
    tokens[40:52] = [7, 8, 9] * 4  # a three-token loop, four times
    logprobs = [-0.5] * 100
    logprobs[10] = math.nan
    logprobs[70:75] = [-12.0] * 5
    findings = response_anomalies(tokens, logprobs, thresholds=Thresholds(collapse_window=200))
    assert [(f.kind, f.start, f.end) for f in findings] == [
        ("nan", 10, 11),
        ("repetition", 40, 52),
        ("garbled", 70, 75),
    ]
    assert findings[1].detail == "a run of 3 token(s) repeated 4.0 times"


def test_entropy_collapse_without_entropies_reads_the_surprise():
    rng = random.Random(3)
    tokens, logprobs, _ = sampled_response(rng)
    logprobs[100:160] = [-1e-4] * 60
    (finding,) = response_anomalies(tokens, logprobs)
    assert (finding.kind, finding.start, finding.end) == ("entropy_collapse", 100, 160)
    assert "surprise" in finding.detail


def test_lengths_that_differ_are_refused():
    with pytest.raises(ValueError, match="one value per token"):
        response_anomalies([1, 2], [0.0])


def test_the_command_reads_jsonl_writes_a_csv_and_exits_by_what_it_found(tmp_path):
    clean = {"id": "a", "tokens": list(range(50)), "logprobs": [-0.5] * 50}
    looping = {"id": "b", "tokens": [1, 2] * 20, "logprobs": [-0.1] * 40}
    (tmp_path / "ok.jsonl").write_text(json.dumps(clean) + "\n")
    (tmp_path / "bad.jsonl").write_text(json.dumps(clean) + "\n" + json.dumps(looping) + "\n")
    runner = CliRunner()
    ok = runner.invoke(cli, ["response_anomaly", "-i", str(tmp_path / "ok.jsonl"), "-o", str(tmp_path / "o1")])
    assert ok.exit_code == 0, ok.output
    assert "1 response(s), none with a finding" in ok.output
    bad = runner.invoke(cli, ["response_anomaly", "-i", str(tmp_path / "bad.jsonl"), "-o", str(tmp_path / "o2")])
    assert bad.exit_code == 1, bad.output
    assert "b: repetition at tokens 0-39" in bad.output
    (report,) = (tmp_path / "o2").glob("response_anomaly_*.csv")
    assert report.read_text().splitlines() == [
        "Response,Kind,Start,End,Detail",
        "b,repetition,0,40,a run of 2 token(s) repeated 20.0 times",
    ]


@pytest.mark.parametrize(
    "text, field",
    [
        ('{"tokens": [1], "logprobs": "x"}', "logprobs"),
        ('{"tokens": [1, 2], "logprobs": [0.0]}', "logprobs"),
        ("not json", "line 1"),
        ('{"logprobs": [0.0]}', "tokens"),
        # each of these exited 3 ("internal error") without naming the file
        ('{"tokens": [1], "logprobs": [0.0]}\n\udcff', "line 2 is not UTF-8 text"),
        ('{"id": "a\\udc00b", "tokens": [1, 2], "logprobs": [-0.1, -60.0]}', "half of a UTF-16 pair"),
        ('{"id": ' + "[" * 100_000 + "]" * 100_000 + ', "tokens": [1], "logprobs": [0.0]}', "nested too deeply"),
        ('{"tokens": [' + "9" * 5000 + '], "logprobs": [0.0]}', "an integer too long to read"),
    ],
    ids=["type", "length", "json", "missing", "utf8", "surrogate", "deep", "long-integer"],
)
def test_bad_input_is_one_line_naming_the_file_and_field(tmp_path, text, field):
    (tmp_path / "r.jsonl").write_bytes(text.encode("utf-8", "surrogatepass") + b"\n")
    result = CliRunner().invoke(cli, ["response_anomaly", "-i", str(tmp_path / "r.jsonl"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert "r.jsonl" in result.output and field in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_ids_are_shown_without_their_control_characters(tmp_path):
    """An id is printed on the terminal: an OSC sequence would retitle it, and a newline forge a summary line."""
    forged = "x\n1 response(s), none with a finding; report: fake.csv"
    title = "\x1b]0;pwned\x07y"
    records = [{"id": name, "tokens": [7] * 60, "logprobs": [-0.01] * 60} for name in (forged, title)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    result = CliRunner().invoke(cli, ["response_anomaly", "-i", str(tmp_path / "r.jsonl"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    lines = result.output.splitlines()
    assert sum(line.startswith("1 response(s)") for line in lines) == 0 and lines[-1].startswith("2 response(s)")
    assert any(line.startswith("x\\n1 response(s)") for line in lines)
    assert any("\\x1b]0;pwned\\x07y" in line for line in lines)

"""``msprobe response_anomaly``: what went wrong in generated responses, from their own token probabilities."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("response_anomaly")
@click.option(
    "-i",
    "--input",
    "input_path",
    required=True,
    type=click.Path(path_type=Path),
    help="JSON lines, one response each: tokens, logprobs, and optionally entropies and id.",
)
@click.option(
    "-o",
    "--output",
    "output_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Folder for response_anomaly_{timestamp}.csv.",
)
def response_anomaly_command(input_path: Path, output_dir: Path) -> None:
    """Find repetition, entropy collapse, garbled bursts and NaN in each response, with no golden run.

    Prints one line per finding with its token span and writes them all to a CSV; exits 1 when any
    response has a finding, 0 when none has.
    """
    from msprobe.core.compare.report import timestamp
    from msprobe.core.generation.anomaly import response_anomalies, write_report
    from msprobe.core.generation.responses import read_responses

    responses = read_responses(input_path)
    findings = []
    for response in responses:
        for finding in response_anomalies(response.tokens, response.logprobs, response.entropies):
            findings.append((response.name, finding))
            click.echo(f"{response.name}: {finding.line()}")
    report = write_report(findings, output_dir / f"response_anomaly_{timestamp()}.csv")
    flagged = len({name for name, _ in findings})
    verdict = f"{flagged} with a finding" if flagged else "none with a finding"
    click.echo(f"{len(responses)} response(s), {verdict}; report: {report}")
    if flagged:
        raise SystemExit(1)


COMMANDS = [response_anomaly_command]

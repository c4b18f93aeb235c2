"""``msprobe db trend``: where a statistic first goes wrong across steps and ranks, and a page to see it.

Two findings, computed by DuckDB over every matching row of the store:

- the first (step, rank) where an inf or nan is made: the first call, in the order calls ran, whose outputs
  (or parameter gradients) hold one while everything it was given is finite (the diagnosis's rule,
  ``msprobe.core.diagnosis.first_nonfinite``, which the flight recorder answers by too);
- the first (step, rank) whose statistic jumps: its magnitude exceeds
  ``factor`` times the running median of the same tensor's magnitudes on
  the same rank at earlier steps (at least ``MIN_HISTORY`` of them).

"First" means the earliest step, then the earliest call in that step, then
the lowest rank. The page (one self-contained HTML file, like the graph page)
draws, for each matching tensor, a rank-by-step heatmap and a line chart
over steps (the ranks' minimum, median and maximum, and the chosen rank).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from msprobe.core.errors import UsageError
from msprobe.core.files import write_new_text
from msprobe.core.pages import fill, html_text, script_json
from msprobe.core.store.query import connect
from msprobe.core.store.rows import STATISTICS

MIN_HISTORY = 3  # earlier steps a running median needs before a jump is judged
DEFAULT_FACTOR = 10.0
MAX_SERIES = 32  # tensors drawn on one page; the findings cover every match


@dataclass
class Finding:
    kind: str  # "nonfinite" or "jump"
    step: int
    rank: int
    name: str
    io: str
    arg: str
    statistic: str
    value: float | None  # None stands for nan in JSON
    median: float | None = None

    def line(self) -> str:
        where = f"step {self.step}, rank {self.rank}: {self.name} {self.io}.{self.arg} {self.statistic}"
        if self.kind == "nonfinite":
            return f"first non-finite at {where} = {_text(self.value)}"
        return f"first jump at {where} = {_text(self.value)}, {abs(self.value) / self.median:.3g}x its running median"


def _text(value: float | None) -> str:
    return "nan" if value is None or math.isnan(value) else repr(value)


@dataclass
class TrendSummary:
    page: Path
    matched: int  # tensors (name, io, arg) matching the pattern
    drawn: int
    nonfinite: Finding | None
    jump: Finding | None

    def lines(self) -> list[str]:
        found = [finding.line() for finding in (self.nonfinite, self.jump) if finding is not None]
        return found or ["no non-finite value and no jump found"]


def _check(pattern: str, statistics: tuple[str, ...], factor: float) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"-n/--name: '{pattern}' is not a regular expression ({exc})") from None
    unknown = [s for s in statistics if s not in STATISTICS]
    if unknown or not statistics:
        raise UsageError(f"statistic {unknown or statistics}: choose from {', '.join(STATISTICS)}")
    if not factor > 1:
        raise UsageError(f"--factor must be greater than 1, not {factor}")


def _select_matches(connection: Any, pattern: str) -> None:
    """The matching rows, read from the Parquet files once into the table ``matched``."""
    connection.execute(
        "CREATE TEMP TABLE matched AS SELECT step, rank, seq, source, name, io, arg, max, min, mean, norm "
        "FROM stats WHERE regexp_matches(name, $pattern)",
        {"pattern": pattern},
    )


def first_nonfinite(connection: Any, statistics: tuple[str, ...]) -> Finding | None:
    condition = " OR ".join(f"NOT isfinite({s})" for s in STATISTICS)
    made = connection.execute(
        f"""
        WITH calls AS (
            SELECT step, rank, name, min(seq) AS seq,
                   bool_or(io IN ('output', 'parameters_grad') AND ({condition})) AS makes,
                   bool_or(io IN ('input', 'parameters') AND ({condition})) AS given
            FROM matched GROUP BY step, rank, name
        )
        SELECT step, rank, name FROM calls WHERE makes AND NOT coalesce(given, false)
        ORDER BY step, seq, rank LIMIT 1
        """
    ).fetchone()
    if made is None:
        return None
    row = _nonfinite_output(connection, made, statistics)
    if row is None:  # the inf or nan is in a statistic not asked for: name the call all the same
        statistics = STATISTICS
        row = _nonfinite_output(connection, made, statistics)
    step, rank, name, io, arg, *values = row
    statistic, value = next((s, v) for s, v in zip(statistics, values) if v is not None and not math.isfinite(v))
    return Finding("nonfinite", int(step), int(rank), name, io, arg, statistic, None if math.isnan(value) else value)


def _nonfinite_output(connection: Any, call: tuple, statistics: tuple[str, ...]) -> tuple | None:
    """The first output row of ``call`` (step, rank, name) with an inf or nan among ``statistics``."""
    wanted = " OR ".join(f"NOT isfinite({s})" for s in statistics)
    return connection.execute(
        f"SELECT step, rank, name, io, arg, {', '.join(statistics)} FROM matched "
        f"WHERE step = $step AND rank = $rank AND name = $name AND io IN ('output', 'parameters_grad') "
        f"AND ({wanted}) ORDER BY seq LIMIT 1",
        {"step": call[0], "rank": call[1], "name": call[2]},
    ).fetchone()


def first_jump(connection: Any, statistics: tuple[str, ...], factor: float) -> Finding | None:
    found: list[tuple] = []
    window = "PARTITION BY source, name, io, arg, rank ORDER BY step ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
    for statistic in statistics:
        row = connection.execute(
            f"""
            WITH history AS (
                SELECT step, rank, seq, name, io, arg, {statistic} AS value,
                       median(abs({statistic})) OVER ({window}) AS running,
                       count(*) OVER ({window}) AS earlier
                FROM matched WHERE isfinite({statistic})
            )
            SELECT step, seq, rank, name, io, arg, value, running FROM history
            WHERE earlier >= {MIN_HISTORY} AND running > 0 AND abs(value) > $factor * running
            ORDER BY step, seq, rank LIMIT 1
            """,
            {"factor": factor},
        ).fetchone()
        if row is not None:
            found.append((*row[:3], statistic, row))
    if not found:
        return None
    *_, statistic, (step, _seq, rank, name, io, arg, value, running) = min(found)
    return Finding("jump", int(step), int(rank), name, io, arg, statistic, float(value), float(running))


def _series(connection: Any, statistics: tuple[str, ...], limit: int) -> tuple[int, list, list, list]:
    """The first ``limit`` matching tensors in call order, each a rank x step matrix per statistic."""
    keys = connection.execute(
        "SELECT name, io, arg FROM matched GROUP BY name, io, arg ORDER BY min(step), min(seq), name, io, arg"
    ).fetchall()
    steps = [r[0] for r in connection.execute("SELECT DISTINCT step FROM stats ORDER BY step").fetchall()]
    ranks = [r[0] for r in connection.execute("SELECT DISTINCT rank FROM stats ORDER BY rank").fetchall()]
    step_at, rank_at = {s: i for i, s in enumerate(steps)}, {r: i for i, r in enumerate(ranks)}
    chosen = {key: index for index, key in enumerate(keys[:limit])}
    series = [
        {"name": name, "io": io, "arg": arg, "values": {s: [[None] * len(steps) for _ in ranks] for s in statistics}}
        for name, io, arg in chosen
    ]
    connection.register("chosen", pd.DataFrame(list(chosen), columns=["name", "io", "arg"], dtype=object))
    rows = connection.execute(
        f"SELECT name, io, arg, step, rank, {', '.join(statistics)} FROM matched JOIN chosen USING (name, io, arg)"
    ).fetchall()
    for name, io, arg, step, rank, *values in rows:
        matrices = series[chosen[(name, io, arg)]]["values"]
        for statistic, value in zip(statistics, values):
            matrices[statistic][rank_at[rank]][step_at[step]] = _json_value(value)
    return len(keys), steps, ranks, series


def _json_value(value: float | None) -> float | str | None:
    """JSON has no inf or nan: they travel as text, which the page draws as non-finite."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def write_trend(
    store: str | Path,
    output: str | Path,
    pattern: str = ".*",
    statistics: tuple[str, ...] = ("norm",),
    factor: float = DEFAULT_FACTOR,
    max_series: int = MAX_SERIES,
) -> TrendSummary:
    _check(pattern, statistics, factor)
    connection = connect(store)
    try:
        _select_matches(connection, pattern)
        nonfinite = first_nonfinite(connection, statistics)
        jump = first_jump(connection, statistics, factor)
        matched, steps, ranks, series = _series(connection, statistics, max_series)
    finally:
        connection.close()
    if not matched:
        raise UsageError(f"no tensor in {store} has a name matching '{pattern}'")
    data = {
        "title": f"msprobe trend: {pattern}",
        "info": f"{matched} tensor(s) match, {len(series)} drawn; {len(steps)} step(s), {len(ranks)} rank(s)",
        "statistics": list(statistics),
        "factor": factor,
        "steps": steps,
        "ranks": ranks,
        "series": series,
        "findings": [
            {**asdict(f), "value": _json_value(f.value), "text": f.line()} for f in (nonfinite, jump) if f is not None
        ],
    }
    output = Path(output)
    write_new_text(output, _page(data))
    return TrendSummary(output, matched, len(series), nonfinite, jump)


def _page(data: dict[str, Any]) -> str:
    fields = {"TITLE": html_text(data["title"]), "DATA": script_json(data, compact=True)}
    return fill("msprobe.core.store", "assets/trend.html", fields)

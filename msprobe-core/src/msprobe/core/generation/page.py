"""The per-token plot of a generation compare: one chart per request, drawn here as inline SVG.

Each chart shows, token by token, how far the two runs' log-probabilities
of the chosen token are apart (log scale, the tolerance as a dashed line)
and the top-k overlap where the responses carry candidates, with the first
token whose log-probabilities part ways and the first whose chosen tokens
differ marked. The page needs no script and nothing from the network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from msprobe.core.pages import html_text

WIDTH, HEIGHT, LEFT, TOP, BOTTOM = 720, 150, 56, 12, 28
FLOOR = 1e-9  # a difference below this is drawn at the chart's floor (equal within float64's reach)
MAX_CHARTS = 200  # requests drawn; the CSV holds every one


def _gap_height(gap: float, low: float, high: float) -> float:
    """Where a difference sits on the chart's log scale (its y coordinate)."""
    value = math.log10(min(max(gap, FLOOR), 10**high))
    return TOP + (HEIGHT - TOP - BOTTOM) * (high - value) / (high - low)


def _chart(answer: Any, rows: Sequence[Sequence[Any]]) -> str:
    positions = [row[1] for row in rows]
    gaps = [row[6] if isinstance(row[6], (int, float)) else None for row in rows]
    overlaps = [row[7] if isinstance(row[7], (int, float)) else None for row in rows]
    finite = [gap for gap in gaps if gap is not None and math.isfinite(gap) and gap > 0]
    low = math.floor(math.log10(FLOOR))
    high = max(0, math.ceil(math.log10(max(finite)))) if finite else 0
    span = max(len(positions) - 1, 1)

    def x(position: int) -> float:
        return LEFT + (WIDTH - LEFT - 8) * position / span

    plot_bottom = HEIGHT - BOTTOM
    parts = [f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img">']
    for decade in range(low, high + 1, 3):  # grid lines and labels every 1000x
        y = _gap_height(10.0**decade, low, high)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 4}" y="{y + 4:.1f}" class="axis" text-anchor="end">1e{decade}</text>')
    tolerance_y = _gap_height(answer.tolerance, low, high)
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - 8}" y1="{tolerance_y:.1f}" y2="{tolerance_y:.1f}" class="tol"/>')
    for marked, css in ((answer.first_logprob, "first-logprob"), (answer.first_token, "first-token")):
        if marked is not None:
            parts.append(
                f'<line x1="{x(marked):.1f}" x2="{x(marked):.1f}" y1="{TOP}" y2="{plot_bottom}" class="{css}"/>'
            )
    series = (
        ("gap", gaps, lambda gap: _gap_height(gap, low, high)),  # an infinite gap is drawn at the top
        ("overlap", overlaps, lambda overlap: plot_bottom - (plot_bottom - TOP) * overlap),
    )
    for css, values, height in series:
        points = [f"{x(p):.1f},{height(v):.1f}" for p, v in zip(positions, values) if v is not None]
        if points:
            parts.append(f'<polyline points="{" ".join(points)}" class="{css}"/>')
    for position in range(0, len(positions), max(1, len(positions) // 8)):
        parts.append(
            f'<text x="{x(position):.1f}" y="{HEIGHT - 8}" class="axis" text-anchor="middle">{position}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 15px; margin: 22px 0 2px; } p.line { margin: 2px 0 6px; }
.grid { stroke: #e4e4e4; } .axis { font-size: 10px; fill: #777; }
.tol { stroke: #999; stroke-dasharray: 4 3; } .gap { fill: none; stroke: #1f5fbf; stroke-width: 1.5; }
.overlap { fill: none; stroke: #2a9d5c; stroke-width: 1; opacity: .7; }
.first-logprob { stroke: #e08a00; stroke-width: 2; } .first-token { stroke: #c62828; stroke-width: 2; }
.key span { margin-right: 16px; } .key i { display: inline-block; width: 18px; height: 3px; vertical-align: middle; }
"""


def write_token_page(path: Path, answers: Sequence[Any], rows: Sequence[Sequence[Any]], info: str) -> Path:
    """The page beside the CSV: a chart per request (the first ``MAX_CHARTS``), written whole or not at all."""
    from msprobe.core.files import write_new_text

    by_request: dict[str, list[Sequence[Any]]] = {}
    for row in rows:
        by_request.setdefault(str(row[0]), []).append(row)
    sections = []
    for answer in answers[:MAX_CHARTS]:
        chart = _chart(answer, by_request.get(answer.response, []))
        sections.append(f"<h2>{html_text(answer.response)}</h2><p class=line>{html_text(answer.line())}</p>{chart}")
    if len(answers) > MAX_CHARTS:
        sections.append(f"<p>{len(answers) - MAX_CHARTS} more requests are in the CSV.</p>")
    key = (
        '<p class=key><span><i style="background:#1f5fbf"></i> |logprob difference| (log scale)</span>'
        '<span><i style="background:#999"></i> tolerance</span>'
        '<span><i style="background:#2a9d5c"></i> top-k overlap (0 to 1)</span>'
        '<span><i style="background:#e08a00"></i> first logprob divergence</span>'
        '<span><i style="background:#c62828"></i> first token divergence</span></p>'
    )
    page = (
        f"<!doctype html><html><head><meta charset=utf-8><title>msprobe: generation compare</title>"
        f"<style>{_STYLE}</style></head><body><h1>Generation compare</h1><p>{html_text(info)}</p>{key}"
        + "".join(sections)
        + "</body></html>"
    )
    return write_new_text(path, page)

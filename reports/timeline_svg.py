"""Draw a scenario's timeline as inline SVG: a lane per attempt, provider calls beneath."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from scenarios.model import MarkKind, TimelineMark

WIDTH = 960  # px, the whole drawing
LABEL_WIDTH = 250  # px, the lane names on the left
LANE_HEIGHT = 26  # px
TOP = 30  # px above the first lane (the time axis labels)
LEGEND_HEIGHT = 34  # px below the last lane
RIGHT_PAD = 70  # px so end labels ("lost") stay inside
PAD_FRACTION = 0.04  # of the time span, left of the first mark

#: Bar colour of an attempt lane by how it ended.
OUTCOME_COLOURS = {
    MarkKind.WON: "#2e9d4d",
    MarkKind.LOST: "#e08a1e",
    MarkKind.TIMED_OUT: "#8e44ad",
    MarkKind.FAILED: "#c0392b",
    MarkKind.CANCELLED: "#7f8c8d",
}
CALL_COLOUR = "#5b7fa6"
RUNNING_COLOUR = "#9fb6cd"

LEGEND = (
    (MarkKind.SENT, "sent"),
    (MarkKind.FINISHED, "finished"),
    (MarkKind.WON, "won"),
    (MarkKind.LOST, "lost"),
    (MarkKind.TIMED_OUT, "timed out / unknown"),
    (MarkKind.FAILED, "failed"),
    (MarkKind.CANCELLED, "cancelled"),
    (MarkKind.CALL_RECEIVED, "provider call"),
    (MarkKind.ACTION, "scenario action"),
)


def _lane_rank(lane: str) -> tuple[int, str]:
    if lane == "scenario":
        return (0, "")
    if " call #" in f" {lane}":
        return (3, _natural(lane))
    if " attempt " in f" {lane}":
        return (1, _natural(lane))
    return (2, _natural(lane))


def _natural(text: str) -> str:
    return "".join(part.zfill(6) if part.isdigit() else part for part in _split_digits(text))


def _split_digits(text: str) -> list[str]:
    parts: list[str] = []
    for ch in text:
        if parts and parts[-1][-1].isdigit() == ch.isdigit():
            parts[-1] += ch
        else:
            parts.append(ch)
    return parts


def _nice_step(span: float) -> float:
    raw = span / 8 if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return float(factor * power)
    return float(10 * power)


def _glyph(kind: MarkKind, x: float, y: float) -> str:
    """Return the SVG shape of one mark kind centred on (x, y)."""
    if kind is MarkKind.SENT:
        return (
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="#fff" stroke="#222" stroke-width="2"/>'
        )
    if kind is MarkKind.FINISHED:
        return (
            f'<line x1="{x:.1f}" y1="{y - 8:.1f}" x2="{x:.1f}" y2="{y + 8:.1f}" '
            f'stroke="#222" stroke-width="2"/>'
        )
    if kind is MarkKind.WON:
        pts = " ".join(
            f"{x + r * math.sin(a):.1f},{y - r * math.cos(a):.1f}"
            for i in range(10)
            for r, a in [((8 if i % 2 == 0 else 3.5), i * math.pi / 5)]
        )
        return f'<polygon points="{pts}" fill="{OUTCOME_COLOURS[kind]}" stroke="#145a2a"/>'
    if kind is MarkKind.LOST:
        c = OUTCOME_COLOURS[kind]
        return (
            f'<path d="M{x - 6:.1f},{y - 6:.1f} L{x + 6:.1f},{y + 6:.1f} '
            f'M{x - 6:.1f},{y + 6:.1f} L{x + 6:.1f},{y - 6:.1f}" '
            f'stroke="{c}" stroke-width="3"/>'
        )
    if kind is MarkKind.TIMED_OUT:
        return (
            f'<polygon points="{x:.1f},{y - 7:.1f} {x + 7:.1f},{y:.1f} {x:.1f},{y + 7:.1f} '
            f'{x - 7:.1f},{y:.1f}" fill="{OUTCOME_COLOURS[kind]}"/>'
        )
    if kind is MarkKind.FAILED:
        return (
            f'<rect x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" '
            f'fill="{OUTCOME_COLOURS[kind]}"/>'
        )
    if kind is MarkKind.CANCELLED:
        return (
            f'<line x1="{x - 6:.1f}" y1="{y + 6:.1f}" x2="{x + 6:.1f}" y2="{y - 6:.1f}" '
            f'stroke="{OUTCOME_COLOURS[kind]}" stroke-width="3"/>'
        )
    if kind in (MarkKind.CALL_RECEIVED, MarkKind.CALL_ENDED):
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{CALL_COLOUR}"/>'
    if kind is MarkKind.ACTION:
        return (
            f'<polygon points="{x - 5:.1f},{y - 7:.1f} {x + 5:.1f},{y - 7:.1f} '
            f'{x:.1f},{y + 2:.1f}" fill="#34495e"/>'
        )
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#95a5a6"/>'


_END_LABELS = {
    MarkKind.WON: "won",
    MarkKind.LOST: "lost",
    MarkKind.TIMED_OUT: "unknown",
    MarkKind.FAILED: "failed",
    MarkKind.CANCELLED: "cancelled",
}


def render_timeline(marks: Sequence[TimelineMark], title: str = "") -> str:
    """Return one ``<svg>`` element drawing ``marks``; an empty timeline says so."""
    # Each group (the scenario, attempts, the rest, provider calls) in the order its lanes
    # began: "after attempt 1" is drawn below "before attempt 1", as it happened.
    began: dict[str, float] = {}
    for m in marks:
        began[m.lane] = min(m.at, began.get(m.lane, m.at))
    lanes = sorted(began, key=lambda lane: (_lane_rank(lane)[0], began[lane], _lane_rank(lane)))
    height = TOP + max(len(lanes), 1) * LANE_HEIGHT + LEGEND_HEIGHT
    label = escape(title or "timeline")
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img" '
        f'aria-label="{label}" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{label}</title>",
        f'<rect width="{WIDTH}" height="{height}" fill="#fcfcfc"/>',
    ]
    if not marks:
        out.append(f'<text x="12" y="{TOP + 16}" fill="#666">no timeline recorded</text>')
        out.append("</svg>")
        return "\n".join(out)
    # The axis starts at the first mark: process start-up before it is not worth the width.
    first, end = min(m.at for m in marks), max(m.at for m in marks)
    start = max(0.0, first - max(end - first, 0.5) * PAD_FRACTION)
    span = max(end - start, 0.5)
    plot = WIDTH - LABEL_WIDTH - RIGHT_PAD

    def x_of(t: float) -> float:
        return LABEL_WIDTH + (t - start) / span * plot

    step = _nice_step(span)
    tick = math.ceil(start / step) * step
    while tick <= end + 1e-9:
        x = x_of(tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" '
            f'y2="{TOP + len(lanes) * LANE_HEIGHT}" stroke="#e4e4e4"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{TOP - 10}" text-anchor="middle" fill="#555">{tick:g}s</text>'
        )
        tick += step
    for index, lane in enumerate(lanes):
        y = TOP + index * LANE_HEIGHT + LANE_HEIGHT / 2
        in_lane = sorted((m for m in marks if m.lane == lane), key=lambda m: m.at)
        kind_class = (
            "call"
            if _lane_rank(lane)[0] == 3
            else ("attempt" if _lane_rank(lane)[0] == 1 else "other")
        )
        out.append(f'<g class="lane lane-{kind_class}" data-lane="{escape(lane)}">')
        if index % 2 == 0:
            out.append(
                f'<rect x="0" y="{y - LANE_HEIGHT / 2:.1f}" width="{WIDTH}" '
                f'height="{LANE_HEIGHT}" fill="#f3f5f8"/>'
            )
        out.append(f'<text x="8" y="{y + 4:.1f}" fill="#222">{escape(lane[:40])}</text>')
        out.extend(_bar(in_lane, kind_class, x_of, y))
        for mark in in_lane:
            tip = escape(f"{mark.at:.3f}s {mark.kind.value} {mark.label}".strip())
            out.append(
                f'<g class="mark mark-{mark.kind.value}"><title>{tip}</title>'
                f"{_glyph(mark.kind, x_of(mark.at), y)}</g>"
            )
        out.append("</g>")
    out.extend(_legend(height))
    out.append("</svg>")
    return "\n".join(out)


def _bar(
    in_lane: list[TimelineMark], kind_class: str, x_of: Callable[[float], float], y: float
) -> list[str]:
    if kind_class == "other" or len(in_lane) < 1:
        return []
    first, last = in_lane[0].at, in_lane[-1].at
    if kind_class == "call":
        colour, text = CALL_COLOUR, ""
    else:
        outcome = next((m.kind for m in reversed(in_lane) if m.kind in OUTCOME_COLOURS), None)
        colour = OUTCOME_COLOURS.get(outcome, RUNNING_COLOUR) if outcome else RUNNING_COLOUR
        text = _END_LABELS.get(outcome, "") if outcome else ""
    x1, x2 = x_of(first), max(x_of(last), x_of(first) + 2)
    parts = [
        f'<rect class="bar" x="{x1:.1f}" y="{y - 4:.1f}" width="{x2 - x1:.1f}" height="8" '
        f'rx="3" fill="{colour}" opacity="0.55"/>'
    ]
    if text:
        parts.append(
            f'<text x="{x2 + 12:.1f}" y="{y + 4:.1f}" fill="{colour}" '
            f'font-weight="bold">{text}</text>'
        )
    return parts


def _legend(height: int) -> list[str]:
    y = height - LEGEND_HEIGHT / 2
    x = 12.0
    parts = ['<g class="legend">']
    for kind, text in LEGEND:
        parts.append(_glyph(kind, x + 6, y))
        parts.append(f'<text x="{x + 16:.1f}" y="{y + 4:.1f}" fill="#333">{text}</text>')
        x += 22 + 6.2 * len(text)
    parts.append("</g>")
    return parts

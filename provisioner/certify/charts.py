"""Charts of a certification that stay readable from 2 to 1,000 nodes, as inline SVG: one mark per
node on a strip against the fleet median and the thresholds, the outliers named; the pair rounds
as a matrix of partner busbw. Written directly (a few bytes per node), no plotting library."""

from __future__ import annotations

import html
import statistics
from typing import Any

WIDTH, LEFT, RIGHT = 760, 20, 20
REFERENCE_COLOUR, BAD_COLOUR, GOOD_COLOUR, THRESHOLD_COLOUR = "#31708f", "#c9302c", "#3c763d", "#8a6d3b"
OUTLIERS_NAMED = 12
TIPS_UP_TO = 300  # subjects: above this, only the bad ones carry a tooltip


def _x(value: float, top: float) -> float:
    return LEFT + (WIDTH - LEFT - RIGHT) * (value / top if top else 0.0)


def _ticks(top: float) -> list[float]:
    """About five round ticks from 0 to top."""
    if top <= 0:
        return [0.0]
    step = 10 ** len(str(int(top / 5))) / 10 if top >= 5 else 10 ** -1
    for factor in (1, 2, 2.5, 5, 10):
        if top / (step * factor) <= 6:
            step *= factor
            break
    return [round(step * i, 6) for i in range(int(top / step) + 1)]


def against_reference(title: str, values: dict[str, float], unit: str, percent: float, *,
                      reference: float | None = None, reference_label: str = "fleet median",
                      threshold: float | None = None, above: bool = False) -> str:
    """A strip of the subjects against a reference (their median unless given) and the limit
    percent below it (above it, for times), and the threshold where there is one: the subjects
    past the limit are the bad ones."""
    if not values:
        return ""
    reference = statistics.median(values.values()) if reference is None else reference
    limit = reference * (1 + percent / 100 if above else 1 - percent / 100)
    lines = [(reference_label, reference, REFERENCE_COLOUR),
             (f"{percent:g}% {'above' if above else 'below'}", limit, BAD_COLOUR)]
    if threshold is not None:
        lines.append(("threshold", threshold, THRESHOLD_COLOUR))
    return strip(title, values, unit, lines, limit, low_is_bad=not above)


def strip(title: str, values: dict[str, float], unit: str, lines: list[tuple[str, float, str]],
          limit: float, low_is_bad: bool = True) -> str:
    """One dot per subject along a value axis; lines (label, value, colour) drawn across (the fleet
    median, the floors); subjects past the limit are red and the worst named."""
    if not values:
        return ""
    top = max([*values.values(), *(value for _, value, _ in lines)]) * 1.08 or 1.0

    def bad(value: float) -> bool:
        return value < limit if low_is_bad else value > limit

    height, base = 150, 110
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
             f'height="{height}" role="img"><title>{html.escape(title)}</title>',
             f'<text x="{LEFT}" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>',
             f'<line x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}" stroke="#888"/>']
    for tick in _ticks(top):
        x = _x(tick, top)
        parts.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" stroke="#888"/>'
                     f'<text x="{x:.1f}" y="{base + 16}" font-size="10" text-anchor="middle">{tick:g}</text>')
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{base + 30}" font-size="10" text-anchor="end">{html.escape(unit)}'
                 "</text>")
    for number, (label, value, colour) in enumerate(lines):
        x = _x(value, top)
        # the label on the side with room: left of lines near the right edge
        anchor, offset = ("end", -3) if x > WIDTH - 140 else ("start", 3)
        parts.append(f'<line x1="{x:.1f}" y1="24" x2="{x:.1f}" y2="{base}" stroke="{colour}" stroke-width="1.5" '
                     f'stroke-dasharray="{"" if number == 0 else "5,3"}"/>'
                     f'<text x="{x + offset:.1f}" y="{32 + 11 * number}" font-size="10" fill="{colour}" '
                     f'text-anchor="{anchor}">{html.escape(label)} {value:.3g}</text>')
    ordered = sorted(values.items(), key=lambda item: item[1], reverse=not low_is_bad)
    named = {name for name, value in ordered[:OUTLIERS_NAMED] if bad(value)}
    for index, (name, value) in enumerate(sorted(values.items())):
        y = 60 + (index * 37) % 44  # spread the dots over a band so that equal values stay visible
        colour = BAD_COLOUR if bad(value) else GOOD_COLOUR
        tip = (f"<title>{html.escape(name)}: {value:.4g} {html.escape(unit)}</title>"
               if bad(value) or len(values) <= TIPS_UP_TO else "")
        parts.append(f'<circle cx="{_x(value, top):.1f}" cy="{y}" r="{4 if bad(value) else 2.5}" fill="{colour}" '
                     f'fill-opacity="0.7">{tip}</circle>')
        if name in named:
            parts.append(f'<text x="{_x(value, top) + 6:.1f}" y="{y + 3}" font-size="10" fill="{BAD_COLOUR}">'
                         f'{html.escape(name)}</text>')
    hidden = sum(1 for value in values.values() if bad(value)) - len(named)
    if hidden > 0:
        past = "below the floor" if low_is_bad else "above the limit"
        parts.append(f'<text x="{WIDTH - RIGHT}" y="14" font-size="10" text-anchor="end" fill="{BAD_COLOUR}">'
                     f'and {hidden} more {past} (see the table)</text>')
    parts.append("</svg>")
    return "".join(parts)


def pair_matrix(title: str, pairs: list[dict[str, Any]], floor: float | None, unit: str) -> str:
    """Rows: the pair rounds; columns: the nodes; each cell the busbw of the node's pair in that
    round, green at or above the floor, red below, grey where the node sat the round out."""
    if not pairs:
        return ""
    rounds = sorted({pair["round"] for pair in pairs}, key=lambda name: [p["round"] for p in pairs].index(name))
    nodes = sorted({node for pair in pairs for node in pair["nodes"]})
    cell = max(2.0, min(18.0, (WIDTH - 170) / len(nodes)))
    label_width, row_height = 160, 18
    height = 40 + row_height * len(rounds)
    width = label_width + cell * len(nodes) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height}" width="{width:.0f}" '
             f'height="{height}" role="img"><title>{html.escape(title)}</title>',
             f'<text x="4" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    if cell >= 10:
        for column, node in enumerate(nodes):
            parts.append(f'<text x="{label_width + column * cell + cell / 2:.1f}" y="30" font-size="8" '
                         f'text-anchor="middle">{html.escape(node[-3:])}</text>')
    else:
        parts.append(f'<text x="{label_width}" y="30" font-size="10">{len(nodes)} nodes, by name</text>')
    top = max(pair["busbw"] for pair in pairs) or 1.0
    for row, name in enumerate(rounds):
        y = 36 + row * row_height
        parts.append(f'<text x="4" y="{y + 12}" font-size="10">{html.escape(name)}</text>')
        for pair in (p for p in pairs if p["round"] == name):
            low = floor is not None and pair["busbw"] < floor
            shade = 0.35 + 0.65 * pair["busbw"] / top
            colour = f"rgba(201,48,44,{shade:.2f})" if low else f"rgba(60,118,61,{shade:.2f})"
            a, b = pair["nodes"]
            for node, partner in ((a, b), (b, a)):
                x = label_width + nodes.index(node) * cell
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{max(cell - 1, 1):.1f}" height="{row_height - 2}" '
                             f'fill="{colour}"><title>{html.escape(node)} with {html.escape(partner)}: '
                             f'{pair["busbw"]:.4g} {html.escape(unit)}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)

"""The class report's two kinds of figure, as inline SVG: a bar chart of scores and the
item scatter plot. Colours come from the page's style sheet (classes ``bar``, ``ink``,
``grid``, ``flag``), so that the figures follow its light or dark colours; each figure
carries a text alternative that states every number it shows."""

from __future__ import annotations

import math
from html import escape

TOLERANCE = 0.006  # scores are rounded to 0.01 point: a score within this of a multiple is that multiple


def _fmt(x: float) -> str:
    return f"{round(x, 2):g}"


def _svg(w: int, h: int, alt: str, parts: list[str]) -> str:
    return (f'<svg class="figure" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'role="img" aria-label="{escape(alt)}" font-family="sans-serif" font-size="11" '
            f'style="max-width: {w}px">' + "".join(parts) + "</svg>")


def histogram(values: list[float], top: float, *, label: str, bins: int = 10,
              divisions: int | None = None) -> tuple[str, str]:
    """(SVG, text alternative) of a bar chart of ``values`` in [0, top]: one bar per possible
    score when every value is a multiple of top / ``divisions`` (an exercise's points split
    over its checks; by default the fewest divisions up to 12 that fit the values), else bins
    of a round width. The text alternative gives every bar's count."""
    def fits(n):
        return all(abs(v - top * round(v * n / top) / n) < TOLERANCE for v in values)

    steps = ([divisions] if divisions and fits(divisions) else [n for n in range(1, 13) if fits(n)]) if top else []
    if steps:  # one bar per multiple of top / n, empty ones included
        edges = [(top * k / steps[0], top * k / steps[0]) for k in range(steps[0] + 1)]
        names = [_fmt(lo) for lo, _ in edges]
    else:  # bins of a round width, at most ``bins`` + 2 of them
        width = next(w * 10 ** e for e in range(-1, 8) for w in (1, 2, 2.5, 5)
                     if math.ceil(top / (w * 10 ** e)) <= bins + 2)
        edges = [(k * width, min(top, (k + 1) * width)) for k in range(math.ceil(top / width))]
        names = [f"{_fmt(lo)}-{_fmt(hi)}" for lo, hi in edges]
    counts = []
    for k, (lo, hi) in enumerate(edges):
        if lo == hi:
            counts.append(sum(abs(v - lo) < TOLERANCE for v in values))
        else:
            last = k == len(edges) - 1
            counts.append(sum(lo - 1e-9 <= v < hi - 1e-9 or (last and abs(v - hi) < 1e-9) for v in values))
    alt = (f"Bar chart of {label}, {len(values)} students: "
           + "; ".join(f"{name} points: {c}" for name, c in zip(names, counts)) + ".")
    w, h, left, bottom, top_pad = 360, 150, 34, 30, 10
    peak = max(counts) if counts and max(counts) else 1
    slot = (w - left - 8) / max(1, len(counts))
    plot_h = h - bottom - top_pad
    parts = []
    for tick in sorted({0, peak // 2, peak}):
        y = top_pad + plot_h * (1 - tick / peak)
        parts.append(f'<line class="grid" x1="{left}" x2="{w - 8}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="ink" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{tick}</text>')
    every = max(1, math.ceil(len(names) * 34 / (w - left)))  # a label every so many bars, so that none overlap
    for k, (name, c) in enumerate(zip(names, counts)):
        bh = plot_h * c / peak
        x = left + k * slot + slot * 0.12
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{top_pad + plot_h - bh:.1f}" width="{slot * 0.76:.1f}" '
                     f'height="{bh:.1f}"/>')
        if k % every == 0:
            parts.append(f'<text class="ink" x="{x + slot * 0.38:.1f}" y="{h - bottom + 14}" '
                         f'text-anchor="middle">{escape(name)}</text>')
    parts.append(f'<text class="ink" x="{w / 2:.0f}" y="{h - 3}" text-anchor="middle">points</text>')
    return _svg(w, h, alt, parts), alt


CHAR_W, LINE_H = 7.0, 12.0  # the size of a label's character at font-size 11, with a margin


def _labels(texts: list[str], points: list[tuple[float, float]], box) -> list[tuple[float, float, str]]:
    """Where to write each mark's label (its centre), so that no two labels overlap and none
    covers a mark: the nearest free place around the mark, further out (with a line to it)
    where the marks crowd. Labels are placed in order of crowding, the most crowded first."""
    x0, y0, x1, y1 = box
    placed: list[tuple[float, float, float, float]] = []

    def free(cx, cy, wd):
        a = (cx - wd / 2, cy - LINE_H / 2, cx + wd / 2, cy + LINE_H / 2)
        if a[0] < x0 or a[2] > x1 or a[1] < y0 or a[3] > y1:
            return False
        if any(a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3] for b in placed):
            return False
        return not any(a[0] - 4 < px < a[2] + 4 and a[1] - 4 < py < a[3] + 4 for px, py in points)

    crowd = [sum(math.hypot(px - x, py - y) < 30 for px, py in points) for x, y in points]
    order = sorted(range(len(points)), key=lambda k: (-crowd[k], points[k]))
    out: dict[int, tuple[float, float, str]] = {}
    for k in order:
        x, y = points[k]
        wd = CHAR_W * len(texts[k]) + 2
        spot = None
        for radius in range(9, 121, 5):
            for step in range(16):
                angle = -math.pi / 4 + step * math.pi / 8
                cx, cy = x + radius * math.cos(angle), y - radius * math.sin(angle)
                if free(cx, cy, wd):
                    spot = (cx, cy)
                    break
            if spot:
                break
        spot = spot or (x + 9, y - 9)
        placed.append((spot[0] - wd / 2, spot[1] - LINE_H / 2, spot[0] + wd / 2, spot[1] + LINE_H / 2))
        out[k] = (spot[0], spot[1], texts[k])
    return [out[k] for k in range(len(points))]


def scatter(items: list[tuple[int, str, float, float | None, bool]], threshold: float) -> tuple[str, str]:
    """(SVG, text alternative) of every exercise's difficulty (mean score, share of the points)
    across and discrimination up, each mark labelled with the exercise's number; ``items``:
    (number, id, difficulty, discrimination or None, flagged). Flagged exercises are squares
    in the flag colour; a dashed line marks ``threshold``."""
    w, h, left, bottom, top_pad, right = 440, 270, 44, 36, 12, 30
    plot_w, plot_h = w - left - right, h - bottom - top_pad
    X = lambda d: left + plot_w * min(1.0, max(0.0, d))  # noqa: E731 - difficulty in [0, 1]
    Y = lambda r: top_pad + plot_h * (1 - (r + 1) / 2)  # noqa: E731 - correlation in [-1, 1]
    parts = []
    for r in (-1, -0.5, 0, 0.5, 1):
        parts.append(f'<line class="grid" x1="{left}" x2="{w - right}" y1="{Y(r):.1f}" y2="{Y(r):.1f}"/>')
        parts.append(f'<text class="ink" x="{left - 4}" y="{Y(r) + 4:.1f}" text-anchor="end">{r * 100:.0f}%</text>')
    for d in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<text class="ink" x="{X(d):.1f}" y="{h - bottom + 14}" '
                     f'text-anchor="middle">{d * 100:.0f}%</text>')
    parts.append(f'<line class="flag-line" x1="{left}" x2="{w - right}" y1="{Y(threshold):.1f}" '
                 f'y2="{Y(threshold):.1f}" stroke-dasharray="4 3"/>')
    points = [(X(difficulty), Y(r if r is not None else 0.0)) for _, _, difficulty, r, _ in items]
    for (number, _, _, _, flagged), (x, y) in zip(items, points):
        parts.append(f'<rect class="flag" x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8"/>' if flagged
                     else f'<circle class="bar" cx="{x:.1f}" cy="{y:.1f}" r="4"/>')
    for (x, y), (tx, ty, text) in zip(points, _labels([str(i[0]) for i in items], points, (left, top_pad, w - 4, h - bottom))):
        if math.hypot(tx - x, ty - y) > 14:  # far from its mark: a line says whose it is
            parts.append(f'<line class="grid" x1="{x:.1f}" y1="{y:.1f}" x2="{tx:.1f}" y2="{ty:.1f}"/>')
        parts.append(f'<text class="ink" x="{tx:.1f}" y="{ty + 4:.1f}" text-anchor="middle">{text}</text>')
    parts.append(f'<text class="ink" x="{left + plot_w / 2:.0f}" y="{h - 4}" text-anchor="middle">'
                 'mean score (difficulty)</text>')
    parts.append(f'<text class="ink" x="12" y="{top_pad + plot_h / 2:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {top_pad + plot_h / 2:.0f})">discrimination</text>')

    def describe(item):
        number, eid, difficulty, r, flagged = item
        disc = "undefined" if r is None else f"{round(100 * r)}%"
        flag = ", flagged" if flagged else ""
        return f"{number} {eid}: mean {round(100 * difficulty)}%, discrimination {disc}{flag}"

    alt = (f"Scatter plot of the {len(items)} exercises, each marked with its number: mean score (difficulty) "
           f"across, discrimination up, a dashed line at {threshold:.0%}; flagged ones are squares. "
           + "; ".join(describe(i) for i in items) + ".")
    return _svg(w, h, alt, parts), alt

"""An interactive attention figure: one grid per head, a slider for the head, a read-out.

`attention_explorer(weights, tokens)` returns an `AttentionExplorer`. Shown in a notebook or
on the website it is a small HTML widget (inline SVG and the few dozen lines of JavaScript in
explorer.js, no library, no network); where HTML cannot be shown (a PDF export, a plain-text viewer) the same
output carries a PNG of every head. The HTML is a contract other tools rely on:

- an element with class ``attention-explorer`` holding a ``<script type="application/json">``
  with ``{"tokens": [...], "heads": [...]}``: the weights as nested lists, heads x Tq x Tk,
  plus ``"query_tokens"`` when the queries are not the keys (cross-attention);
- an ``<input type="range">`` that selects the head (only when there is more than one);
- one SVG ``<rect>`` per weight of the shown head, with ``data-i`` (query) and ``data-j`` (key);
  the slider recolours these cells;
- an element with class ``readout`` whose text, while a cell is hovered (or chosen with the
  arrow keys), ends with that cell's weight for the selected head to 4 decimals:
  ``head 2: cat -> sat = 0.4312``.

Rows are queries, columns keys: row i shows where query i looks. Colours run from dark
purple (weight 0) to yellow (weight 1) on a fixed 0..1 scale, so heads compare directly.
"""

from __future__ import annotations

import html
import io
import json
import math
import uuid
from collections.abc import Sequence
from importlib import resources

import numpy as np
import torch

MAX_CELLS = 128 * 128  # per head: beyond this the page gets heavy and the cells tiny
_TOLERANCE = 1e-6  # weights may overshoot [0, 1] by float rounding, no more

# Colour scale: matplotlib's viridis sampled at 11 points, interpolated linearly in both
# Python (the cells as first drawn) and JavaScript (after the slider moves).
_STOPS = (
    (68, 1, 84), (72, 36, 117), (65, 68, 135), (53, 95, 141), (42, 120, 142), (33, 145, 140),
    (34, 168, 132), (68, 191, 112), (122, 209, 81), (189, 223, 38), (253, 231, 37),
)


def _colour(w: float) -> str:
    x = min(max(float(w), 0.0), 1.0) * (len(_STOPS) - 1)
    k = min(int(x), len(_STOPS) - 2)
    t = x - k
    # floor(v + 0.5) is JavaScript's Math.round (Python's round() rounds halves to even), so a
    # cell the slider recolours gets exactly the colour it was first drawn with.
    r, g, b = (math.floor(a + (c - a) * t + 0.5) for a, c in zip(_STOPS[k], _STOPS[k + 1]))
    return f"rgb({r},{g},{b})"


def _labels(name: str, labels, n: int, what: str) -> list[str]:
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
        hint = " (split a sentence into tokens first, e.g. text.split())" if isinstance(labels, str) else ""
        raise TypeError(f"{name} must be a list of strings, one per {what}, got {type(labels).__name__}{hint}")
    out = []
    for k, label in enumerate(labels):
        if isinstance(label, bool) or not isinstance(label, (str, int, np.integer)):
            raise TypeError(f"{name}[{k}] must be a string (or an int position), got {type(label).__name__} ({label!r})")
        out.append(str(label))
    if len(out) != n:
        raise ValueError(f"{name} must have one label per {what} ({n}, from the weights' shape), got {len(out)}")
    return out


def _weights(weights) -> np.ndarray:
    """Check `weights` and return them as a float64 array of shape (heads, Tq, Tk)."""
    if isinstance(weights, torch.Tensor):
        if not weights.is_floating_point():
            raise TypeError(f"weights must be a floating-point tensor, got dtype {weights.dtype}")
        dtype = torch.float64 if weights.dtype == torch.float64 else torch.float32
        w = weights.detach().to("cpu", dtype).numpy()
    elif isinstance(weights, np.ndarray):
        if not np.issubdtype(weights.dtype, np.floating):
            raise TypeError(f"weights must be a floating-point array, got dtype {weights.dtype}")
        w = weights.astype(np.float64 if weights.dtype == np.float64 else np.float32)
    else:
        raise TypeError(f"weights must be a torch.Tensor or numpy array, got {type(weights).__name__}")
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3:
        hint = " (for a batch (B, heads, Tq, Tk), pass one sequence: weights[0])" if w.ndim == 4 else ""
        raise ValueError(f"weights must have shape (heads, Tq, Tk) or (Tq, Tk), got shape {tuple(weights.shape)}{hint}")
    if 0 in w.shape:
        raise ValueError(f"weights must not be empty, got shape {tuple(weights.shape)}")
    if w.shape[1] * w.shape[2] > MAX_CELLS:
        raise ValueError(f"weights has {w.shape[1]} x {w.shape[2]} cells per head, more than the "
                         f"{MAX_CELLS} an explorer can show; show a slice, e.g. weights[:, :64, :64]")
    if not np.isfinite(w).all():
        raise ValueError("weights must be finite, got NaN or infinity (a fully masked row gives NaN "
                         "in a plain softmax)")
    low, high = float(w.min()), float(w.max())
    if low < -_TOLERANCE or high > 1 + _TOLERANCE:
        raise ValueError(f"weights must lie in [0, 1] (attention weights, after the softmax), "
                         f"got values from {low:.4g} to {high:.4g}")
    return w.astype(np.float64)  # exact: every float32 value is a float64 value


def _json_for_html(obj) -> str:
    """JSON that cannot end the <script> element holding it."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _short(label: str, limit: int = 12) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "\u2026"


_CSS = """
.attention-explorer{margin:.75em 0;max-width:100%;color:inherit}
.attention-explorer .ae-controls{display:flex;flex-wrap:wrap;align-items:center;gap:.5em;margin-bottom:.4em}
.attention-explorer .ae-controls input{max-width:14em;accent-color:#2a788e}
.attention-explorer svg{display:block;max-width:100%;height:auto;overflow:visible}
.attention-explorer svg:focus{outline:none}
.attention-explorer svg:focus-visible{outline:2px solid currentColor;outline-offset:3px}
.attention-explorer svg text{fill:currentColor;font-family:system-ui,sans-serif}
.attention-explorer rect[data-i]{cursor:crosshair}
.attention-explorer .readout{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;min-height:1.5em;margin:.4em 0 0;overflow-wrap:anywhere}
"""

# The behaviour lives in explorer.js beside this file (package data), read once. Every explorer
# carries a copy in its own element; the script finds that element itself, so several explorers on
# one page, or in one notebook, never touch each other.
_JS = resources.files("mha").joinpath("explorer.js").read_text(encoding="utf-8")
if "</" in _JS:  # would end the <script> element it is inlined in
    raise RuntimeError("mha/explorer.js must not contain '</'")


class AttentionExplorer:
    """The interactive figure returned by `attention_explorer`; notebooks and the book show it.

    `to_html()` gives the HTML fragment, `to_png()` a static picture of every head.
    """

    def __init__(self, weights: np.ndarray, tokens: list[str], query_tokens: list[str] | None,
                 titles: list[str]):
        self.weights = weights  # (heads, Tq, Tk), float64
        self.tokens = tokens
        self.query_tokens = query_tokens  # None: the queries are the keys
        self.titles = titles
        self._png: bytes | None = None

    def __repr__(self) -> str:
        h, tq, tk = self.weights.shape
        return f"<AttentionExplorer: {h} head{'s' * (h != 1)}, {tq} queries x {tk} keys>"

    def to_html(self) -> str:
        h, tq, tk = self.weights.shape
        uid = f"attention-explorer-{uuid.uuid4().hex[:12]}"
        queries = self.query_tokens if self.query_tokens is not None else self.tokens
        data = {"tokens": self.tokens, "heads": self.weights.tolist()}
        if self.query_tokens is not None:
            data["query_tokens"] = self.query_tokens
        # Geometry, in SVG user units (the SVG scales down to the width available).
        cell = max(8, min(36, 432 // max(tq, tk)))
        font = min(12, cell - 1)
        char = 0.62 * font  # width of one character of the labels, roughly
        left = round(8 + char * max(len(_short(q)) for q in queries))
        top = round(8 + char * max(len(_short(k)) for k in self.tokens))
        width, height = left + tk * cell + 2, top + tq * cell + 40
        parts = [
            f'<svg class="ae-grid" id="{uid}-grid" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" tabindex="0" role="group" aria-roledescription="attention grid" '
            f'aria-label="Attention weights: {tq} queries (rows) by {tk} keys (columns). Hover a cell, '
            f'or use the arrow keys, to read its weight." aria-describedby="{uid}-readout">'
        ]
        # Token labels: queries left of the rows, keys above the columns (read upwards).
        for i, q in enumerate(queries):
            parts.append(f'<text x="{left - 6}" y="{top + (i + 0.5) * cell:g}" font-size="{font}" '
                         f'text-anchor="end" dominant-baseline="central">{html.escape(_short(q))}</text>')
        for j, k in enumerate(self.tokens):
            x, y = left + (j + 0.5) * cell, top - 6
            parts.append(f'<text x="{x:g}" y="{y}" font-size="{font}" transform="rotate(-90 {x:g} {y})" '
                         f'dominant-baseline="central">{html.escape(_short(k))}</text>')
        for i in range(tq):
            for j in range(tk):
                parts.append(f'<rect data-i="{i}" data-j="{j}" x="{left + j * cell}" y="{top + i * cell}" '
                             f'width="{cell - 1}" height="{cell - 1}" fill="{_colour(self.weights[0, i, j])}"/>')
        # A thin frame in the text colour keeps the grid's edge visible on light and dark pages.
        parts.append(f'<path d="M{left - 1} {top - 1}h{tk * cell + 1}v{tq * cell + 1}h{-(tk * cell + 1)}z" '
                     f'fill="none" stroke="currentColor" stroke-opacity="0.6" pointer-events="none"/>')
        parts.append('<path class="ae-cursor" d="" fill="none" stroke="#000" stroke-width="4" pointer-events="none"/>'
                     '<path class="ae-cursor" d="" fill="none" stroke="#fff" stroke-width="1.5" pointer-events="none"/>')
        # Colour key under the grid: 0 on the left, 1 on the right.
        bar_y, bar_w = top + tq * cell + 10, min(160, max(60, tk * cell))
        stops = "".join(f'<stop offset="{k / (len(_STOPS) - 1):g}" stop-color="rgb{c}"/>'
                        for k, c in enumerate(_STOPS))
        parts.append(
            f'<defs><linearGradient id="{uid}-scale">{stops}</linearGradient></defs>'
            f'<path d="M{left} {bar_y}h{bar_w}v10h{-bar_w}z" fill="url(#{uid}-scale)"/>'
            f'<text x="{left}" y="{bar_y + 24}" font-size="11" dominant-baseline="central">0</text>'
            f'<text x="{left + bar_w}" y="{bar_y + 24}" font-size="11" text-anchor="end" '
            f'dominant-baseline="central">1</text>'
            f'<text x="{left + bar_w + 8}" y="{bar_y + 5}" font-size="11" dominant-baseline="central">'
            f'weight</text></svg>'
        )
        controls = ""
        if h > 1:
            controls = (
                f'<div class="ae-controls"><label for="{uid}-head">Head</label>'
                f'<input type="range" id="{uid}-head" min="0" max="{h - 1}" step="1" value="0" '
                f'aria-valuetext="{html.escape(self.titles[0])}">'
                f'<span class="ae-head" aria-hidden="true">{html.escape(self.titles[0])}</span></div>'
            )
        stops = json.dumps([list(c) for c in _STOPS], separators=(",", ":"))
        return (
            f'<div class="attention-explorer" id="{uid}" '
            f'data-titles="{html.escape(json.dumps(self.titles, ensure_ascii=False))}" data-stops="{stops}">'
            f"<style>{_CSS}</style>"
            f'<script type="application/json">{_json_for_html(data)}</script>'
            f"{controls}{''.join(parts)}"
            f'<p class="readout" id="{uid}-readout" aria-live="polite">Rows are queries, columns keys. '
            f"Hover over a cell, or focus the grid and use the arrow keys, to read its weight.</p>"
            f"<script>{_JS}</script></div>"
        )

    def to_png(self) -> bytes:
        """Every head as a heatmap (rows: queries, columns: keys), for builders without HTML."""
        if self._png is None:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.colors import LinearSegmentedColormap
            from matplotlib.figure import Figure

            h, tq, tk = self.weights.shape
            queries = self.query_tokens if self.query_tokens is not None else self.tokens
            ncols = min(h, 4)
            nrows = -(-h // ncols)
            side = min(3.0, max(1.8, 0.22 * max(tq, tk) + 0.8))
            fig = Figure(figsize=(side * ncols + 0.8, side * nrows), dpi=100, layout="constrained")
            FigureCanvasAgg(fig)
            cmap = LinearSegmentedColormap.from_list("scale", [tuple(v / 255 for v in c) for c in _STOPS])
            axes = fig.subplots(nrows, ncols, squeeze=False)
            for k, ax in enumerate(axes.flat):
                if k >= h:
                    ax.axis("off")
                    continue
                image = ax.imshow(self.weights[k], cmap=cmap, vmin=0.0, vmax=1.0)
                ax.set_title(self.titles[k], fontsize=9)
                if max(tq, tk) <= 24:
                    ax.set_yticks(range(tq), [_short(q) for q in queries], fontsize=7)
                    ax.set_xticks(range(tk), [_short(t) for t in self.tokens], fontsize=7, rotation=90)
                else:
                    ax.set_xticks([])
                    ax.set_yticks([])
            fig.colorbar(image, ax=axes, shrink=0.8, label="weight")
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png")
            self._png = buffer.getvalue()
        return self._png

    # Jupyter (and MyST-NB, which builds the website) ask for these: the website and
    # JupyterLab show the HTML, a builder that cannot show HTML takes the PNG.
    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_png_(self) -> bytes:
        return self.to_png()


def attention_explorer(weights, tokens, *, query_tokens=None, titles=None) -> AttentionExplorer:
    """An interactive figure of attention weights: a grid per head, a head slider, a read-out.

    Args:
        weights: (heads, Tq, Tk) attention weights in [0, 1], a torch.Tensor or numpy array
            (float16/bfloat16 are shown as float32); (Tq, Tk) means one head. Row i is where
            query i looks.
        tokens: Tk labels of the keys; they label the queries too unless query_tokens is given
            (then Tq must equal Tk).
        query_tokens: Tq labels of the queries, when they differ from the keys (cross-attention).
        titles: one name per head (default "head 0", "head 1", ...); the read-out starts with it.
    Returns:
        An AttentionExplorer: make it the last expression of a notebook cell to show it.
        Hovering a cell (or moving with the arrow keys) reads e.g. ``head 2: cat -> sat = 0.4312``.
    Raises:
        TypeError for a weights object that is not a floating tensor/array, or labels that
        are not strings; ValueError for shapes that do not match the labels, or weights
        outside [0, 1] or not finite.
    """
    w = _weights(weights)
    h, tq, tk = w.shape
    keys = _labels("tokens", tokens, tk, "key (the last dimension of weights)")
    queries = None
    if query_tokens is not None:
        queries = _labels("query_tokens", query_tokens, tq, "query (the second-to-last dimension of weights)")
        queries = None if queries == keys else queries  # the JSON lists query_tokens only when they differ
    elif tq != tk:
        raise ValueError(f"weights has {tq} queries and {tk} keys: tokens labels the {tk} keys, so "
                         f"pass query_tokens with {tq} labels for the queries")
    if titles is None:
        names = [f"head {k}" for k in range(h)]
    else:
        names = _labels("titles", titles, h, "head (the first dimension of weights)")
    return AttentionExplorer(w, keys, queries, names)

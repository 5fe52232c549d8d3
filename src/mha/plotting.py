"""Figures for the lessons. Each function returns a matplotlib Figure and never calls show()."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle

from ._checks import check_tensor
from .explorer import attention_explorer  # noqa: F401  (interactive figure, see explorer.py)

HEAD_COLORS = plt.get_cmap("tab10").colors


def _numpy(x, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")


def plot_attention_heads(weights, tokens=None, *, key_tokens=None, titles=None, ncols: int = 4,
                         cmap: str = "viridis", size: float = 2.6):
    """Heatmaps of attention weights, one panel per head.

    Args:
        weights: (h, Tq, Tk), or (B, h, Tq, Tk) (the first batch element is drawn), or (Tq, Tk).
        tokens: labels of the queries (and of the keys unless key_tokens is given).
        titles: one title per head (default "head 0", "head 1", ...).
    Rows are queries, columns keys: row i shows where query i looks.
    """
    w = _numpy(weights, "weights")
    if w.ndim == 4:
        w = w[0]
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3:
        raise ValueError(f"weights must have shape (h, Tq, Tk), (B, h, Tq, Tk) or (Tq, Tk), got {w.shape}")
    h, tq, tk = w.shape
    key_tokens = tokens if key_tokens is None else key_tokens
    for name, labels, n in (("tokens", tokens, tq), ("key_tokens", key_tokens, tk)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} must have {n} labels to match the weights, got {len(labels)}")
    titles = [f"head {i}" for i in range(h)] if titles is None else list(titles)
    if len(titles) != h:
        raise ValueError(f"titles must have one entry per head ({h}), got {len(titles)}")
    ncols = min(ncols, h)
    nrows = -(-h // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, size * nrows), squeeze=False,
                             constrained_layout=True)
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.axis("off")
            continue
        im = ax.imshow(w[i], cmap=cmap, vmin=0.0, vmax=1.0)
        ax.set_title(titles[i], fontsize=10)
        if tokens is not None:
            ax.set_yticks(range(tq), tokens, fontsize=7)
            ax.set_xticks(range(tk), key_tokens, fontsize=7, rotation=90)
        else:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    return fig


def plot_mask(mask, *, title: str | None = None, ax=None, query_label: str = "query position",
              key_label: str = "key position"):
    """Picture of a boolean mask (True = may attend): allowed cells dark, blocked cells light.

    mask: (Tq, Tk), or any shape that squeezes to 2-D (e.g. (1, 1, Tq, Tk)).
    """
    check_tensor("mask", mask) if isinstance(mask, torch.Tensor) else None
    m = _numpy(mask, "mask").astype(bool)
    m = m.reshape([s for s in m.shape if s != 1] or [1, 1]) if m.ndim > 2 else m
    if m.ndim != 2:
        raise ValueError(f"mask must squeeze to 2-D (Tq, Tk), got shape {m.shape}")
    fig = ax.figure if ax is not None else plt.figure(figsize=(0.35 * m.shape[1] + 1.5, 0.35 * m.shape[0] + 1.2))
    ax = ax if ax is not None else fig.add_subplot()
    ax.imshow(m, cmap=ListedColormap(["#f2f2f2", "#2b6cb0"]), vmin=0, vmax=1)
    ax.set_xticks(range(m.shape[1]))
    ax.set_yticks(range(m.shape[0]))
    ax.tick_params(labelsize=7)
    ax.set_xlabel(key_label)
    ax.set_ylabel(query_label)
    ax.set_xticks(np.arange(-0.5, m.shape[1]), minor=True)
    ax.set_yticks(np.arange(-0.5, m.shape[0]), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def plot_head_split(seq_len: int = 4, embed_dim: int = 8, num_heads: int = 2, *, wrong: bool = False):
    """Diagram of (T, C) -> (h, T, d): which token and feature lands in which head.

    Each cell is labelled "t.f" (token t, feature f) and coloured by the head it lands in,
    in the input x as well as in the heads. The correct split (view to (T, h, d), then
    transpose) gives each head a vertical stripe of x: all tokens, d features each. With
    wrong=True the diagram shows a direct view to (h, T, d) instead: each head receives a
    horizontal band of x, whole tokens cut into rows of d features.
    """
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
    d = embed_dim // num_heads
    ids = np.arange(seq_len * embed_dim).reshape(seq_len, embed_dim)  # token * C + feature
    x = torch.as_tensor(ids)[None]  # (1, T, C)
    if wrong:
        heads = x.view(1, num_heads, seq_len, d)[0].numpy()  # (h, T, d): consecutive blocks of memory
    else:
        heads = x.view(1, seq_len, num_heads, d).transpose(1, 2)[0].numpy()  # (h, T, d)
    owner = np.empty(seq_len * embed_dim, dtype=int)  # owner[token * C + feature] = its head
    for i in range(num_heads):
        owner[heads[i].ravel()] = i

    def draw(ax, grid, x0, y0, title):
        rows, cols = grid.shape
        for r in range(rows):
            for c in range(cols):
                t, f = divmod(int(grid[r, c]), embed_dim)
                color = HEAD_COLORS[owner[grid[r, c]] % 10]
                ax.add_patch(Rectangle((x0 + c, y0 - r), 1, 1, facecolor=color, alpha=0.55,
                                       edgecolor="white"))
                ax.text(x0 + c + 0.5, y0 - r + 0.5, f"{t}.{f}", ha="center", va="center", fontsize=7)
        ax.text(x0 + cols / 2, y0 + 1.4, title, ha="center", fontsize=9)

    fig, ax = plt.subplots(figsize=(0.45 * (embed_dim + num_heads * (d + 1) + 3), 0.5 * (seq_len + 3)))
    draw(ax, ids, 0, seq_len - 1, f"x: (T={seq_len}, C={embed_dim})")
    ax.annotate("", xy=(embed_dim + 2, seq_len / 2), xytext=(embed_dim + 0.4, seq_len / 2),
                arrowprops=dict(arrowstyle="->"))
    x0 = embed_dim + 2.5
    for i in range(num_heads):
        draw(ax, heads[i], x0, seq_len - 1, f"head {i}")
        x0 += d + 1
    ax.set_title("direct view to (h, T, d): tokens mixed" if wrong else "view, then transpose: one token per row",
                 fontsize=10)
    ax.set_xlim(-0.5, x0)
    ax.set_ylim(-0.5, seq_len + 1)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig

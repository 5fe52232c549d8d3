"""Exercises of lesson 12, PyTorch's built-ins: torch's masks converted, a sliding window, ALiBi."""

from __future__ import annotations

import torch

from ._core import Case, Exercise, Mistake
from .heads import _int


def _bools(g: torch.Generator, *shape: int, p_true: float) -> torch.Tensor:
    return torch.rand(*shape, generator=g) < p_true


# ---------------------------------------------------------------- 1. torch's masks -> one mask

def torch_masks_to_allowed(attn_mask: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    """attn_mask (Tq, Tk) and key_padding_mask (B, Tk), bool with True = blocked (the convention
    of nn.MultiheadAttention) -> bool (B, 1, Tq, Tk) with True = may attend (SDPA, mha)."""
    blocked = attn_mask[None, None, :, :] | key_padding_mask[:, None, None, :]   # (B, 1, Tq, Tk)
    return ~blocked


def _padding(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B, max_len) bool, True at the padding (torch's key_padding_mask)."""
    return torch.arange(max_len)[None, :] >= lengths[:, None]


def _tm_public(g):
    return [
        Case((torch.ones(4, 4, dtype=torch.bool).triu(1), _padding(torch.tensor([4, 2]), 4)),
             note="torch's causal mask (True above the diagonal) and two sequences of lengths 4 and 2"),
        Case((torch.zeros(2, 5, dtype=torch.bool), _padding(torch.tensor([3]), 5)),
             note="2 queries, 5 keys: padding only"),
        Case((_bools(g, 3, 3, p_true=0.4), _bools(g, 3, 3, p_true=0.3)), note="arbitrary masks"),
    ]


def _tm_hidden(g):
    # Case 1 is square, with a causal mask, a full sequence and a padded one: every mistake
    # (the query-axis one included, which needs Tq == Tk to run) gives a wrong answer there.
    t, b = _int(g, 3, 7), _int(g, 2, 4)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[0], lengths[-1] = t, _int(g, 1, t - 1)
    cases = [Case((torch.ones(t, t, dtype=torch.bool).triu(1), _padding(lengths, t)))]
    tq = _int(g, 1, 4)
    tk = _int(g, tq + 1, 8)
    cases.append(Case((_bools(g, tq, tk, p_true=0.4), _bools(g, _int(g, 1, 3), tk, p_true=0.3))))
    t = _int(g, 2, 6)
    cases.append(Case((_bools(g, t, t, p_true=0.4), _bools(g, _int(g, 1, 3), t, p_true=0.3))))
    return cases


def _tm_explain(case, outcome):
    attn_mask, key_padding_mask = case.args
    want = (key_padding_mask.shape[0], attn_mask.shape[0], attn_mask.shape[1])
    if outcome.status == "value" and outcome.value.kind == "tensor" and tuple(outcome.value.data.shape) == want:
        return "add the head axis: return (B, 1, Tq, Tk) so that the mask broadcasts over the heads"
    return None


TORCH_MASKS = Exercise(
    id="builtins.torch_masks_to_allowed", title="From torch's masks to one mask",
    lesson="12-pytorch-built-ins", function="torch_masks_to_allowed",
    params=("attn_mask", "key_padding_mask"), points=3,
    reference=torch_masks_to_allowed, public=_tm_public, hidden=_tm_hidden, public_seed=1201,
    mistakes=(
        Mistake("nn.MultiheadAttention's masks say True = blocked, the answer says True = may attend: "
                "invert them (~)",
                lambda a, p: (a[None, None] | p[:, None, None, :])),
        Mistake("key_padding_mask is True at the padding, that is where attention is blocked: invert "
                "it as well as attn_mask",
                lambda a, p: ~a[None, None] & p[:, None, None, :]),
        Mistake("attn_mask is True where attention is blocked: invert it as well as key_padding_mask",
                lambda a, p: a[None, None] & ~p[:, None, None, :]),
        Mistake("key_padding_mask marks padded keys, the last axis: shape it (B, 1, 1, Tk), not "
                "(B, 1, Tq, 1) over the queries",
                lambda a, p: ~a[None, None] & ~p[:, None, :, None]),
        Mistake("a key is allowed only when neither mask blocks it: combine the inverted masks with "
                "& (and), not | (or)",
                lambda a, p: ~a[None, None] | ~p[:, None, None, :]),
    ),
    forbidden=("mha",), explain=_tm_explain, dtypes=(),
)


# ---------------------------------------------------------------- 2. sliding-window mask

def sliding_window_mask(q_len: int, k_len: int, window: int) -> torch.Tensor:
    """Bool (q_len, k_len), True = may attend: query i, at position p = i + k_len - q_len
    (bottom-right), sees the keys p - window < j <= p."""
    p = torch.arange(q_len)[:, None] + (k_len - q_len)     # (q_len, 1)
    j = torch.arange(k_len)[None, :]                       # (1, k_len)
    return (j <= p) & (j > p - window)


def _window(p_shift: int, lower, upper):
    """A wrong mask: query position p = i + p_shift, allowed where lower(p, j) & upper(p, j)."""
    def wrong(q_len, k_len, window):
        p = torch.arange(q_len)[:, None] + p_shift(q_len, k_len)
        j = torch.arange(k_len)[None, :]
        return lower(p, j, window) & upper(p, j, window)
    return wrong


def _bottom_right(q, k):
    return k - q


def _sw_public(g):
    return [Case((6, 6, 3)), Case((2, 7, 3)), Case((1, 5, 2)), Case((4, 4, 1))]


def _sw_hidden(g):
    # Case 1 (square, 2 <= window <= t - 2) exposes every mistake but the alignment; case 2
    # (fewer queries than keys, window <= k_len - 2) exposes the top-left alignment. The
    # bounds keep the mistakes apart: with window = t - 1 the window + 1 mistake is the plain
    # causal mask, and with one query and window = k_len - 1 top-left is the inverted mask.
    t = _int(g, 4, 9)
    cases = [Case((t, t, _int(g, 2, t - 2)))]
    q = _int(g, 1, 3)
    k = _int(g, q + 2, 9)
    cases.append(Case((q, k, _int(g, 1, k - 2))))
    k = _int(g, 1, 8)
    cases.append(Case((_int(g, 1, k), k, _int(g, 1, k + 1))))
    return cases


SLIDING_WINDOW = Exercise(
    id="builtins.sliding_window_mask", title="A sliding-window causal mask",
    lesson="12-pytorch-built-ins", function="sliding_window_mask",
    params=("q_len", "k_len", "window"), points=4,
    reference=sliding_window_mask, public=_sw_public, hidden=_sw_hidden, public_seed=1202,
    mistakes=(
        Mistake("True = may attend (the convention of SDPA and mha); your mask has True = blocked",
                lambda q, k, w: ~sliding_window_mask(q, k, w)),
        Mistake("align the window bottom-right: with fewer queries than keys, query i sits at "
                "position i + k_len - q_len, not at position i",
                _window(lambda q, k: 0, lambda p, j, w: j <= p, lambda p, j, w: j > p - w)),
        Mistake("the window holds `window` keys including the query's own position: "
                "p - window < j, not p - window <= j",
                _window(_bottom_right, lambda p, j, w: j <= p, lambda p, j, w: j >= p - w)),
        Mistake("the window includes the query's own position (j <= p): a token may attend to itself",
                _window(_bottom_right, lambda p, j, w: j < p, lambda p, j, w: j >= p - w)),
        Mistake("a causal window looks back only: keys after the query (j > p) are blocked",
                _window(_bottom_right, lambda p, j, w: j < p + w, lambda p, j, w: j > p - w)),
        Mistake("limit the keys to the last `window` positions: this is the plain causal mask",
                _window(_bottom_right, lambda p, j, w: j <= p, lambda p, j, w: j >= 0)),
    ),
    forbidden=("mha", "torch.nn.attention"), dtypes=(),
)


# ---------------------------------------------------------------- 3. ALiBi bias

def alibi_bias(num_heads: int, q_len: int, k_len: int) -> torch.Tensor:
    """Float32 (num_heads, q_len, k_len): slope_n * (j - p) with slope_n = 2 ** (-8 (n + 1) / num_heads)
    and p = i + k_len - q_len, query i's position (the queries are the last q_len positions)."""
    slope = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1, dtype=torch.float64) / num_heads)   # (h,)
    p = torch.arange(q_len)[:, None] + (k_len - q_len)                                       # (q_len, 1)
    distance = (torch.arange(k_len)[None, :] - p).to(torch.float64)                          # (q_len, k_len)
    return (slope[:, None, None] * distance).to(torch.float32)


def _alibi(slopes, positions, transform=lambda d: d):
    """A wrong bias: slopes(num_heads) -> (h,), positions(q_len, k_len) -> p (q_len, 1)."""
    def wrong(num_heads, q_len, k_len):
        distance = transform((torch.arange(k_len)[None, :] - positions(q_len, k_len)).to(torch.float64))
        return (slopes(num_heads)[:, None, None] * distance).to(torch.float32)
    return wrong


def _slopes(n):
    return 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)


def _p(q, k):
    return torch.arange(q)[:, None] + (k - q)


def _ab_public(g):
    return [Case((4, 4, 4)), Case((2, 2, 5)), Case((8, 1, 6))]


def _ab_hidden(g):
    # Case 1: several heads, but never 8 (where the 8-head slopes happen to be right), and a
    # square block with keys ahead of and behind every query. Case 2: fewer queries than keys.
    heads = [2, 4, 16][_int(g, 0, 2)]
    t = _int(g, 3, 7)
    q = _int(g, 1, 3)
    return [Case((heads, t, t)),
            Case((2 ** _int(g, 0, 4), q, _int(g, q + 1, 8))),
            Case((2 ** _int(g, 1, 3), _int(g, 2, 5), _int(g, 5, 8)))]


ALIBI = Exercise(
    id="builtins.alibi_bias", title="The ALiBi bias", lesson="12-pytorch-built-ins",
    function="alibi_bias", params=("num_heads", "q_len", "k_len"), points=4,
    reference=alibi_bias, public=_ab_public, hidden=_ab_hidden, public_seed=1203,
    mistakes=(
        Mistake("mind the sign: keys farther behind the query must get a lower score, so the bias is "
                "slope * (j - p), negative for j < p",
                _alibi(_slopes, _p, lambda d: -d)),
        Mistake("the first head's slope is 2 ** (-8 / num_heads): count heads from n + 1 = 1, so no "
                "head has slope 1",
                _alibi(lambda n: 2.0 ** (-8.0 * torch.arange(n, dtype=torch.float64) / n), _p)),
        Mistake("the slopes decrease from head 0 to the last head: you have them in reverse order",
                _alibi(lambda n: _slopes(n).flip(0), _p)),
        Mistake("the slopes depend on num_heads, 2 ** (-8 (n + 1) / num_heads): 2 ** -(n + 1) is right "
                "only for 8 heads",
                _alibi(lambda n: 2.0 ** -torch.arange(1, n + 1, dtype=torch.float64), _p)),
        Mistake("the queries are the last q_len positions: query i sits at p = i + k_len - q_len, "
                "not at i",
                _alibi(_slopes, lambda q, k: torch.arange(q)[:, None])),
        Mistake("keep the sign of j - p: keys ahead of the query get a positive bias (the causal mask "
                "removes them); -|j - p| is the bidirectional variant",
                _alibi(_slopes, _p, lambda d: -d.abs())),
    ),
    forbidden=("mha",), dtypes=(),
)

EXERCISES = (TORCH_MASKS, SLIDING_WINDOW, ALIBI)

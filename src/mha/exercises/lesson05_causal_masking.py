"""Exercises of lesson 05, causal masking: the mask, a safe masked softmax, a decoder mask."""

from __future__ import annotations

import torch

from mha.autograde import Case, ErrorHint, Exercise, Explain, Mistake
from mha.autograde.draw import randint, randn, returned_nan


# ---------------------------------------------------------------- 10. causal mask

def causal_mask(q_len: int, k_len: int) -> torch.Tensor:
    """Bool (q_len, k_len), True = may attend; bottom-right aligned: query i sees keys
    j <= i + k_len - q_len (the queries are the last q_len positions)."""
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)


def _causal_public(g):
    return [Case((4, 4)), Case((2, 5)), Case((1, 3))]


def _causal_hidden(g):
    # at least two keys more than queries, and three keys for a single query: there the
    # listed mistakes (top-left, no diagonal, the sign of the offset) all give different masks
    t = randint(g, 2, 9)
    q = randint(g, 2, 5)
    return [Case((t, t)), Case((q, q + randint(g, 2, 6))), Case((1, randint(g, 3, 9)))]


CAUSAL = Exercise(
    id="masking.causal_mask", title="A causal mask", lesson="05-causal-masking",
    function="causal_mask", params=("q_len", "k_len"), points=3,
    reference=causal_mask, public=_causal_public, hidden=_causal_hidden, public_seed=401,
    section="Pitfall 4: fewer queries than keys, and where the triangle sits",
    mistakes=(
        Mistake("the convention here is True = may attend (as in F.scaled_dot_product_attention); "
                "your mask has True = blocked, nn.MultiheadAttention's convention",
                lambda q, k: ~causal_mask(q, k), name="true-means-blocked",
                section="Pitfall 3: PyTorch's two opposite boolean conventions"),
        Mistake("align the mask bottom-right: with fewer queries than keys, the queries are the "
                "last positions, so query i sees keys up to i + k_len - q_len",
                lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(), name="top-left"),
        Mistake("a query may attend to its own position: keep the diagonal",
                lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(diagonal=k - q - 1), name="no-diagonal",
                section="The idea: block the scores above the diagonal"),
        Mistake("mind the sign of the offset: the queries are the LAST q_len positions, so query i "
                "sits at position i + (k_len - q_len) and sees the keys up to there, not up to "
                "i + (q_len - k_len)", lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(diagonal=q - k),
                name="offset-sign"),
        Mistake("tril keeps the entries on and below the diagonal, the keys a query may see; triu keeps "
                "those on and above it, the future", lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(diagonal=k - q),
                name="upper-triangle"),
    ),
    forbidden=("mha", "torch.nn.attention.bias", "causal_lower_right", "causal_upper_left"),
    dtypes=(),
)


# ---------------------------------------------------------------- 11. masked softmax

def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim where ``mask`` (bool, broadcastable, True = may attend)
    allows; rows with nothing allowed are all zeros. Same dtype as ``scores``, never NaN.
    Computed in the dtype of ``scores`` (float32 for float16/bfloat16), so float64 stays exact."""
    work = torch.promote_types(scores.dtype, torch.float32)
    filled = scores.to(work).masked_fill(~mask, float("-inf"))
    weights = torch.softmax(filled, dim=-1)
    return torch.nan_to_num(weights, nan=0.0).to(scores.dtype)


def _fill_softmax(fill):
    def wrong(scores, mask):
        value = fill(scores.dtype) if callable(fill) else fill
        work = torch.promote_types(scores.dtype, torch.float32)
        return torch.softmax(scores.to(work).masked_fill(~mask, value), dim=-1).to(scores.dtype)
    return wrong


def _masked_after(scores, mask):
    work = torch.promote_types(scores.dtype, torch.float32)
    return (torch.softmax(scores.to(work), dim=-1) * mask).to(scores.dtype)


def _with_empty_row(mask: torch.Tensor, row: int) -> torch.Tensor:
    mask = mask.clone()
    mask[..., row, :] = False
    return mask


def _ms_public(g):
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    pad = torch.tensor([True, True, True, False, False]).view(1, 1, 1, 5).expand(2, 1, 1, 5).clone()
    pad[1, ..., 1:] = False
    return [
        Case((randn(g, 4, 4, scale=3), causal), note="causal mask, float32"),
        Case((randn(g, 2, 3, 3, scale=3, dtype=torch.float16), _with_empty_row(torch.ones(3, 3, dtype=torch.bool).tril(), 0)),
             note="float16 with a row where nothing is allowed"),
        Case((randn(g, 2, 2, 3, 5, scale=3), pad), note="padding mask broadcast over heads and queries"),
        Case((randn(g, 2, 6, 6, scale=8, dtype=torch.float64), torch.ones(6, 6, dtype=torch.bool).tril()),
             note="float64, compared at float64 precision"),
    ]


def _ms_hidden(g):
    t = randint(g, 3, 7)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    b, h = randint(g, 1, 3), randint(g, 1, 3)
    keep = torch.rand(b, 1, 1, t, generator=g) > 0.4
    keep[..., 0] = True
    return [
        Case((randn(g, b, h, t, t, scale=4, dtype=torch.float64), causal & keep)),
        Case((randn(g, h, t, t, scale=4, dtype=torch.float16), _with_empty_row(causal, randint(g, 0, t - 1)))),
        Case((randn(g, b, t, t, scale=4), _with_empty_row(causal.expand(b, t, t), 0))),
        # float64 with many allowed keys: an answer computed in float32 is off by ~1e-7
        Case((randn(g, 2, 8, 8, scale=8, dtype=torch.float64), torch.rand(2, 8, 8, generator=g) > 0.2)),
    ]


def _ms_nan(case, outcome):
    if returned_nan(outcome):
        return ("a row where every key is masked is all -inf, and softmax of it is 0/0 = NaN: "
                "return zeros for such rows")
    return None


_ms_explain = Explain(
    ErrorHint("fill-overflows-float16", "-1e9 (or any fill beyond float16's largest value, 65504) does not fit "
              "in float16: fill with float('-inf') and turn the NaN of empty rows into zeros",
              (r"(?i)overflow",), types=("RuntimeError", "OverflowError")),
    values=_ms_nan,
)


MASKED_SOFTMAX = Exercise(
    id="masking.masked_softmax", title="A softmax that survives masking", lesson="05-causal-masking",
    function="masked_softmax", params=("scores", "mask"), points=5,
    reference=masked_softmax, public=_ms_public, hidden=_ms_hidden, public_seed=402,
    section="Pitfall 2: the row with nothing allowed",
    mistakes=(
        Mistake("the mask says True = may attend: fill the scores where the mask is False",
                lambda s, m: masked_softmax(s, ~m), name="true-means-blocked",
                section="Pitfall 3: PyTorch's two opposite boolean conventions"),
        Mistake("a row with nothing allowed must be all zeros; a large negative fill value "
                "(-1e9, finfo.min) makes it a uniform average instead",
                _fill_softmax(-1e9), name="large-negative-fill"),
        Mistake("compute float64 scores in float64: .float() rounds them to float32 and the "
                "answer loses precision (compute in torch.promote_types(scores.dtype, "
                "torch.float32), which is float32 only for float16/bfloat16)",
                lambda s, m: masked_softmax(s.float(), m).to(s.dtype), name="float32-for-float64",
                section="Pitfall 1: `-1e9` instead of `-inf`"),
        Mistake("mask the scores before the softmax (fill them with -inf): zeroing the weights after it "
                "leaves rows that no longer sum to 1", _masked_after, name="masked-after-softmax"),
    ),
    forbidden=("mha",), explain=_ms_explain, dtypes=("float16", "float32", "float64"),
)


# ---------------------------------------------------------------- 12. decoder mask

def decoder_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """Bool (B, 1, max_len, max_len): key j <= query i (causal) and j < lengths[b] (not padding)."""
    pos = torch.arange(max_len)
    causal = pos[None, :] <= pos[:, None]                # (T, T), rows = queries
    real = pos[None, :] < lengths[:, None]               # (B, T), keys that are real tokens
    return (causal[None, :, :] & real[:, None, :])[:, None]  # (B, 1, T, T)


def _dm_public(g):
    return [Case((torch.tensor([3, 5, 1]), 5)), Case((torch.tensor([2]), 2)), Case((torch.tensor([4, 2]), 6))]


def _dm_hidden(g):
    # The first case always holds a full sequence and one padded by two or more, so every
    # mistake shows (padding of one position hides only the last key, which j <= lengths[b]
    # then hides too).
    t, b = randint(g, 3, 8), randint(g, 2, 4)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[0], lengths[-1] = t, randint(g, 1, t - 2)
    cases = [Case((lengths, t))]
    for _ in range(2):
        t, b = randint(g, 2, 8), randint(g, 1, 4)
        cases.append(Case((torch.randint(1, t + 1, (b,), generator=g), t)))
    return cases


def _dm_explain(case, outcome):
    lengths, t = case.args
    if outcome.status == "value" and outcome.value.kind == "tensor":
        if tuple(outcome.value.data.shape) == (len(lengths), t, t):
            return "add the head axis: the mask is (B, 1, T, T) so that it broadcasts over heads"
    return None


DECODER = Exercise(
    id="masking.decoder_mask", title="Causal and padding together", lesson="05-causal-masking",
    function="decoder_mask", params=("lengths", "max_len"), points=4,
    reference=decoder_mask, public=_dm_public, hidden=_dm_hidden, public_seed=403,
    section="Padding meets causality",
    mistakes=(
        Mistake("True = may attend: a key is allowed when it is not in the future AND not padding",
                lambda l, t: ~decoder_mask(l, t), name="true-means-blocked",
                section="Pitfall 3: PyTorch's two opposite boolean conventions"),
        Mistake("combine the causal mask with the padding mask (keys j >= lengths[b] are padding)",
                lambda l, t: torch.ones(t, t, dtype=torch.bool).tril().expand(len(l), 1, t, t), name="no-padding"),
        Mistake("combine the padding mask with the causal mask (key j must not come after query i)",
                lambda l, t: (torch.arange(t)[None, :] < l[:, None])[:, None, None, :].expand(len(l), 1, t, t),
                name="no-causal"),
        Mistake("the real tokens of sequence b are the positions 0 .. lengths[b] - 1: key j is padding "
                "when j >= lengths[b], so j < lengths[b], not j <= lengths[b]",
                lambda l, t: (torch.ones(t, t, dtype=torch.bool).tril()[None]
                              & (torch.arange(t)[None, :] <= l[:, None])[:, None, :])[:, None],
                name="length-inclusive"),
        Mistake("padding hides keys, the columns: index it by key position j, not query position i",
                lambda l, t: (torch.ones(t, t, dtype=torch.bool).tril()[None]
                              & (torch.arange(t)[None, :] < l[:, None])[:, :, None])[:, None],
                name="padding-on-queries"),
        Mistake("a query may attend to its own position: the causal part keeps the diagonal, j <= i, not j < i",
                lambda l, t: (torch.ones(t, t, dtype=torch.bool).tril(-1)[None]
                              & (torch.arange(t)[None, :] < l[:, None])[:, None, :])[:, None], name="no-diagonal"),
        Mistake("the real tokens of sequence b are the positions 0 .. lengths[b] - 1, all of them: j < lengths[b], "
                "not j < lengths[b] - 1", lambda l, t: decoder_mask(l - 1, t), name="length-minus-one"),
        Mistake("a query sees the keys on and BELOW the diagonal, j <= i (tril), the past; on and above it (triu, "
                "j >= i) is the future", lambda l, t: (torch.ones(t, t, dtype=torch.bool).triu()[None]
                                                       & (torch.arange(t)[None, :] < l[:, None])[:, None, :])[:, None],
                name="upper-triangle"),
    ),
    forbidden=("mha",), explain=_dm_explain, dtypes=(),
)

EXERCISES = (CAUSAL, MASKED_SOFTMAX, DECODER)

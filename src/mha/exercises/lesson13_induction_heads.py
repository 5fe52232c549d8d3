"""Exercises of lesson 13, induction heads: which first-layer head a second-layer head reads
through its keys (K-composition, from the weights alone), a prefix-matching score that finds
the repeats from the tokens themselves, and mean-ablation of a head."""

from __future__ import annotations

import torch

from mha.autograde import Case, Exercise, Mistake
from mha.autograde.draw import randint, randn

from .common import NO_MHA


def _causal_weights(g, b, h, t, dtype=torch.float32):
    """Random causal attention weights (b, h, t, t): rows are queries and sum to 1."""
    scores = randn(g, b, h, t, t, dtype=torch.float64, scale=2.0)
    future = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)       # keys j > i
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1).to(dtype)


# ---------------------------------------------------------------- 1. K-composition from the weights

def k_composition(w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """w_q, w_k (h2, C, d): the second layer's query and key weights per head; w_v (h1, C, d),
    w_o (h1, d, C): the first layer's value and output weights per head, all applied as x @ W.
    Returns (h1, h2): ||W_QK^b (W_OV^a)^T||_F / (||W_QK^b||_F ||W_OV^a||_F) with
    W_QK^b = W_Q^b W_K^b^T and W_OV^a = W_V^a W_O^a, both (C, C)."""
    qk = w_q @ w_k.transpose(-2, -1)                         # (h2, C, C): score = x_q W_QK x_k^T
    ov = w_v @ w_o                                           # (h1, C, C): head a writes x_src W_OV
    through = qk[None] @ ov[:, None].transpose(-2, -1)       # (h1, h2, C, C): x_q W_QK W_OV^T x_src^T
    norms = torch.linalg.matrix_norm(qk)[None, :] * torch.linalg.matrix_norm(ov)[:, None]   # (h1, h2)
    return torch.linalg.matrix_norm(through) / norms


def _kc_case(g, h1, h2, c, d, dtype=torch.float32):
    def w(n, a, b):
        return randn(g, n, a, b, dtype=dtype, scale=c ** -0.5)
    return Case((w(h2, c, d), w(h2, c, d), w(h1, c, d), w(h1, d, c)))


def _kc_public(g):
    return [_kc_case(g, 2, 3, 6, 2), _kc_case(g, 3, 2, 8, 3, torch.float64), _kc_case(g, 2, 2, 4, 2)]


def _kc_hidden(g):
    # h1 != h2 in two cases (a transposed table has the wrong shape), d >= 2 and C >= 4 (the
    # Q-composition matrix, W_OV W_QK, and the others then differ from the K-composition one)
    cases = []
    for dt in (torch.float32, torch.float64):
        h1 = randint(g, 2, 3)
        cases.append(_kc_case(g, h1, 5 - h1, randint(g, 4, 9), randint(g, 2, 3), dt))
    h = randint(g, 2, 3)
    cases.append(_kc_case(g, h, h, randint(g, 4, 9), randint(g, 2, 3)))
    return cases


def _kc_wrong(kind):
    def wrong(w_q, w_k, w_v, w_o):
        qk = w_q @ w_k.transpose(-2, -1)
        ov = w_v @ w_o
        if kind == "v-composition":
            m = ov[:, None] @ qk[None].transpose(-2, -1) @ ov[:, None]
            return torch.linalg.matrix_norm(m) / (torch.linalg.matrix_norm(ov)[:, None] ** 2
                                                  * torch.linalg.matrix_norm(qk)[None, :])
        if kind == "cosine":
            a, b = ov.flatten(1), qk.flatten(1)
            return (a / a.norm(dim=1, keepdim=True)) @ (b / b.norm(dim=1, keepdim=True)).T
        if kind == "spectral":
            m = qk[None] @ ov[:, None].transpose(-2, -1)
            two = lambda x: torch.linalg.matrix_norm(x, ord=2)      # noqa: E731
            return two(m) / (two(qk)[None, :] * two(ov)[:, None])
        if kind == "q-composition":                          # = W_QK built as W_K W_Q^T, in norm                          # head a writes into the query side
            m = ov[:, None] @ qk[None]
        elif kind == "no-transpose":
            m = qk[None] @ ov[:, None]
        else:
            m = qk[None] @ ov[:, None].transpose(-2, -1)
        score = torch.linalg.matrix_norm(m)
        if kind == "unnormalised":
            return score
        score = score / (torch.linalg.matrix_norm(qk)[None, :] * torch.linalg.matrix_norm(ov)[:, None])
        return score.T if kind == "transposed" else score
    return wrong


def _kc_explain(case, outcome):
    w_q, _, w_v, _ = case.args
    h2, h1 = w_q.shape[0], w_v.shape[0]
    if outcome.status == "value" and outcome.value.kind == "tensor" and h1 != h2:
        if tuple(outcome.value.data.shape) == (h2, h1):
            return "one row per first-layer head a and one column per second-layer head b: (h1, h2)"
    return None


K_COMPOSITION = Exercise(
    id="induction.k_composition", title="Which heads compose? K-composition from the weights",
    lesson="13-induction-heads", function="k_composition", params=("w_q", "w_k", "w_v", "w_o"), points=4,
    reference=k_composition, public=_kc_public, hidden=_kc_hidden, public_seed=1304, explain=_kc_explain,
    section="How the two heads work together: K-composition",
    mistakes=(
        Mistake("these are the norms of W_OV W_QK, which come from Q-composition (head a writing into the "
                "QUERY's stream, x_src W_OV W_QK x_k^T), or just as well from W_QK built as W_K W_Q^T (the "
                "transpose of W_Q W_K^T): in K-composition head a writes into the key's stream, x_q W_QK "
                "(x_src W_OV)^T, with W_QK = W_Q W_K^T, so M = W_QK W_OV^T", _kc_wrong("q-composition"),
                name="q-composition"),
        Mistake("the key is x_k = x_src W_OV, a row vector, so x_k^T = W_OV^T x_src^T: "
                "M = W_QK W_OV^T, with the transpose", _kc_wrong("no-transpose"), name="ov-not-transposed"),
        Mistake("divide by ||W_QK||_F ||W_OV||_F: without it the score grows with the size of the "
                "weights, not with how much the two heads line up", _kc_wrong("unnormalised"), name="unnormalised"),
        Mistake("one row per first-layer head a and one column per second-layer head b: (h1, h2), not "
                "its transpose", _kc_wrong("transposed"), name="table-transposed"),
        Mistake("measure the composition with the Frobenius norm, ||M||_F, as the statement asks; the spectral "
                "norm keeps only the largest singular value", _kc_wrong("spectral"), name="spectral-norm"),
        Mistake("compose the two matrices, M = W_QK W_OV^T, then take its norm: the cosine between W_QK and "
                "W_OV flattened asks whether they are alike, not whether one feeds the other",
                _kc_wrong("cosine"), name="cosine-of-weights"),
        Mistake("that is V-composition, head a writing into what head b's VALUES read (W_OV^a W_OV^b); "
                "K-composition goes through the keys: M = W_QK W_OV^T", _kc_wrong("v-composition"),
                name="v-composition"),
    ),
    forbidden=NO_MHA,
)


# ---------------------------------------------------------------- 2. prefix matching from the tokens

def _targets(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T, T) bool: key j is a target of query i when 1 <= j <= i and tokens[j - 1] == tokens[i]."""
    B, T = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]            # (B, T, T): token i == token j'
    target = torch.zeros(B, T, T, dtype=torch.bool)
    target[:, :, 1:] = same[:, :, :-1]                         # key j = j' + 1
    return target & torch.ones(T, T, dtype=torch.bool).tril()


def prefix_matching_score(weights: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """weights (B, h, T, T), tokens (B, T) -> (h,): per head, the mean over the (sequence,
    query) pairs that have a target of the query's total weight on its targets, the keys right
    after an earlier occurrence of its token."""
    target = _targets(tokens)                                   # (B, T, T)
    counted = target.any(dim=-1)                                # (B, T): queries with a target
    on_targets = (weights * target[:, None]).sum(dim=-1)        # (B, h, T)
    return (on_targets * counted[:, None]).sum(dim=(0, 2)) / counted.sum()


def _tokens(g, b, t, vocab):
    """(b, t) random tokens from a small vocabulary, so that repeats abound; token 0 of each
    row comes back at the end, so that every row has a query with a target."""
    tokens = torch.randint(0, vocab, (b, t), generator=g)
    tokens[:, -1] = tokens[:, 0]
    return tokens


def _repeated(g, b, half, vocab):
    first = torch.randint(0, vocab, (b, half), generator=g)
    return torch.cat([first, first], dim=1)


def _pm_public(g):
    return [Case((_causal_weights(g, 1, 2, 6), torch.tensor([[3, 1, 4, 1, 5, 3]])),
                 note="tokens 3 1 4 1 5 3: queries 3 and 5 have targets"),
            Case((_causal_weights(g, 2, 3, 8, torch.float64), _repeated(g, 2, 4, 50)),
                 note="sequences whose second half repeats the first"),
            Case((_causal_weights(g, 3, 2, 9), _tokens(g, 3, 9, 3)), note="three token values: many targets")]


def _pm_hidden(g):
    # random tokens from 2 to 4 values: queries with several earlier occurrences, and queries
    # with none, in every case
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        b, t = randint(g, 1, 3), randint(g, 7, 12)
        cases.append(Case((_causal_weights(g, b, randint(g, 2, 4), t, dt), _tokens(g, b, t, randint(g, 2, 4)))))
    return cases


def _pm_wrong(kind):
    def wrong(weights, tokens):
        B, T = tokens.shape
        same = tokens[:, :, None] == tokens[:, None, :]
        lower = torch.ones(T, T, dtype=torch.bool).tril(-1)
        if kind == "previous-token":
            return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))
        if kind == "half":
            half = T // 2
            i = torch.arange(half, T)
            return weights[:, :, i, i - half + 1].mean(dim=(0, 2))
        if kind == "occurrence":                                # the earlier occurrence itself
            target = same & lower
        elif kind == "roll":                                    # previous tokens by a roll: key 0's wraps
            before = tokens.roll(1, dims=1)                     # tokens[j - 1], and the LAST token for j = 0
            target = (tokens[:, :, None] == before[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
        else:
            target = _targets(tokens)
        if kind == "latest":                                    # only the most recent occurrence's successor
            idx = torch.arange(T).expand(B, T, T)
            last = torch.where(target, idx, -1).amax(dim=-1, keepdim=True)
            target = target & (idx == last)
        counted = target.any(dim=-1)
        on = (weights * target[:, None]).sum(dim=-1)
        if kind == "mean-over-targets":
            on = on / target.sum(dim=-1).clamp(min=1)[:, None]
        if kind == "all-queries":
            return on.mean(dim=(0, 2))
        return (on * counted[:, None]).sum(dim=(0, 2)) / counted.sum()
    return wrong


PREFIX = Exercise(
    id="induction.prefix_matching_score", title="A prefix-matching score from the tokens",
    lesson="13-induction-heads", function="prefix_matching_score", params=("weights", "tokens"), points=4,
    reference=prefix_matching_score, public=_pm_public, hidden=_pm_hidden, public_seed=1305,
    section="Finding the heads by measurement",
    mistakes=(
        Mistake("an induction head attends to the token AFTER an earlier occurrence (key j with "
                "tokens[j - 1] == tokens[i]), not to the earlier occurrence itself (that is a "
                "duplicate-token head)", _pm_wrong("occurrence"), name="duplicate-token"),
        Mistake("average over the queries that have a target only: a query whose token never occurred "
                "before has nothing to match", _pm_wrong("all-queries"), name="all-queries"),
        Mistake("a query with several earlier occurrences has several targets: add up its weight on "
                "all of them, do not average", _pm_wrong("mean-over-targets"), name="mean-over-targets"),
        Mistake("every earlier occurrence counts, not only the most recent one: sum the weight on the "
                "tokens after each of them", _pm_wrong("latest"), name="latest-only"),
        Mistake("a prefix-matching head attends to the token AFTER an earlier occurrence of the query's own "
                "token: the weight on key i - 1, the previous token, is what a previous-token head scores",
                _pm_wrong("previous-token"), name="previous-token"),
        Mistake("the repeats are found from the tokens themselves, wherever they are: do not assume the second "
                "half of each sequence repeats the first", _pm_wrong("half"), name="second-half-assumed"),
        Mistake("key 0 has no previous token, so it is never a target: a roll by one wraps the LAST token into "
                "position 0, and a query with that token then counts key 0 (shift with a slice, or leave j = 0 out)",
                _pm_wrong("roll"), name="roll-wraps"),
    ),
    forbidden=NO_MHA,
)


# ---------------------------------------------------------------- 3. mean-ablation

def mean_ablate_head(head_outputs: torch.Tensor, out_proj_weight: torch.Tensor, head: int) -> torch.Tensor:
    """head_outputs (B, h, T, d_h), out_proj_weight (C, C) in nn.Linear's layout (y = x @ W.T),
    C = h * d_h -> (B, T, C): the layer's output with head ``head``'s output replaced by its
    mean over the batch and the positions."""
    B, h, T, d = head_outputs.shape
    mean = head_outputs[:, head].mean(dim=(0, 1))               # (d_h,): the head's average output
    ablated = head_outputs.clone()
    ablated[:, head] = mean
    return ablated.transpose(1, 2).reshape(B, T, h * d) @ out_proj_weight.T


def _ablate(o, w, head, replace):
    B, h, T, d = o.shape
    x = o.clone()
    x[:, head] = replace(o)
    return x.transpose(1, 2).reshape(B, T, h * d) @ w.T


def _ablate_merged(o, w, head):
    """The right ablation, merged by a plain reshape of (B, h, T, d)."""
    B, h, T, d = o.shape
    x = o.clone()
    x[:, head] = o[:, head].mean(dim=(0, 1))
    return x.reshape(B, T, h * d) @ w.T


def _rows_zeroed(o, w, head):
    B, h, T, d = o.shape
    w = w.clone()
    w[head * d:(head + 1) * d] = 0
    return o.transpose(1, 2).reshape(B, T, h * d) @ w.T


def _ma_case(g, b, h, t, d, head, dtype=torch.float32):
    c = h * d
    o = randn(g, b, h, t, d, dtype=torch.float64) + 2.0 * randn(g, 1, h, 1, d, dtype=torch.float64)  # a mean far from 0
    return Case((o.to(dtype), randn(g, c, c, dtype=dtype, scale=c ** -0.5), head))


def _ma_public(g):
    return [_ma_case(g, 2, 2, 3, 2, 0), _ma_case(g, 3, 3, 4, 2, 2, torch.float64), _ma_case(g, 2, 4, 2, 3, 1)]


def _ma_hidden(g):
    # B >= 2, T >= 2, d >= 2: the mean over the batch and positions differs from a mean over
    # positions per sequence, over features, or over the heads
    cases = []
    for dt in (torch.float32, torch.float64, torch.float32):
        h = randint(g, 2, 4)
        cases.append(_ma_case(g, randint(g, 2, 3), h, randint(g, 2, 6), randint(g, 2, 4), randint(g, 0, h - 1), dt))
    return cases


MEAN_ABLATE = Exercise(
    id="induction.mean_ablate_head", title="Mean-ablation of a head", lesson="13-induction-heads",
    function="mean_ablate_head", params=("head_outputs", "out_proj_weight", "head"), points=3,
    reference=mean_ablate_head, public=_ma_public, hidden=_ma_hidden, public_seed=1306,
    section="Removing heads: which ones matter?",
    mistakes=(
        Mistake("that is zero-ablation, as in this lesson: mean-ablation replaces the head's output by "
                "its average output, which keeps the next layer's input on its usual scale",
                lambda o, w, head: _ablate(o, w, head, lambda o: 0.0), name="zero-ablation"),
        Mistake("average the head's output over the batch AND the positions: one (d_h,) vector for the "
                "whole data, not one per sequence",
                lambda o, w, head: _ablate(o, w, head, lambda o: o[:, head].mean(dim=1, keepdim=True)),
                name="mean-per-sequence"),
        Mistake("average over the batch and the positions, keeping the d_h features apart: the mean over "
                "a token's features is one number, not the head's average output",
                lambda o, w, head: _ablate(o, w, head, lambda o: o[:, head].mean(dim=-1, keepdim=True)),
                name="mean-over-features"),
        Mistake("replace the head by ITS OWN mean output, not by the mean of all the heads",
                lambda o, w, head: _ablate(o, w, head, lambda o: o.mean(dim=(0, 1, 2))), name="mean-of-all-heads"),
        Mistake("nn.Linear computes x @ W.T: transpose the weight",
                lambda o, w, head: _ablate(o, w.T, head, lambda o: o[:, head].mean(dim=(0, 1))),
                name="weight-not-transposed"),
        Mistake("that is the lesson's mean, over the sequences at each position, one vector per position; this "
                "exercise asks for one mean over the batch AND the positions, a single (d_h,) vector",
                lambda o, w, head: _ablate(o, w, head, lambda o: o[:, head].mean(dim=0, keepdim=True)),
                name="mean-per-position"),
        Mistake("replace the head's output by its mean and keep it: zeroing the head's rows of W_O and adding "
                "nothing back is zero-ablation", _rows_zeroed, name="rows-zeroed"),
        Mistake("merge the heads by moving the head axis next to d_h first, (B, h, T, d_h) -> (B, T, h, d_h), then "
                "reshaping: a plain reshape of (B, h, T, d_h) to (B, T, C) mixes positions across heads",
                lambda o, w, head: _ablate_merged(o, w, head), name="direct-merge",
                section="Removing heads: which ones matter?"),
        Mistake("mean-ablation REPLACES the head's output by its mean; subtracting the mean keeps the output's "
                "variation, which carries what the head says about each input",
                lambda o, w, head: _ablate(o, w, head, lambda o: o[:, head] - o[:, head].mean(dim=(0, 1))),
                name="mean-subtracted"),
        Mistake("average over the whole batch, not over the first sequence's positions only",
                lambda o, w, head: _ablate(o, w, head, lambda o: o[0, head].mean(dim=0)), name="first-sequence-mean"),
    ),
    forbidden=NO_MHA,
)

# ---------------------------------------------------------------- 4. a prediction: which pairs compose

# The toy model of the statement: where each first-layer head writes, and where each second-layer
# head reads its queries, keys and values, as blocks A to D of four features each.
WRITES = {0: "B", 1: "CD", 2: "A", 3: "B"}
READS = {"queries": {0: "A", 1: "B", 2: "D", 3: "B"},
         "keys": {0: "B", 1: "C", 2: "AB", 3: "D"},
         "values": {0: "C", 1: "AB", 2: "C", 3: "AB"}}


def _pairs(role: str) -> int:
    """How many (first-layer head, second-layer head) pairs compose through ``role``: the first
    writes into a block the second reads there."""
    return sum(bool(set(w) & set(r)) for w in WRITES.values() for r in READS[role].values())


def composing_head() -> int:
    """Four first-layer heads write into blocks of a residual stream of 16 features, and four
    second-layer heads read their queries, keys and values from blocks of it (the tables of
    the statement): how many (first-layer head, second-layer head) pairs K-compose?"""
    return _pairs("keys")


COMPOSING_HEAD = Exercise(
    id="induction.composing_head", title="Predict: how many pairs K-compose?", lesson="13-induction-heads",
    function="composing_head", params=(), points=2, reference=composing_head, answer="number", tolerance=0.0,
    public=lambda g: [Case((), note="four first-layer heads, four second-layer heads")], hidden=lambda g: [],
    public_seed=1307,
    section="How the two heads work together: K-composition",
    mistakes=(
        Mistake("that counts the pairs where the first-layer head writes what the second-layer head's QUERIES read: "
                "Q-composition; K-composition runs through the keys, the blocks W_K reads",
                lambda: _pairs("queries"), name="q-composition"),
        Mistake("that counts the pairs where the first-layer head writes what the second-layer head's VALUES read: "
                "V-composition; K-composition runs through the keys, the blocks W_K reads",
                lambda: _pairs("values"), name="v-composition"),
        Mistake("a pair K-composes only where the first-layer head writes into a block the second-layer head's KEYS "
                "read; many pairs share no block there", lambda: len(WRITES) * len(READS["keys"]), name="every-pair"),
        Mistake("that adds the pairs of all three kinds, Q-, K- and V-composition: count only those that compose "
                "through the keys", lambda: sum(_pairs(r) for r in READS), name="all-three-kinds"),
        Mistake("count pairs, not heads: a first-layer head whose output the keys of two second-layer heads read "
                "makes two pairs, and a second-layer head whose keys read two heads' outputs makes two",
                lambda: sum(any(set(w) & set(r) for r in READS["keys"].values()) for w in WRITES.values()),
                name="heads-not-pairs"),
        Mistake("count pairs of heads, not blocks: two first-layer heads writing into the block a key reads make two "
                "pairs", lambda: sum(len(r) for r in READS["keys"].values()), name="blocks-not-pairs"),
    ),
    forbidden=NO_MHA, dtypes=(),
)

EXERCISES = (K_COMPOSITION, PREFIX, MEAN_ABLATE, COMPOSING_HEAD)

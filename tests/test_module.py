"""mha.MultiHeadAttention and mha.SingleHeadAttention: what the layers compute.

Two float32 computations of the same maths (two backends, permuted inputs, a padded and an
unpadded sequence) must each be as accurate as the other, within 2x, against the module in
float64 (tests/precision.py): neither may carry an error the other does not.
"""

import copy
import math

import pytest
import torch

import mha
from precision import assert_as_accurate_as, assert_within_rounding

BACKENDS = ["sdpa", "naive"]


def make(embed_dim=8, num_heads=2, *, seed=0, **kwargs):
    """A module built from a fixed seed, with random biases when bias=True (torch starts them at 0)."""
    torch.manual_seed(seed)
    m = mha.MultiHeadAttention(embed_dim, num_heads, **kwargs)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    return m.eval()


def rand(*shape, seed=1, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def in_float64(m):
    return copy.deepcopy(m).double()


def exact(m, *args, **kwargs):
    """m's output in float64 on the same inputs: the weights, tensors and float masks converted exactly."""
    to64 = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t   # noqa: E731
    with torch.no_grad():
        return in_float64(m)(*map(to64, args), **{k: to64(v) for k, v in kwargs.items()})


def assert_equally_accurate(a, b, exact):
    """a and b, two float32 computations of the same maths, each as accurate as the other."""
    assert_as_accurate_as([a, b], [b, a], [exact, exact], names=["first", "second"])


# --- shapes ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_self_attention_output_has_the_query_shape(backend):
    m = make(12, 3, backend=backend)
    assert m(rand(2, 5, 12)).shape == (2, 5, 12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_need_weights_returns_weights_per_head_query_and_key(backend):
    m = make(12, 3, kdim=6, vdim=10, backend=backend)
    out, weights = m(rand(2, 5, 12), rand(2, 7, 6), rand(2, 7, 10), need_weights=True)
    assert out.shape == (2, 5, 12)
    assert weights.shape == (2, 3, 5, 7)


def test_gqa_weights_have_one_map_per_query_head():
    m = make(12, 6, num_kv_heads=2)
    _, weights = m(rand(1, 4, 12), need_weights=True)
    assert weights.shape == (1, 6, 4, 4)


def test_module_weight_rows_sum_to_one():
    m = make(8, 2)
    _, weights = m(rand(2, 5, 8), is_causal=True, need_weights=True)
    # Tk = 5 exponentials times the reciprocal of their own sum, summed again here: two sums of
    # Tk terms of total 1 and the division, within 2 (Tk + 1) eps of 1, whatever the scores
    assert_within_rounding(weights.sum(-1), torch.ones(2, 2, 5), terms=5 + 1)


# --- the two backends and the single head ---------------------------------------------

@pytest.mark.parametrize("case", ["plain", "causal", "padding", "cross", "gqa-causal", "mqa-padding", "float-mask"])
def test_naive_and_sdpa_backends_agree(case):
    kw = {"num_kv_heads": 2} if case == "gqa-causal" else {"num_kv_heads": 1} if case == "mqa-padding" else {}
    sdpa, naive = make(16, 4, bias=True, backend="sdpa", **kw), make(16, 4, bias=True, backend="naive", **kw)
    x, args, call = rand(2, 5, 16), (), {}
    if "causal" in case:
        call["is_causal"] = True
    if "padding" in case:
        call["mask"] = mha.padding_mask([5, 3], 5)
    if case == "float-mask":
        call["mask"] = rand(2, 1, 5, 5, seed=4)
    if case == "cross":
        args = (rand(2, 7, 16, seed=2), rand(2, 7, 16, seed=3))
    assert_equally_accurate(sdpa(x, *args, **call), naive(x, *args, **call), exact(naive, x, *args, **call))


def test_one_head_equals_single_head_attention_bit_for_bit_with_the_naive_backend():
    torch.manual_seed(0)
    single = mha.SingleHeadAttention(8, 8)
    torch.manual_seed(0)
    multi = mha.MultiHeadAttention(8, 1, backend="naive")
    x = rand(2, 5, 8)
    assert torch.equal(multi(x), single(x))
    assert torch.equal(multi(x, is_causal=True), single(x, is_causal=True))


def test_one_head_equals_single_head_attention_with_the_sdpa_backend():
    torch.manual_seed(0)
    single = mha.SingleHeadAttention(8, 8)
    torch.manual_seed(0)
    multi = mha.MultiHeadAttention(8, 1, backend="sdpa")
    x = rand(2, 5, 8)
    assert_equally_accurate(multi(x, is_causal=True), single(x, is_causal=True), exact(single, x, is_causal=True))


def test_single_head_attention_returns_weights_over_keys():
    single = mha.SingleHeadAttention(8, 4)
    out, weights = single(rand(2, 5, 8), need_weights=True)
    assert out.shape == (2, 5, 8) and weights.shape == (2, 5, 5)


# --- symmetries -----------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_permuting_tokens_permutes_outputs_without_a_mask(backend):
    m = make(8, 2, bias=True, backend=backend)
    x = rand(2, 6, 8)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert_equally_accurate(m(x[:, perm]), m(x)[:, perm], exact(m, x)[:, perm])


@pytest.mark.parametrize("backend", BACKENDS)
def test_permuting_keys_and_values_together_leaves_cross_attention_unchanged(backend):
    m = make(8, 2, backend=backend)
    x, mem = rand(2, 3, 8), rand(2, 6, 8, seed=2)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert_equally_accurate(m(x, mem[:, perm], mem[:, perm]), m(x, mem, mem), exact(m, x, mem, mem))


# --- causality ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_outputs_do_not_depend_on_future_tokens(backend):
    m = make(8, 2, bias=True, backend=backend)
    x = rand(2, 6, 8)
    changed = x.clone()
    changed[:, 4:] = rand(2, 2, 8, seed=9)
    a, b = m(x, is_causal=True), m(changed, is_causal=True)
    assert torch.equal(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_gradients_do_not_reach_future_tokens(backend):
    m = make(8, 2, bias=True, backend=backend)
    x = rand(1, 6, 8).requires_grad_()
    out = m(x, is_causal=True)
    t = 2
    (grad,) = torch.autograd.grad(out[:, t].sum(), x)
    assert (grad[:, t + 1:] == 0).all()
    assert (grad[:, : t + 1].abs().sum(-1) > 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_causal_mask_earlier_outputs_do_see_future_tokens(backend):
    m = make(8, 2, backend=backend)
    x = rand(1, 6, 8)
    changed = x.clone()
    changed[:, 5] += 1.0
    assert not torch.allclose(m(x)[:, 0], m(changed)[:, 0])


# --- padding --------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_padded_positions_content_does_not_change_real_outputs(backend, causal):
    m = make(8, 2, bias=True, backend=backend)
    lengths = [6, 3]
    x = rand(2, 6, 8)
    changed = x.clone()
    changed[1, 3:] = rand(3, 8, seed=7) * 10
    mask = mha.padding_mask(lengths, 6)
    a, b = m(x, mask=mask, is_causal=causal), m(changed, mask=mask, is_causal=causal)
    assert torch.equal(a[0], b[0])
    assert_equally_accurate(a[1, :3], b[1, :3], exact(m, x, mask=mask, is_causal=causal)[1, :3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_equals_running_the_unpadded_sequence_alone(backend):
    m = make(8, 2, bias=True, backend=backend)
    x = rand(1, 6, 8)
    short = m(x[:, :4])
    padded = m(x, mask=mha.padding_mask([4], 6))
    assert_equally_accurate(padded[:, :4], short, exact(m, x[:, :4]))


# --- empty rows -----------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_query_that_may_attend_to_nothing_gives_zeros_and_no_nan(backend, kind):
    m = make(8, 2, backend=backend)  # no bias: the output of an empty row is exactly 0
    keep = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    keep[1, :, 2] = False  # query 2 of batch element 1 may attend to nothing
    mask = keep if kind == "bool" else mha.to_additive(keep, torch.float32)
    x = rand(2, 4, 8).requires_grad_()
    out = m(x, mask=mask)
    assert torch.isfinite(out).all()
    assert (out[1, 2] == 0).all()
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for p in m.parameters():
        assert torch.isfinite(p.grad).all()


def test_empty_rows_get_zero_weights_and_the_others_sum_to_one():
    m = make(8, 2)
    keep = mha.padding_mask([0, 3], 4)  # batch element 0 may attend to nothing
    _, weights = m(rand(2, 4, 8), mask=keep, need_weights=True)
    assert (weights[0] == 0).all()
    assert_within_rounding(weights[1].sum(-1), torch.ones(2, 4), terms=4 + 1)   # as for the rows above, Tk = 4


# --- grouped-query attention ----------------------------------------------------------

def gqa_reference(m, x, *, kv_head_of):
    """Grouped-query attention written head by head from m's weights (self-attention, no bias).

    kv_head_of(i) is the key/value head that query head i reads.
    """
    C, h, g, d = m.embed_dim, m.num_heads, m.num_kv_heads, m.head_dim
    Wq, Wk, Wv = m.in_proj.weight.split([C, g * d, g * d])
    q, k, v = x @ Wq.T, x @ Wk.T, x @ Wv.T  # (B, T, C), (B, T, g*d), (B, T, g*d)
    heads = []
    for i in range(h):
        j = kv_head_of(i)
        qi, kj, vj = q[..., i * d:(i + 1) * d], k[..., j * d:(j + 1) * d], v[..., j * d:(j + 1) * d]
        w = torch.softmax(qi @ kj.transpose(-2, -1) / math.sqrt(d), dim=-1)
        heads.append(w @ vj)  # (B, T, d)
    return torch.cat(heads, dim=-1) @ m.out_proj.weight.T


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("h,g", [(4, 2), (6, 3), (4, 1)])
def test_gqa_matches_a_head_by_head_reference_where_head_i_reads_kv_head_i_div_group(backend, h, g):
    m = make(12, h, num_kv_heads=g, backend=backend)
    x = rand(2, 5, 12)
    expected = gqa_reference(m, x, kv_head_of=lambda i: i // (h // g))
    truth = gqa_reference(in_float64(m), x.double(), kv_head_of=lambda i: i // (h // g))
    assert_as_accurate_as(m(x), expected, truth)


def test_gqa_with_repeat_instead_of_repeat_interleave_would_give_a_different_output():
    h, g = 4, 2
    m = make(12, h, num_kv_heads=g, backend="naive")
    x = rand(2, 5, 12)
    kv = torch.arange(g)
    interleave, repeat = kv.repeat_interleave(h // g).tolist(), kv.repeat(h // g).tolist()
    assert interleave == [0, 0, 1, 1] and repeat == [0, 1, 0, 1]
    with_repeat = gqa_reference(m, x, kv_head_of=lambda i: repeat[i])
    with_interleave = gqa_reference(m, x, kv_head_of=lambda i: interleave[i])
    truth = gqa_reference(in_float64(m), x.double(), kv_head_of=lambda i: interleave[i])
    assert_as_accurate_as(m(x), with_interleave, truth)
    assert not torch.allclose(m(x), with_repeat, atol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gqa_with_as_many_kv_heads_as_heads_is_plain_multi_head_attention(backend):
    gqa = make(12, 4, num_kv_heads=4, bias=True, backend=backend)
    plain = make(12, 4, bias=True, backend=backend)
    plain.load_state_dict(gqa.state_dict())
    x = rand(2, 5, 12)
    assert torch.equal(gqa(x, is_causal=True), plain(x, is_causal=True))
    assert sum(p.numel() for p in gqa.parameters()) == sum(p.numel() for p in plain.parameters())


def test_gqa_shrinks_the_key_and_value_projections():
    m = make(12, 6, num_kv_heads=2)
    assert m.in_proj.weight.shape == (12 + 2 * 2 * 2, 12)  # C + 2 * g * d rows, d = 2


# --- dropout --------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_is_inactive_in_eval_mode(backend):
    with_dropout = make(8, 2, dropout=0.5, backend=backend).eval()
    without = make(8, 2, dropout=0.0, backend=backend).eval()
    x = rand(2, 5, 8)
    first = with_dropout(x)
    assert torch.equal(first, with_dropout(x))
    assert torch.equal(first, without(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_is_active_in_train_mode(backend):
    m = make(8, 2, dropout=0.5, backend=backend).train()
    x = rand(2, 5, 8)
    torch.manual_seed(1)
    a = m(x)
    b = m(x)
    assert not torch.allclose(a, b)
    assert not torch.allclose(a, m.eval()(x))


def test_training_weights_from_the_module_have_individually_dropped_entries():
    m = make(8, 2, dropout=0.5).train()
    torch.manual_seed(0)
    _, weights = m(rand(1, 16, 8), need_weights=True)
    zeros_per_row = (weights == 0).sum(-1)
    assert ((zeros_per_row > 0) & (zeros_per_row < 16)).all()


# --- gradients ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_of_the_module_in_float64(backend):
    m = make(4, 2, bias=True, backend=backend, kdim=3, vdim=5).double()
    q = rand(1, 3, 4, dtype=torch.float64).requires_grad_()
    k = rand(1, 4, 3, seed=2, dtype=torch.float64).requires_grad_()
    v = rand(1, 4, 5, seed=3, dtype=torch.float64).requires_grad_()
    mask = mha.padding_mask([3], 4)
    assert torch.autograd.gradcheck(lambda q, k, v: m(q, k, v, mask=mask), (q, k, v))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_of_causal_self_attention_in_float64(backend):
    m = make(4, 2, bias=True, backend=backend).double()
    x = rand(2, 3, 4, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: m(x, is_causal=True), (x,))


def test_max_len_allows_sequences_up_to_it():
    m = make(8, 2, max_len=5)
    assert m(rand(1, 5, 8)).shape == (1, 5, 8)


def test_the_package_imports_its_names_on_first_use():
    """``import mha`` alone imports no torch (``mha report`` needs none); every name of
    ``mha.__all__`` and every submodule is there when asked for, and a wrong name is an
    AttributeError that names it."""
    import subprocess
    import sys

    code = """
import sys
import mha
assert "torch" not in sys.modules
assert set(mha.__all__) <= set(dir(mha))
assert mha.masks.causal_mask is mha.causal_mask
for name in mha.__all__:
    getattr(mha, name)
from mha import MultiHeadAttention, flash_attention
try:
    mha.MultiheadAttention
except AttributeError as e:
    assert "MultiheadAttention" in str(e)
else:
    raise AssertionError("no AttributeError")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


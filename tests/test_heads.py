"""mha.split_heads / mha.merge_heads: (B, T, C) <-> (B, h, T, C // h)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha

shapes = st.tuples(
    st.integers(1, 3),  # B
    st.integers(1, 6),  # T
    st.integers(1, 4),  # h
    st.integers(1, 5),  # d
)


@settings(max_examples=40, deadline=None)
@given(shapes)
def test_merge_heads_inverts_split_heads(shape):
    B, T, h, d = shape
    x = torch.randn(B, T, h * d)
    assert torch.equal(mha.merge_heads(mha.split_heads(x, h)), x)


@settings(max_examples=40, deadline=None)
@given(shapes)
def test_split_heads_inverts_merge_heads(shape):
    B, T, h, d = shape
    x = torch.randn(B, h, T, d)
    assert torch.equal(mha.split_heads(mha.merge_heads(x), h), x)


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_split_heads_returns_batch_heads_time_head_dim(shape):
    B, T, h, d = shape
    assert mha.split_heads(torch.zeros(B, T, h * d), h).shape == (B, h, T, d)
    assert mha.merge_heads(torch.zeros(B, h, T, d)).shape == (B, T, h * d)


def _labelled(B=2, T=3, C=8):
    """x[b, t, f] = 1000 b + 100 t + f: every entry says where it came from."""
    b, t, f = torch.meshgrid(torch.arange(B), torch.arange(T), torch.arange(C), indexing="ij")
    return (1000 * b + 100 * t + f).float()


def test_head_i_holds_feature_slice_i_of_every_token():
    x, h = _labelled(), 4
    d = x.shape[-1] // h
    heads = mha.split_heads(x, h)
    for i in range(h):
        assert torch.equal(heads[:, i], x[:, :, i * d:(i + 1) * d])


def test_a_direct_view_to_heads_would_put_other_tokens_in_a_token_row():
    x, h = _labelled(), 4
    B, T, C = x.shape
    d = C // h
    wrong = x.view(B, h, T, d)
    assert not torch.equal(wrong[:, 0], x[:, :, 0:d])
    token_of = lambda t: (t // 100 % 10).long()  # noqa: E731
    # split_heads: row t of every head holds token t
    right = mha.split_heads(x, h)
    assert (token_of(right) == torch.arange(T)[:, None]).all()
    # direct view: row t of a head is not token t (head 0, row 1 holds token 0's features)
    assert not (token_of(wrong) == torch.arange(T)[:, None]).all()
    assert (token_of(wrong[0, 0, 1]) == 0).all()


def test_split_heads_is_a_view_without_copy():
    x = torch.randn(2, 3, 8)
    assert mha.split_heads(x, 2).data_ptr() == x.data_ptr()

"""Slips in lesson 08's gradients: the temperature's gradient and a linear layer's backward."""

import torch

from . import Slip


def scale_grad_through_the_plain_softmax(q, k, v, grad_out, scale):
    raw = q @ k.transpose(-2, -1)                                    # (B, h, Tq, Tk)
    p = torch.softmax(raw, dim=-1)                                   # the scale left out of the forward
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))
    return (ds * raw).sum(dim=(0, 2, 3))


def scale_grad_rowsum_down_the_columns(q, k, v, grad_out, scale):
    raw = q @ k.transpose(-2, -1)
    p = torch.softmax(scale[:, None, None] * raw, dim=-1)
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - (p * dp).sum(dim=-2, keepdim=True))               # the Jacobian's sum over the queries
    return (ds * raw).sum(dim=(0, 2, 3))


def linear_backward_dx_through_w_t(x, w, b, grad_y):
    return grad_y @ w.T, torch.einsum("bto,bti->oi", grad_y, x), grad_y.sum(dim=(0, 1))


def linear_backward_einsum_letter_typo(x, w, b, grad_y):
    return grad_y @ w, torch.einsum("bto,btj->oi", grad_y, x), grad_y.sum(dim=(0, 1))


def linear_backward_dw_in_by_out(x, w, b, grad_y):
    dw = torch.einsum("bti,bto->io", x, grad_y)                      # (n_in, n_out)
    return grad_y @ w, dw, grad_y.sum(dim=(0, 1))


def scale_grad_mean_over_queries(q, k, v, grad_out, scale):
    raw = q @ k.transpose(-2, -1)
    p = torch.softmax(scale[:, None, None] * raw, dim=-1)
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))
    return (ds * raw).sum(dim=-1).mean(dim=-1).sum(dim=0)            # summed over keys, averaged over queries


SLIPS = {
    "grads.scale_grad": [
        Slip(scale_grad_mean_over_queries, "summed over the keys, averaged over the queries"),
        Slip(scale_grad_through_the_plain_softmax, "the forward's softmax without the scale",
             ("p-without-scale",)),
        Slip(scale_grad_rowsum_down_the_columns, "the softmax Jacobian's sum taken over the queries (dim 0)"),
    ],
    "grads.linear_backward": [
        Slip(linear_backward_dx_through_w_t, "dx = grad_y @ w.T", ("dx-w-transposed",)),
        Slip(linear_backward_einsum_letter_typo, "an einsum with a letter that is not in the output"),
        Slip(linear_backward_dw_in_by_out, "dw in the (n_in, n_out) layout", ("dw-transposed",)),
    ],
}

"""Slips in lesson 09's counts, and in the prediction of how the count grows."""

import math

from . import Slip


def cross_layer_flops_one_sequence(batch, tgt_len, src_len, embed_dim, num_heads):
    T, S, C = tgt_len, src_len, embed_dim
    return 4 * T * C * C + 4 * S * C * C + 4 * T * S * C           # the batch left out everywhere


def cross_layer_flops_projections_on_both(batch, tgt_len, src_len, embed_dim, num_heads):
    B, T, S, C = batch, tgt_len, src_len, embed_dim
    return 8 * B * (T + S) * C * C + 4 * B * T * S * C               # all four projections on both sides


def flop_growth_between_the_two():
    return math.sqrt(8 * 64)                                          # "between 8 and 64"


def flop_growth_midpoint():
    return (8 + 64) / 2


def flop_growth_three_projections():
    count = lambda T, C=512: 6 * T * C * C + 4 * T * T * C
    return count(4096) / count(512)


def flop_growth_scores_of_one_head():
    count = lambda T, C=512, h=8: 8 * T * C * C + 4 * T * T * (C // h)
    return count(4096) / count(512)


def flop_growth_smaller_over_larger():
    count = lambda T, C=512: 8 * T * C * C + 4 * T * T * C
    return count(512) / count(4096)


def flop_growth_constants_dropped():
    """T C^2 for the projections and T^2 C for the products: the constants left out."""
    count = lambda T, C=512: T * C * C + T * T * C
    return count(4096) / count(512)


SLIPS = {
    "cost.cross_layer_flops": [
        Slip(cross_layer_flops_one_sequence, "the batch left out"),
        Slip(cross_layer_flops_projections_on_both, "every projection counted on the target and the source"),
    ],
    "cost.flop_growth": [
        Slip(flop_growth_between_the_two, "the geometric mean of the linear and quadratic growths",
             ("geometric-mean",)),
        Slip(flop_growth_midpoint, "the plain average of 8 and 64", ("plain-average",)),
        Slip(flop_growth_three_projections, "W_O left out: 6 T C^2", ("no-output-proj",)),
        Slip(flop_growth_scores_of_one_head, "the T^2 part of one head", ("one-head-t2",)),
        Slip(flop_growth_smaller_over_larger, "the ratio upside down", ("upside-down",)),
        Slip(flop_growth_constants_dropped, "the constants dropped: the two parts weighed alike at T = 512",
             ("plain-average",)),
    ],
}

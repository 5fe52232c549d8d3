"""Slips in lesson 14: the page's attention kernel fixed with one slip left in (Triton, run by its
interpreter), and the prediction of the tiles a causal kernel visits (plain Python)."""

import torch

from . import Slip

try:  # Triton, with its interpreter where there is no GPU (Linux only): no kernel slips without it
    import mha.kernels  # noqa: F401
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - macOS, Windows
    triton = None

LOG2E = 1.4426950408889634

if triton is not None:
    @triton.jit
    def _slipped_kernel(q_ptr, k_ptr, v_ptr, o_ptr, Tq, Tk, scale, CAUSAL: tl.constexpr, D: tl.constexpr,
                        SLIP: tl.constexpr):
        """Blocks of 16 queries and 16 keys, each program one block of queries; SLIP picks the one
        thing a student left wrong: 1 exp2 of natural scores, 2 a base-2 max with an exp rescale,
        3 an offset one too large, 4 the loop bound of the block's first row, 5 the last partial
        key block never loaded."""
        first = tl.program_id(0) * 16
        rows = first + tl.arange(0, 16)
        cols = tl.arange(0, D)
        q = tl.load(q_ptr + rows[:, None] * D + cols[None, :], mask=rows[:, None] < Tq, other=0.0)
        best = tl.full([16], float("-inf"), tl.float32)
        total = tl.zeros([16], tl.float32)
        acc = tl.zeros([16, D], tl.float32)
        stop = Tk
        if SLIP == 4:
            if CAUSAL:
                stop = tl.minimum(tl.maximum(first + 1 + Tk - Tq, 0), Tk)
        if SLIP == 5:
            stop = Tk // 16 * 16
        for start in range(0, stop, 16):
            keys = start + tl.arange(0, 16)
            k = tl.load(k_ptr + keys[:, None] * D + cols[None, :], mask=keys[:, None] < Tk, other=0.0)
            v = tl.load(v_ptr + keys[:, None] * D + cols[None, :], mask=keys[:, None] < Tk, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            if SLIP == 2:
                s = s * 1.4426950408889634
            ok = keys[None, :] < Tk
            if CAUSAL:
                if SLIP == 3:
                    ok = ok & (keys[None, :] <= rows[:, None] + Tk - Tq + 1)
                else:
                    ok = ok & (keys[None, :] <= rows[:, None] + Tk - Tq)
            s = tl.where(ok, s, float("-inf"))
            top = tl.maximum(best, tl.max(s, axis=1))
            top = tl.where(top == float("-inf"), 0.0, top)
            if SLIP == 1:
                p = tl.math.exp2(s - top[:, None])
                shrink = tl.math.exp2(best - top)
            elif SLIP == 2:
                p = tl.math.exp2(s - top[:, None])
                shrink = tl.exp(best - top)
            else:
                p = tl.exp(s - top[:, None])
                shrink = tl.exp(best - top)
            total = total * shrink + tl.sum(p, axis=1)
            acc = acc * shrink[:, None] + tl.dot(p, v, input_precision="ieee")
            best = top
        out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
        tl.store(o_ptr + rows[:, None] * D + cols[None, :], out, mask=rows[:, None] < Tq)


def _slipped(q, k, v, is_causal, slip):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    _slipped_kernel[(triton.cdiv(q.shape[0], 16),)](q, k, v, out, q.shape[0], k.shape[0], q.shape[1] ** -0.5,
                                                     CAUSAL=is_causal, D=q.shape[1], SLIP=slip)
    return out


def fixed_attention_exp2_natural_scores(q, k, v, is_causal):
    return _slipped(q, k, v, is_causal, 1)


def fixed_attention_base_two_max_natural_rescale(q, k, v, is_causal):
    return _slipped(q, k, v, is_causal, 2)


def fixed_attention_one_key_ahead(q, k, v, is_causal):
    return _slipped(q, k, v, is_causal, 3)


def fixed_attention_first_row_bound(q, k, v, is_causal):
    return _slipped(q, k, v, is_causal, 4)


def fixed_attention_whole_blocks_only(q, k, v, is_causal):
    return _slipped(q, k, v, is_causal, 5)


def tiles_visited_without_the_plus_one():
    total = 0
    for first in range(0, 600, 64):
        last_row = min(first + 64, 600) - 1
        total += min(last_row + 400, 999) // 64                 # the blocks up to last_key, minus one
    return total


def tiles_visited_key_blocks_capped():
    total = 0
    for first in range(0, 600, 64):
        last_row = min(first + 64, 600) - 1
        total += min((last_row + 400) // 64 + 1, 1000 // 64)    # at most 15 key blocks, not 16
    return total


def tiles_visited_whole_grid():
    return -(-600 // 64) * -(-1000 // 64)


KERNEL_SLIPS = {"kernels.fixed_attention": [
    Slip(fixed_attention_exp2_natural_scores, "exp2 of the natural-log scores, no log2 e", ("exp2-without-log2e",)),
    Slip(fixed_attention_base_two_max_natural_rescale, "maxima and p in base 2, the rescale with exp",
         ("mixed-bases",)),
    Slip(fixed_attention_one_key_ahead, "keys j <= i + Tk - Tq + 1", ("offset-plus-one",)),
    Slip(fixed_attention_first_row_bound, "the key loop stops at the block's first row's limit",
         ("diagonal-block-skipped",)),
    Slip(fixed_attention_whole_blocks_only, "the key loop stops at Tk // 16 * 16", ("last-block-dropped",)),
]} if triton is not None else {}

SLIPS = {
    **KERNEL_SLIPS,
    "kernels.tiles_visited": [
        Slip(tiles_visited_without_the_plus_one, "last_key // 64 blocks, without the + 1", ("one-key-block-short",)),
        Slip(tiles_visited_key_blocks_capped, "the key blocks capped at Tk // 64 = 15", ("last-key-block-left-out",)),
        Slip(tiles_visited_whole_grid, "every tile of the grid", ("every-tile",)),
    ],
}

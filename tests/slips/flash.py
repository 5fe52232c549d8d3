"""Slips in lesson 10's count of the scores a tiled causal pass throws away."""

from . import Slip


def wasted_scores_whole_key_blocks(q_len, k_len, block_size):
    offset = k_len - q_len
    computed = allowed = 0
    for start in range(0, q_len, block_size):
        rows = min(block_size, q_len - start)
        last_key = min(start + rows - 1 + offset, k_len - 1)
        if last_key >= 0:
            computed += rows * (last_key // block_size + 1) * block_size     # the last key block taken whole
    for i in range(q_len):
        allowed += max(0, min(i + offset + 1, k_len))
    return computed - allowed


def wasted_scores_key_blocks_per_row(q_len, k_len, block_size):
    """Each query row computes the key blocks up to its own last key: the rows of a block
    counted as if they were tiled one by one."""
    offset = k_len - q_len
    wasted = 0
    for i in range(q_len):
        last_key = min(i + offset, k_len - 1)
        if last_key >= 0:
            computed = min((last_key // block_size + 1) * block_size, k_len)
            wasted += computed - (last_key + 1)
    return wasted


def wasted_scores_allowed_counted_top_left(q_len, k_len, block_size):
    """The visited tiles aligned bottom-right, the allowed entries counted top-left."""
    offset = k_len - q_len
    computed = 0
    for start in range(0, q_len, block_size):
        stop = min(start + block_size, q_len)
        last_key = min(stop - 1 + offset, k_len - 1)
        if last_key >= 0:
            computed += (stop - start) * min((last_key // block_size + 1) * block_size, k_len)
    allowed = sum(min(i + 1, k_len) for i in range(q_len))
    return computed - allowed


SLIPS = {
    "flash.wasted_scores": [
        Slip(wasted_scores_allowed_counted_top_left, "the allowed entries counted with the top-left mask only"),
        Slip(wasted_scores_whole_key_blocks, "the last key block counted block_size wide",
             ("full-width-key-tiles", "full-tiles")),
        Slip(wasted_scores_key_blocks_per_row, "each row's own key blocks, not those of its block's last row",
             ("key-blocks-per-row",)),
    ],
}

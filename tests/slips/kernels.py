"""Slips in lesson 14's prediction of the tiles a causal kernel visits (plain Python: no kernel)."""

from . import Slip


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


SLIPS = {
    "kernels.tiles_visited": [
        Slip(tiles_visited_without_the_plus_one, "last_key // 64 blocks, without the + 1", ("one-key-block-short",)),
        Slip(tiles_visited_key_blocks_capped, "the key blocks capped at Tk // 64 = 15", ("last-key-block-left-out",)),
        Slip(tiles_visited_whole_grid, "every tile of the grid", ("every-tile",)),
    ],
}

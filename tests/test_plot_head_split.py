"""mha.plotting.plot_head_split colours every number by the head it lands in."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mha.plotting import plot_head_split  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def input_colours(fig, seq_len, embed_dim):
    """Face colours of the input grid x, (T, C, 4): its cells are drawn first, row by row."""
    patches = fig.axes[0].patches[:seq_len * embed_dim]
    return np.array([p.get_facecolor() for p in patches]).reshape(seq_len, embed_dim, 4)


def test_correct_split_colours_the_input_in_vertical_stripes():
    colours = input_colours(plot_head_split(4, 8, 2), 4, 8)
    assert (colours == colours[:1]).all()                      # every token coloured alike
    assert not np.array_equal(colours[0, 0], colours[0, 4])    # features 0-3 and 4-7 differ


def test_direct_view_colours_the_input_in_horizontal_bands():
    colours = input_colours(plot_head_split(4, 8, 2, wrong=True), 4, 8)
    assert (colours == colours[:, :1]).all()                   # every token in one colour
    assert np.array_equal(colours[0, 0], colours[1, 0])        # tokens 0, 1 -> head 0
    assert not np.array_equal(colours[1, 0], colours[2, 0])    # tokens 2, 3 -> head 1

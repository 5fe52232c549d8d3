"""mha.plotting: the helpers return Figures and reject bad shapes."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import mha  # noqa: E402
from mha.plotting import plot_attention_heads, plot_head_split, plot_mask  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def panels(fig):
    """Axes that show an image (the heatmaps), leaving out the colorbar and empty slots."""
    return [ax for ax in fig.axes if ax.images and ax.axison and ax.get_label() != "<colorbar>"]


@pytest.mark.parametrize("h", [1, 3, 4, 6])
def test_plot_attention_heads_draws_one_panel_per_head(h):
    weights = torch.softmax(torch.randn(2, h, 5, 5), dim=-1)
    fig = plot_attention_heads(weights)
    assert isinstance(fig, Figure)
    assert len(panels(fig)) == h
    assert [ax.get_title() for ax in panels(fig)] == [f"head {i}" for i in range(h)]


def test_plot_attention_heads_accepts_one_map_and_numpy():
    fig = plot_attention_heads(np.full((3, 4), 0.25), tokens=["a", "b", "c"], key_tokens=list("wxyz"))
    assert len(panels(fig)) == 1
    assert [t.get_text() for t in panels(fig)[0].get_yticklabels()] == ["a", "b", "c"]


def test_plot_attention_heads_uses_given_titles():
    fig = plot_attention_heads(torch.rand(2, 3, 3), titles=["first", "second"])
    assert [ax.get_title() for ax in panels(fig)] == ["first", "second"]


@pytest.mark.parametrize("shape", [(3,), (1, 1, 2, 3, 3)])
def test_plot_attention_heads_rejects_a_bad_rank(shape):
    with pytest.raises(ValueError, match="weights"):
        plot_attention_heads(torch.rand(shape))


def test_plot_attention_heads_rejects_labels_of_the_wrong_length():
    with pytest.raises(ValueError, match="tokens"):
        plot_attention_heads(torch.rand(2, 3, 3), tokens=["a", "b"])


def test_plot_attention_heads_rejects_the_wrong_number_of_titles():
    with pytest.raises(ValueError, match="titles"):
        plot_attention_heads(torch.rand(2, 3, 3), titles=["only one"])


def test_plot_attention_heads_rejects_a_list():
    with pytest.raises(TypeError, match="weights"):
        plot_attention_heads([[0.5, 0.5]])


def test_plot_mask_returns_a_figure_with_one_axes():
    fig = plot_mask(mha.causal_mask(4), title="causal")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 1 and fig.axes[0].get_title() == "causal"


def test_plot_mask_shows_the_mask_values():
    mask = mha.causal_mask(3, 5)
    fig = plot_mask(mask)
    assert np.array_equal(np.asarray(fig.axes[0].images[0].get_array()), mask.numpy())


def test_plot_mask_squeezes_a_broadcastable_mask():
    fig = plot_mask(mha.causal_mask(4)[None, None])
    assert fig.axes[0].images[0].get_array().shape == (4, 4)


def test_plot_mask_draws_into_a_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    assert plot_mask(mha.causal_mask(3), ax=right) is fig
    assert right.images and not left.images


@pytest.mark.parametrize("shape", [(2, 3, 4), (5,)])
def test_plot_mask_rejects_masks_that_are_not_2d(shape):
    with pytest.raises(ValueError, match="mask"):
        plot_mask(torch.ones(shape, dtype=torch.bool))


@pytest.mark.parametrize("wrong", [False, True])
def test_plot_head_split_returns_a_figure(wrong):
    assert isinstance(plot_head_split(3, 8, 2, wrong=wrong), Figure)


def test_plot_head_split_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="num_heads"):
        plot_head_split(3, 8, 3)

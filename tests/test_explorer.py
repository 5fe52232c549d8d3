"""mha.plotting.attention_explorer: the HTML contract, the JSON round trip, bad input.

What the explorer does in a browser (slider, hover, keyboard, axe-core) is tested in
tests/test_explorer_browser.py on a page written by the test.
"""

import json

import numpy as np
import pytest
import torch
from bs4 import BeautifulSoup

import mha.plotting
from mha.explorer import AttentionExplorer
from mha.plotting import attention_explorer

TOKENS = ["the", "cat", "sat", "on", "mat"]


def weights(h=3, tq=5, tk=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(h, tq, tk, generator=g), dim=-1)


def parse(explorer):
    doc = BeautifulSoup(explorer._repr_html_(), "html.parser")
    roots = doc.select(".attention-explorer")
    assert len(roots) == 1
    return roots[0]


def payload(root):
    return json.loads(root.select_one('script[type="application/json"]').string)


def test_attention_explorer_is_exported_from_mha_plotting():
    assert mha.plotting.attention_explorer is attention_explorer


def test_html_holds_the_weights_as_json_heads_by_queries_by_keys():
    w = weights()
    data = payload(parse(attention_explorer(w, TOKENS)))
    assert set(data) == {"tokens", "heads"}  # query_tokens only when queries differ from keys
    assert data["tokens"] == TOKENS
    assert np.asarray(data["heads"]).shape == (3, 5, 5)
    # exact round trip: every float32 weight is written as the float64 of the same value
    assert np.array_equal(np.asarray(data["heads"], dtype=np.float32), w.numpy())


def test_float64_weights_round_trip_exactly():
    w = weights().double()
    data = payload(parse(attention_explorer(w, TOKENS)))
    assert np.array_equal(np.asarray(data["heads"]), w.numpy())


def test_cross_attention_lists_query_tokens():
    w = weights(h=2, tq=3, tk=5)
    data = payload(parse(attention_explorer(w, TOKENS, query_tokens=["le", "chat", "assis"])))
    assert data["query_tokens"] == ["le", "chat", "assis"]
    assert data["tokens"] == TOKENS
    assert np.asarray(data["heads"]).shape == (2, 3, 5)


def test_query_tokens_equal_to_the_keys_are_not_repeated():
    data = payload(parse(attention_explorer(weights(), TOKENS, query_tokens=list(TOKENS))))
    assert "query_tokens" not in data


def test_one_svg_rect_per_weight_with_query_and_key_indices():
    root = parse(attention_explorer(weights(h=2, tq=3, tk=5), TOKENS, query_tokens=["a", "b", "c"]))
    rects = root.select("svg rect")
    assert len(rects) == 3 * 5  # one per weight of the shown head; the slider recolours them
    cells = sorted((int(r["data-i"]), int(r["data-j"])) for r in rects)
    assert cells == [(i, j) for i in range(3) for j in range(5)]


def test_slider_selects_the_head_and_is_labelled():
    root = parse(attention_explorer(weights(h=4), TOKENS))
    sliders = root.select('input[type="range"]')
    assert len(sliders) == 1
    slider = sliders[0]
    assert (slider["min"], slider["max"], slider["step"], slider["value"]) == ("0", "3", "1", "0")
    assert root.select_one(f'label[for="{slider["id"]}"]') is not None


def test_one_head_has_no_slider_and_2d_weights_mean_one_head():
    root = parse(attention_explorer(weights(h=1)[0], TOKENS))
    assert root.select('input[type="range"]') == []
    assert np.asarray(payload(root)["heads"]).shape == (1, 5, 5)


def test_readout_is_a_polite_live_region_and_the_grid_is_focusable():
    root = parse(attention_explorer(weights(), TOKENS))
    readout = root.select_one(".readout")
    assert readout is not None and readout["aria-live"] == "polite"
    assert not readout.get_text().strip()[-1].isdigit()  # no weight until a cell is chosen
    grid = root.select_one("svg")
    assert grid["tabindex"] == "0" and "arrow keys" in grid["aria-label"]


def test_titles_name_the_heads():
    root = parse(attention_explorer(weights(h=2), TOKENS, titles=["previous token", "induction"]))
    assert json.loads(root["data-titles"]) == ["previous token", "induction"]
    assert root.select_one('input[type="range"]')["aria-valuetext"] == "previous token"


def test_two_explorers_have_distinct_ids():
    ids = [parse(attention_explorer(weights(), TOKENS))["id"] for _ in range(2)]
    assert ids[0] != ids[1]


def test_tokens_cannot_break_out_of_the_html():
    tokens = ["</script>", "<b>", "&amp;", '"q"', "ok"]
    root = parse(attention_explorer(weights(), tokens))
    assert payload(root)["tokens"] == tokens
    assert root.select("b") == []


def test_numpy_and_half_precision_weights_are_accepted():
    w = weights()
    for x in (w.numpy(), w.half(), w.bfloat16()):
        data = payload(parse(attention_explorer(x, TOKENS)))
        assert np.allclose(data["heads"], w.numpy(), atol=1e-2)


def test_repr_png_is_a_png_of_the_heads():
    png = attention_explorer(weights(), TOKENS)._repr_png_()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5_000


def test_ipython_display_carries_html_and_png():
    formatter = pytest.importorskip("IPython.core.formatters")
    data, _ = formatter.DisplayFormatter().format(attention_explorer(weights(), TOKENS))
    assert {"text/html", "image/png", "text/plain"} <= set(data)
    assert 'class="attention-explorer"' in data["text/html"]


def test_returns_an_attention_explorer():
    assert isinstance(attention_explorer(weights(), TOKENS), AttentionExplorer)


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((weights().tolist(), TOKENS), {}, TypeError, "weights must be a torch.Tensor or numpy array"),
        ((torch.ones(2, 5, 5, dtype=torch.long), TOKENS), {}, TypeError, "floating-point"),
        ((np.ones((5, 5), dtype=int), TOKENS), {}, TypeError, "floating-point"),
        ((torch.rand(5), TOKENS), {}, ValueError, r"\(heads, Tq, Tk\)"),
        ((torch.rand(1, 2, 5, 5), TOKENS), {}, ValueError, r"weights\[0\]"),
        ((torch.rand(2, 0, 5), TOKENS), {}, ValueError, "empty"),
        ((weights(), TOKENS[:4]), {}, ValueError, "tokens must have one label per key .*5.* got 4"),
        ((weights(tq=3), TOKENS), {}, ValueError, "pass query_tokens with 3 labels"),
        ((weights(tq=3), TOKENS), {"query_tokens": ["a", "b"]}, ValueError, "query_tokens .* got 2"),
        ((weights(), "the cat sat on mat"), {}, TypeError, r"split"),
        ((weights(), [1.5] * 5), {}, TypeError, r"tokens\[0\] must be a string"),
        ((weights(h=2), TOKENS), {"titles": ["a"]}, ValueError, "titles must have one label per head"),
        ((weights() * 2, TOKENS), {}, ValueError, r"\[0, 1\]"),
        ((weights() - 0.5, TOKENS), {}, ValueError, r"\[0, 1\]"),
        ((torch.full((5, 5), float("nan")), TOKENS), {}, ValueError, "finite"),
        ((torch.rand(200, 200), list(range(200))), {}, ValueError, "slice"),
    ],
)
def test_bad_input_raises_a_clear_error(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        attention_explorer(*args, **kwargs)


def test_int_positions_are_accepted_as_labels():
    data = payload(parse(attention_explorer(weights(), list(range(5)))))
    assert data["tokens"] == ["0", "1", "2", "3", "4"]

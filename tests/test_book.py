"""glue: computed values into a lesson's prose."""

import numpy as np
import torch

from mha.book import glue


def test_glue_prints_numpy_and_tensor_scalars_as_plain_numbers(capsys, monkeypatch):
    monkeypatch.delenv("MHA_BOOK_BUILD", raising=False)
    x = np.float64(0.25)
    assert glue("a", x) is x  # the value itself comes back unchanged
    glue("b", torch.tensor(1.5))
    glue("c", np.arange(2))
    assert capsys.readouterr().out.splitlines() == ["a = 0.25", "b = 1.5", "c = [0 1]"]


def test_glue_records_plain_numbers_for_the_page(monkeypatch):
    recorded = {}
    import myst_nb

    monkeypatch.setenv("MHA_BOOK_BUILD", "1")
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=False: recorded.update({name: value}))
    glue("x", np.float32(2.0))
    glue("y", torch.tensor([3]))
    glue("z", "text")
    assert recorded == {"x": 2.0, "y": 3, "z": "text"}
    assert type(recorded["x"]) is float and type(recorded["y"]) is int

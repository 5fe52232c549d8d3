"""Putting computed values into a lesson's prose.

On the website, {glue:}`name` in the text shows the value that the code passed to
`glue("name", value)`. In a notebook there is no such substitution, so there `glue` prints
`name = value` under the cell instead: the student's notebook shows every number the text
refers to by name. The book build sets MHA_BOOK_BUILD=1 (mha.notebooks' Sphinx extension)
for the kernels it starts.
"""

from __future__ import annotations

import os

BOOK_BUILD_ENV = "MHA_BOOK_BUILD"


def _plain_number(value):
    """A NumPy scalar or a one-element tensor as the Python number it holds, so that
    {glue:text}`name:.3f` can format it (MyST-NB formats the value's repr, and
    'np.float64(0.5)' or 'tensor(0.5)' are not numbers); anything else unchanged."""
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if type(value).__module__.startswith("torch") and hasattr(value, "numel") and value.numel() == 1:
        return value.item()
    return value


def glue(name: str, value, display: bool = False):
    """Record `value` under `name` for the page (book build) or print it (notebook); return it.
    NumPy scalars and one-element tensors are recorded as Python numbers."""
    shown = _plain_number(value)
    if os.environ.get(BOOK_BUILD_ENV) == "1":
        from myst_nb import glue as myst_glue

        myst_glue(name, shown, display=display)
    else:
        print(f"{name} = {shown}")
    return value

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


def glue(name: str, value, display: bool = False):
    """Record `value` under `name` for the page (book build) or print it (notebook); return it."""
    if os.environ.get(BOOK_BUILD_ENV) == "1":
        from myst_nb import glue as myst_glue

        myst_glue(name, value, display=display)
    else:
        print(f"{name} = {value}")
    return value

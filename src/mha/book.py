"""Putting computed values into a lesson's prose.

`glue` hands a value to MyST-NB when the website is built, so the page's text shows the
number the code computed. In a plain notebook (no myst_nb installed) it only returns the
value, so lessons run anywhere.
"""

from __future__ import annotations

try:
    from myst_nb import glue as _glue
except ImportError:  # a student's Jupyter without the book toolchain
    _glue = None


def glue(name: str, value, display: bool = False):
    """Record `value` under `name` for {glue:}`name` in the page; return the value."""
    if _glue is not None:
        _glue(name, value, display=display)
    return value

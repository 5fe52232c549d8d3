"""Build the book where Triton cannot be installed: the pages that need it are shown, not run.

Triton publishes wheels for Linux only, and lesson 14 runs Triton kernels. On macOS or
Windows a build would fail at its first cell. With this extension, when ``triton`` cannot be
imported, every document listed in ``needs_triton`` (``_config.yml``) is left out of
execution: its code is shown without outputs, each value it would have glued into the prose
reads "(computed on Linux)", and a note at the top of the page says why and where to run it.
Where Triton is installed, nothing changes.
"""

from __future__ import annotations

import importlib.util
import re

from sphinx.util import logging

logger = logging.getLogger(__name__)

GLUE_ROLE = re.compile(r"\{glue(?::[a-z]+)?\}`[^`]*`")
NOTE = """
```{{note}}
This page was built on a machine without Triton ({platform}), which publishes wheels for Linux
only, so its code was not run here and the numbers it computes read "(computed on Linux)".
Run it on Linux, natively, in WSL2 or in a container, to see every cell's output.
```
"""


def triton_installed() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):      # sys.modules["triton"] = None
        return False


def without_triton(text: str, platform: str) -> str:
    """The page's MyST source as it is built without Triton: the note after its title, and
    every glue role replaced by a placeholder."""
    text = GLUE_ROLE.sub("*(computed on Linux)*", text)
    title = re.search(r"^# .*$", text, flags=re.MULTILINE)
    at = title.end() if title else 0
    return text[:at] + "\n" + NOTE.format(platform=platform) + text[at:]


def _exclude(app, config):
    if triton_installed() or not config.needs_triton:
        return
    config.nb_execution_excludepatterns = list(config.nb_execution_excludepatterns) + [
        f"{doc}.*" for doc in config.needs_triton]
    logger.info(f"Triton is not installed: {', '.join(config.needs_triton)} shown without running "
                "its code (Triton runs on Linux only)")


def _mark(app, docname, source):
    if docname in app.config.needs_triton and not triton_installed():
        import sys

        source[0] = without_triton(source[0], sys.platform)


def setup(app):
    app.add_config_value("needs_triton", [], "env", types=[list])
    app.connect("config-inited", _exclude, priority=100)    # before MyST-NB reads its settings
    app.connect("source-read", _mark)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

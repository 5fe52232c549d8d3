"""A Sphinx extension that keeps the built site free of JavaScript errors.

Jupyter Book 1 registers sphinx-thebe's inline configuration script
(``const THEBE_JS_URL = ...``) twice on every page. A second ``const`` declaration of
the same name is a SyntaxError in the browser, logged on every page even with thebe
switched off. The cause is in Sphinx 7: an inline script registered before the builder
exists is stored with filename ``None`` and re-registered later with filename ``""``,
and the two no longer compare equal. This extension drops such repeats from each page
just before it is written; the order of the first occurrences is kept.
"""

from __future__ import annotations


def _drop_repeated_scripts(app, pagename, templatename, context, doctree):
    """Remove exact repeats (same file or inline body, same attributes) from a page."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen = set()
    unique = []
    for script in scripts:
        key = (
            getattr(script, "filename", script) or "",  # None and "" are the same script
            tuple(sorted(getattr(script, "attributes", {}).items())),
        )
        if key in seen:
            continue
        seen.add(key)
        unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _drop_repeated_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

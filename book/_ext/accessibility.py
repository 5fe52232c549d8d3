"""A Sphinx extension with the site's accessibility fixes that CSS cannot make.

Bibliography entries: docutils writes the list of references as
``<div class="citation-list" role="list">`` whose entries carry the DPUB-ARIA role
``doc-biblioentry``. That role is deprecated (DPUB-ARIA 1.1), and assistive technology no
longer treats such an entry as an item of the list, so the list has no items (axe-core's
rule ``aria-required-children``, a critical problem). The entries become list items.
"""

from __future__ import annotations


def _bibliography_entries_as_list_items(app, pagename, templatename, context, doctree):
    body = context.get("body")
    if body and 'role="doc-biblioentry"' in body:
        context["body"] = body.replace('role="doc-biblioentry"', 'role="listitem"')


def setup(app):
    app.connect("html-page-context", _bibliography_entries_as_list_items)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

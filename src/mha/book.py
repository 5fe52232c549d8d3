"""Putting computed values into a lesson's prose.

On the website, {glue:}`name` in the text shows the value that the code passed to
`glue("name", value)`. In a notebook there is no such substitution, so there `glue` prints
`name = value` under the cell instead (a float to four significant digits): the student's
notebook (``mha notebooks``) shows the site build's values in its text where the site has been
built, and every name otherwise, and the run prints each one. The book build sets
MHA_BOOK_BUILD=1 (mha.notebooks' Sphinx extension) for the kernels it starts.
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
    else:  # a float to four significant digits, as the text shows it (to two or three, mostly)
        print(f"{name} = {shown:.4g}" if isinstance(shown, float) else f"{name} = {shown}")
    return value


def skip_cells_that_use(names, notice: str):
    """In a notebook (IPython): from the next cell on, run no cell whose code uses one of
    ``names``, and print ``notice`` in its place. ``names`` are names or dotted prefixes
    ("triton", "mha.kernels"). A cell that is skipped adds what it would have defined
    (assignments, functions, imports) to the names, so a later cell that needs its results
    is skipped too, and the notebook runs to its end with everything it can run. Returns
    the callable it installed (None outside IPython).

    Lesson 14 calls it where Triton cannot be installed (macOS, Windows)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    skipper = _Skipper(set(names), notice)
    shell.input_transformers_post.append(skipper)
    return skipper


class _Skipper:
    def __init__(self, names: set[str], notice: str):
        self.names, self.notice = names, notice

    def __call__(self, lines: list[str]) -> list[str]:
        import ast

        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:
            return lines  # let IPython report it
        defined = _defined_names(tree)            # bound by the cell itself: not needed from before
        wanted = {name for name in _used_names(tree) if name.split(".")[0] not in defined} | _imported(tree)
        if not any(self._needed(name) for name in wanted):
            return lines
        self.names |= defined
        return [f"print({self.notice!r})\n"]

    def _needed(self, dotted: str) -> bool:
        parts = dotted.split(".")
        return any(".".join(parts[:i]) in self.names for i in range(1, len(parts) + 1))


def _used_names(tree) -> set[str]:
    """The global names the code reads (at its top level or inside the functions and lambdas
    it defines; not their parameters or locals), each also with the attribute chains it is
    read through (``mha.kernels.attention``)."""
    import ast
    import symtable

    table = symtable.symtable(ast.unparse(tree), "<cell>", "exec")
    globals_read, stack = set(), [table]
    while stack:
        scope = stack.pop()
        for symbol in scope.get_symbols():
            if symbol.is_referenced() and (scope is table or symbol.is_global()):
                globals_read.add(symbol.get_name())
        stack.extend(scope.get_children())
    found = set(globals_read)
    for node in ast.walk(tree):
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in globals_read and chain:
            found.add(".".join([node.id, *reversed(chain)]))
    return found


def _imported(tree) -> set[str]:
    """The modules (and names in them) that the code imports: ``mha.kernels.attention``."""
    import ast

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            found |= {f"{module}.{a.name}".strip(".") for a in node.names} | ({module} if module else set())
    return found


def _defined_names(tree) -> set[str]:
    """The names the cell binds at its top level (not inside the functions it defines)."""
    import ast

    found = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((a.asname or a.name).split(".")[0] for a in node.names)
            return
        if isinstance(node, ast.AugAssign):       # x += 1 reads x first
            visit(node.value)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.Lambda):
                visit(child)

    visit(tree)
    return found

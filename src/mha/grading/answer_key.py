"""The course's own answers as a submission: every exercise solved by its model answer (its
reference, or for a kernel exercise the kernel that ``Exercise.model`` names).

``answer_key_markdown()`` writes a lesson in the course's exercise format (MyST Markdown,
solutions between ``# BEGIN SOLUTION`` / ``# END SOLUTION``, a ``check`` cell after each)
that solves every exercise with its model answer, each shipped with the helpers, imports
and constants of its module that it uses. Graded, it must get full
marks; turned into a student notebook, it gives a stub per exercise. Tests and
benchmarks use it instead of a hand-written fixture, so a new exercise needs no edit.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

from . import extract

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Every exercise, solved

Every exercise of the course, solved by its model answer. Made by
`mha.grading.answer_key`; the grader's tests grade it and expect full marks.

```{code-cell} ipython3
from mha.exercises import check
```
"""


def function_source(fn, name: str | None = None, *, markers: bool = False) -> str:
    """Source that defines ``fn`` on its own: the function and whatever of its module it
    uses (imports, helper functions, constants), in the module's order. With ``name``
    different from ``fn.__name__``, ``name = <fn's name>`` is appended. With ``markers``,
    the function's body (after its docstring) sits between ``# BEGIN SOLUTION`` and
    ``# END SOLUTION``. Helpers imported from the course package (``from .heads import
    x``) are copied in the same way.

    Raises ValueError for what cannot travel alone: a lambda, a function defined inside
    another, or an import from the course package of something that is not a function.
    """
    chunks = source_chunks(fn, name, markers=markers)
    return "\n\n".join(text for _, text in chunks) + "\n"


def source_chunks(fn, name: str | None = None, *, markers: bool = False, _seen=None) -> list[tuple[str, str]]:
    """:func:`function_source` as a list of (name bound, source) pairs, one per statement."""
    seen = set() if _seen is None else _seen
    module = inspect.getmodule(fn)
    if module is None or fn.__name__ == "<lambda>" or "<locals>" in fn.__qualname__:
        raise ValueError(f"fn must be a top-level function of a module, got {fn.__qualname__!r}")
    source = inspect.getsource(module)
    kept = extract.closure(ast.parse(source).body, {fn.__name__})
    lines = source.splitlines()
    chunks: list[tuple[str, str]] = []
    for stmt in kept:
        if isinstance(stmt, ast.ImportFrom) and (stmt.level or (stmt.module or "").split(".")[0] == "mha"):
            for alias in stmt.names:  # inline what the course package provides
                obj = getattr(module, alias.asname or alias.name)
                if not inspect.isfunction(obj):
                    raise ValueError(f"{fn.__name__} needs {alias.name} from the course package "
                                     f"({ast.unparse(stmt)}), which is not a function")
                if (obj, alias.asname) not in seen:
                    seen.add((obj, alias.asname))
                    chunks += source_chunks(obj, alias.asname or alias.name, _seen=seen)
            continue
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        text = lines[first - 1:stmt.end_lineno]
        if markers and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == fn.__name__:
            text = _with_markers(stmt, text, first)
        for bound in sorted(extract._binds(stmt)) or [""]:
            chunks.append((bound, "\n".join(text)))
            break
    if name and name != fn.__name__:
        chunks.append((name, f"{name} = {fn.__name__}"))
    return chunks


def _with_markers(node, text: list[str], first: int) -> list[str]:
    body = node.body
    docstring = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                 and isinstance(body[0].value.value, str))
    solution = body[1:] if docstring else body
    if not solution:
        raise ValueError(f"{node.name} has nothing but a docstring")
    start = solution[0].lineno - first  # index in text of the first statement of the solution
    indent = " " * solution[0].col_offset
    return (text[:start] + [indent + "# BEGIN SOLUTION"] + text[start:]
            + [indent + "# END SOLUTION"])


def answer_key_markdown(exercises=None) -> str:
    """A MyST lesson that solves ``exercises`` (default: all) with their model answers: the
    references, or for an exercise that asks for a Triton kernel, the kernel its ``model``
    names."""
    from mha.autograde import select

    exercises = exercises or select()
    header = HEADER
    if any(ex.kernel for ex in exercises):  # Triton's interpreter where there is no GPU, chosen before Triton loads
        header = header.replace("from mha.exercises import check\n", "import mha.kernels\nfrom mha.exercises import check\n")
    blocks = [header]
    defined: dict[str, tuple[str, str]] = {}  # name -> (source, exercise id)
    for ex in exercises:
        label = "key-" + ex.id.replace(".", "-").replace("_", "-")
        chunks = source_chunks(ex.model_answer(), ex.function, markers=True)
        for bound, text in chunks:
            earlier = defined.setdefault(bound, (text, ex.id))
            if bound and earlier[0] != text and not text.startswith(("import ", "from ")):
                raise ValueError(f"the references of {earlier[1]} and {ex.id} both need a "
                                 f"{bound!r}, defined differently: rename one of them")
        code = "\n\n".join(text for _, text in chunks).rstrip()
        blocks.append(textwrap.dedent(f"""
            ```{{exercise-start}} {ex.title}
            :label: {label}
            ```
            Write `{ex.signature}`.
            ```{{exercise-end}}
            ```

            ```{{solution-start}} {label}
            :class: dropdown
            ```
            """) + f"```{{code-cell}} ipython3\n{code}\n```\n" + textwrap.dedent(f"""\
            ```{{solution-end}}
            ```

            ```{{code-cell}} ipython3
            check("{ex.id}", {ex.function})
            ```
            """))
    return "".join(blocks)


def write_answer_key(path, exercises=None) -> Path:
    """Write :func:`answer_key_markdown` to ``path`` (a .md file); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(answer_key_markdown(exercises), encoding="utf-8")
    return path

"""Read a submission and keep only the code its exercise functions need.

A submission is a Jupyter notebook (.ipynb), a MyST/jupytext Markdown notebook (.md),
a Python file (.py), or a folder of those. Grading runs the imports, function and class
definitions, and simple assignments that the exercise functions reach, in notebook
order; the lesson's demos, plots and ``check(...)`` calls never run, so a submission
grades in seconds.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

SUFFIXES = (".ipynb", ".md", ".py")
MAX_BYTES = 5_000_000


class UnreadableSubmission(ValueError):
    """The file is not a notebook, Markdown notebook or Python file we can read."""


@dataclass
class Submission:
    student: str
    path: Path
    cells: list[str] = field(default_factory=list)
    error: str | None = None
    files: list[str] = field(default_factory=list)    # the files read, by name (a folder's, sorted)
    origins: list[str] = field(default_factory=list)  # per cell, the file it comes from


def student_name(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", path.stem if path.is_file() else path.name) or "submission"


def read_submission(path) -> Submission:
    """Read the code cells of a submission; ``error`` says why when it cannot be read."""
    path = Path(path)
    sub = Submission(student_name(path), path)
    try:
        files = gradable_files(path) if path.is_dir() else [path]
        if not files:
            raise UnreadableSubmission(f"nothing to grade: no {', '.join(SUFFIXES)} file in the folder {path.name}")
        sub.files = [f.name for f in files]
        for f in files:
            cells = read_cells(f)
            sub.cells += cells
            sub.origins += [f.name] * len(cells)
    except UnreadableSubmission as e:
        sub.error = str(e)
    except OSError as e:
        sub.error = f"cannot read {path.name}: {e.strerror or e}"
    return sub


def gradable_files(folder: Path) -> list[Path]:
    """The files of a student's folder that the grader reads, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file())


def read_cells(path: Path) -> list[str]:
    if path.stat().st_size > MAX_BYTES:
        raise UnreadableSubmission(f"{path.name} is larger than {MAX_BYTES // 1_000_000} MB")
    text = path.read_bytes().decode("utf-8", errors="replace")
    if path.suffix == ".ipynb":
        return notebook_cells(text, path.name)
    if path.suffix == ".md":
        return markdown_cells(text)
    if path.suffix == ".py":
        return [text]
    raise UnreadableSubmission(f"{path.name}: expected a .ipynb, .md or .py file")


def notebook_cells(text: str, name: str = "notebook") -> list[str]:
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as e:
        raise UnreadableSubmission(f"{name} is not a Jupyter notebook (not JSON: {e.msg}, line {e.lineno})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise UnreadableSubmission(f"{name} is not a Jupyter notebook (no list of cells)")
    cells = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        if isinstance(src, list):
            src = "".join(s for s in src if isinstance(s, str))
        if isinstance(src, str):
            cells.append(src)
    return cells


_FENCE = re.compile(r"^(`{3,}|~{3,})\s*\{code-cell\}")


def markdown_cells(text: str) -> list[str]:
    """Code cells of a MyST Markdown notebook (```{code-cell} blocks, options skipped)."""
    cells, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, body, i = m.group(1), [], i + 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        if body and body[0].strip() == "---":  # YAML options block
            end = next((j for j in range(1, len(body)) if body[j].strip() == "---"), 0)
            body = body[end + 1:]
        while body and re.match(r"^:[\w-]+:", body[0]):  # short options
            body = body[1:]
        cells.append("\n".join(body))
    return cells


# ----------------------------------------------------------------------------- pruning

_MAGIC = re.compile(r"^\s*[%!]")


# ast.parse is not thread-safe in CPython 3.11 (its AST constructor keeps one recursion
# counter per interpreter: two threads parsing at once can fail with "SystemError: AST
# constructor recursion depth mismatch", CPython gh-106905), and the grader parses in one
# thread per job: one parse at a time.
_PARSE_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """``ast.parse``, one thread at a time."""
    with _PARSE_LOCK:
        return ast.parse(source)


def parse_cells(cells: list[str], origins: list[str] | None = None) -> tuple[list[ast.stmt], list[str]]:
    """Top-level statements of every cell that parses, and a note per cell that does not.
    ``origins``: per cell, the name of its file; a note then names the file and counts the
    cells within it, and each statement remembers its file (``origin``)."""
    stmts, notes = [], []
    counted: dict[str, int] = {}
    for n, cell in enumerate(cells):
        origin = origins[n] if origins else ""
        counted[origin] = counted.get(origin, 0) + 1
        src = "\n".join("pass" if _MAGIC.match(line) else line for line in cell.splitlines())
        try:
            tree = parse(src)
        except SyntaxError as e:
            where = f"{origin}, code cell {counted[origin]}" if origin else f"code cell {n + 1}"
            notes.append(f"{where} has a syntax error (line {e.lineno}: {e.msg}); it was skipped")
            continue
        for stmt in tree.body:
            stmt._mha_origin = origin
        stmts += tree.body
    return stmts, notes


def origin(stmt: ast.stmt) -> str:
    """The file a statement comes from (see ``parse_cells``), or ""."""
    return getattr(stmt, "_mha_origin", "")


def is_stub(stmt: ast.stmt) -> bool:
    """A function whose body (after its docstring) only raises NotImplementedError: the stub
    of a handed-out notebook, not an answer."""
    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = stmt.body[1:] if (stmt.body and isinstance(stmt.body[0], ast.Expr)
                             and isinstance(stmt.body[0].value, ast.Constant)) else stmt.body
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def prefer_answers(stmts: list[ast.stmt], functions) -> tuple[list[ast.stmt], list[str]]:
    """Where several files of a folder define an exercise's function (a notebook and a copy
    of it that Jupyter made, ``-Copy1.ipynb``), keep the definition of one file, and say so.
    The last file (by name) whose definition is not the handed-out stub wins; when all are
    stubs, the last. The other files' definitions of that function are left out."""
    notes = []
    drop: set[int] = set()
    for name in functions:
        binders = [s for s in stmts if name in _bound(s)]
        files = list(dict.fromkeys(origin(s) for s in binders))
        if len(files) < 2:
            continue
        last = {f: [s for s in binders if origin(s) == f][-1] for f in files}
        answered = [f for f in files if not is_stub(last[f])]
        chosen = (answered or files)[-1]
        drop |= {id(s) for s in binders if origin(s) != chosen}
        others = [f for f in files if f != chosen]
        why = (" (the other is the unanswered stub)" if len(others) == 1 else " (the others are the unanswered stub)"
               ) if answered and not any(f in answered for f in others) else ""
        notes.append(f"{name} is defined in {' and '.join(files)}; graded the one in {chosen}{why}")
    return [s for s in stmts if id(s) not in drop], notes


def _binds(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, ast.Import):
        return {(a.asname or a.name.split(".")[0]) for a in stmt.names}
    if isinstance(stmt, ast.ImportFrom):
        return {(a.asname or a.name) for a in stmt.names}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = set()
        stack = list(targets)
        while stack:  # x = ..., x, y = ..., [x, *y] = ...; not obj.attr = ... or d[k] = ...
            t = stack.pop()
            if isinstance(t, ast.Name):
                names.add(t.id)
            elif isinstance(t, (ast.Tuple, ast.List)):
                stack += t.elts
            elif isinstance(t, ast.Starred):
                stack.append(t.value)
        return names
    return set()


def _uses(stmt: ast.stmt) -> set[str]:
    """Names a statement reads from the notebook's top level.

    For a function, that is its free names: a parameter or a name the function assigns is
    local to it (Python's rule), so a top-level variable of the same name is not needed.
    """
    loads, local, declared_global = set(), set(), set()
    is_function = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
    for n in ast.walk(stmt):  # one pass: this runs for every statement of every submission
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else local).add(n.id)
        elif not is_function:
            continue
        elif isinstance(n, ast.arg):
            local.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not stmt:
            local.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            local |= _binds(n)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            local.add(n.name)
        elif isinstance(n, ast.Global):
            declared_global.update(n.names)
    if is_function:
        loads -= local - declared_global
    return loads


def _memo(stmt: ast.stmt, compute) -> set[str]:
    """``compute(stmt)``, kept on the node: a submission's statements are searched once
    per exercise."""
    key = f"_mha_{compute.__name__}"
    cached = getattr(stmt, key, None)
    if cached is None:
        cached = compute(stmt)
        setattr(stmt, key, cached)
    return cached


def _bound(stmt: ast.stmt) -> set[str]:
    return _memo(stmt, _binds)


def _used(stmt: ast.stmt) -> set[str]:
    return _memo(stmt, _uses)  # only for the statements a closure keeps


def closure(stmts: list[ast.stmt], names: set[str]) -> list[ast.stmt]:
    """The statements (in order) that bind ``names`` or anything those statements use."""
    keep_kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                  ast.Assign, ast.AnnAssign)
    candidates = [s for s in stmts if isinstance(s, keep_kinds)]
    needed, kept = set(names), set()
    changed = True
    while changed:
        changed = False
        for i, s in enumerate(candidates):
            if i in kept:
                continue
            star = isinstance(s, ast.ImportFrom) and any(a.name == "*" for a in s.names)
            if star or _bound(s) & needed:
                kept.add(i)
                needed |= _used(s)
                changed = True
    return [s for i, s in enumerate(candidates) if i in kept]


@dataclass
class FunctionInfo:
    name: str
    found: bool
    problem: str | None = None       # missing, wrong signature
    statements: list[ast.stmt] = field(default_factory=list)


def find_function(stmts: list[ast.stmt], name: str, params: tuple[str, ...],
                  taken: frozenset[str] = frozenset()) -> FunctionInfo:
    """Find ``name`` among the statements; ``taken`` names (other exercises' functions)
    are never suggested as a misspelling of it."""
    binders = [s for s in stmts if name in _bound(s)]
    if not binders:
        # a rename is suggested only for a function that could be this exercise's under another
        # name: a close name AND the parameters the stub gives (at least half of them, in their
        # places); a lesson's own helper with a similar name (one_head for combine_heads) is not one
        def could_be(s) -> bool:
            args = [a.arg for a in s.args.posonlyargs + s.args.args]
            return len(args) == len(params) and 2 * sum(a == p for a, p in zip(args, params)) >= len(params)

        defined = sorted({s.name for s in stmts if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and could_be(s)}
                         - set(taken))
        close = difflib.get_close_matches(name, defined, n=1, cutoff=0.6)
        extra = f"; found {close[0]}(...) - rename it to {name}" if close else ""
        return FunctionInfo(name, False, f"no function {name}({', '.join(params)}) in the submission{extra}")
    info = FunctionInfo(name, True, statements=closure(stmts, {name}))
    last = binders[-1]
    if isinstance(last, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = last.args
        positional = a.posonlyargs + a.args
        n_defaults = len(a.defaults)
        required = len(positional) - n_defaults
        if a.vararg is None and (len(positional) < len(params) or required > len(params)):
            found = ", ".join(x.arg for x in positional)
            info.problem = f"expected the signature {name}({', '.join(params)}), found {name}({found})"
        elif isinstance(last, ast.AsyncFunctionDef):
            info.problem = f"{name} is async; write a plain def"
    return info


def program(stmts: list[ast.stmt], names: set[str]) -> str:
    """The source the worker runs: the closure of ``names``, in notebook order."""
    return ast.unparse(ast.Module(body=closure(stmts, names), type_ignores=[]))

"""Student code on a page to share, and answers grouped by their code.

``anonymous_code`` turns the statements an answer was graded on into code an instructor can
show the class and run again: comments are gone (the code is unparsed from its syntax tree),
docstrings and bare strings are dropped, the strings that carry a student's words (the
messages of ``raise``, ``assert``, ``print``, warnings and logging, and f-strings) become
``'...'``, and the imports come first, each once, only those the code uses. Every other string
is kept, because it can decide the answer (a dict's keys, ``indexing="ij"``, ``einsum``
subscripts), unless it holds one of the student's name tokens as a word.

Names are masked as whole words, never as pieces of words: an identifier is split into its
parts (``victor_helper`` -> ``victor``, ``helper``; ``VictorNet`` -> ``victor``, ``net``) and
renamed (``name_1``) when a part *is* a token of the student's name or id. The tokens of a
name leave out words of the course's own code (``max``, ``sum``, ``mask``...), which say
nothing about a person. Text the course wrote (hints, the grader's messages) is never masked.

``fingerprint`` is the shape of an answer: its code with the imports resolved, wherever they
are (``F.softmax``, ``torch.nn.functional.softmax`` and ``import torch as th`` inside the
function alike), every name the answer binds renumbered in order, annotations dropped, a
name assigned and returned at once inlined (``J = expr; return J`` is ``return expr``), the
strings of words set aside and the strings that decide the answer kept. Two answers with the
same fingerprint are the same answer, written with other names, formatting, comments or
messages.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import keyword
import re
from pathlib import Path

from .extract import parse

BUILTIN_NAMES = frozenset(dir(builtins))
# Words of file and folder names that are not a person's name: never tokens of one.
NOT_A_NAME = frozenset({
    "copy", "final", "version", "draft", "homework", "assignment", "submission", "student", "solution",
    "solutions", "answer", "answers", "lesson", "section", "notebook", "ipynb", "exercise", "exercises",
    "the", "and", "one", "head", "heads", "mask", "masks", "masking", "causal", "attention", "softmax",
    "dimension", "math", "layer", "step", "by", "cross", "gradients", "cost", "flash", "cache", "kv",
    "gqa", "mla", "induction", "kernels", "why", "several", "parameter", "counts", "scratch", "from",
    "pytorch", "built", "ins", "triton", "untitled", "late", "group", "team", "test", "work",
})
# Calls whose string arguments are words for a reader, not part of the answer.
MESSAGE_CALLS = frozenset({"print", "warn", "debug", "info", "warning", "error", "exception", "critical", "log"})
LOGGERS = frozenset({"warnings", "logging", "logger", "log", "LOGGER", "LOG"})
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words(identifier: str) -> list[str]:
    """The parts of an identifier or a text, lower case: ``victor_helper2`` -> victor, helper, 2;
    ``VictorNet`` -> victor, net; ``HTTPError`` -> http, error."""
    return [p.lower() for p in _PARTS.findall(identifier)]


# A Python file's strings and comments, which hold words for readers, not names of the code.
_WORDS_FOR_READERS = re.compile(r'("""|\'\'\')(?:.|\n)*?\1|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|#[^\n]*')


@functools.lru_cache(maxsize=1)
def code_words() -> frozenset[str]:
    """Every word of the identifiers of the course's own code (``src/mha``), of Python's
    builtins and keywords: words a student's code shares with the course, never taken for
    a name (``max``, ``sum``, ``align``, ``bottom``...). Read from the source as text, its
    strings and comments left out, without importing it (a tenth of a second)."""
    names: set[str] = {*BUILTIN_NAMES, *keyword.kwlist}
    for path in Path(__file__).resolve().parents[1].rglob("*.py"):
        try:
            text = _WORDS_FOR_READERS.sub(" ", path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    return frozenset(w for name in names for w in words(name) if not w.isdigit())


def name_tokens(*names: str) -> frozenset[str]:
    """The words of a student's name, file name or id that code must not show: lower case,
    three letters or more (or five digits or more, an id), leaving out the words of file names
    that are no one's name (``copy``, ``lesson``) and the words of the course's code
    (``max``, ``sum``: see :func:`code_words`)."""
    tokens = set()
    common = code_words()
    for name in names:
        for word in re.split(r"[^0-9A-Za-z]+|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])", name or ""):
            word = word.lower()
            if word.isdigit():
                if len(word) >= 5:
                    tokens.add(word)
            elif len(word) >= 3 and word not in NOT_A_NAME and word not in common:
                tokens.add(word)
    return frozenset(tokens)


def _holds(text: str, tokens) -> bool:
    """Whether ``text`` holds one of ``tokens`` as a whole word (never as a piece of one)."""
    return bool(tokens) and any(w in tokens for w in words(text))


def _is_message_call(func) -> bool:
    """``print(...)``, ``warnings.warn(...)``, ``logger.info(...)``, ``ValueError(...)``: a call
    whose strings are words for a reader."""
    if isinstance(func, ast.Name):
        return func.id == "print" or func.id == "warn" or func.id.endswith(("Error", "Exception", "Warning"))
    if isinstance(func, ast.Attribute):
        base = func.value.id if isinstance(func.value, ast.Name) else ""
        return (func.attr in MESSAGE_CALLS and base in LOGGERS) or func.attr.endswith(("Error", "Exception", "Warning"))
    return False


class _Words(ast.NodeVisitor):
    """Marks the strings that are words for a reader: docstrings and bare strings, the
    messages of ``raise`` and ``assert``, the arguments of message calls."""

    def __init__(self):
        self.marked: set[int] = set()

    def _mark(self, node) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, (str, bytes)):
                self.marked.add(id(sub))

    def visit_Raise(self, node):
        self._mark(node)
        self.generic_visit(node)

    def visit_Assert(self, node):
        if node.msg is not None:
            self._mark(node.msg)
        self.generic_visit(node)

    def visit_Call(self, node):
        if _is_message_call(node.func):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                self._mark(arg)
        self.generic_visit(node)


class _Anonymise(ast.NodeTransformer):
    def __init__(self, tokens, keep: set[str], marked: set[int]):
        self.tokens = tokens
        self.keep = keep                 # identifiers never renamed (the exercise's function)
        self.marked = marked             # ids of the string constants that are words
        self.renamed: dict[str, str] = {}
        self.stored_attrs: set[str] = set()

    def rename(self, name: str | None) -> str | None:
        if not name or name in self.keep or not _holds(name, self.tokens):
            return name
        if name in BUILTIN_NAMES and name not in self.renamed:
            return name
        return self.renamed.setdefault(name, f"name_{len(self.renamed) + 1}")

    def rename_dotted(self, name: str | None) -> str | None:
        return ".".join(self.rename(part) for part in name.split(".")) if name else name

    # words: docstrings and bare strings go; the strings of messages become '...'
    def _body(self, body: list) -> list:
        body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                        and isinstance(s.value.value, (str, bytes)))]
        return body or [ast.Pass()]

    def generic_visit(self, node):
        for attr in ("body", "orelse", "finalbody"):
            value = getattr(node, attr, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(node, attr, self._body(value))
        return super().generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            if id(node) in self.marked or _holds(node.value, self.tokens):
                node.value = "..."
        elif isinstance(node.value, bytes):
            node.value = b"..."
        elif isinstance(node.value, int) and not isinstance(node.value, bool) and str(abs(node.value)) in self.tokens:
            node.value = 0  # an id written as a number
        return node

    def visit_JoinedStr(self, node):
        return ast.copy_location(ast.Constant("..."), node)

    # names
    def visit_Name(self, node):
        node.id = self.rename(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self.rename(node.arg)
        return self.generic_visit(node)

    def visit_keyword(self, node):
        return self.generic_visit(node)  # a keyword's name belongs to the function called

    def visit_FunctionDef(self, node):
        node.name = self.rename(node.name)
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Attribute(self, node):
        if node.attr in self.stored_attrs:  # an attribute the answer itself sets (self.victor_w = ...)
            node.attr = self.rename(node.attr)
        return self.generic_visit(node)

    def visit_alias(self, node):
        node.name = self.rename_dotted(node.name)
        node.asname = self.rename(node.asname)
        return node

    def visit_ImportFrom(self, node):
        node.module = self.rename_dotted(node.module)
        return self.generic_visit(node)

    def visit_Global(self, node):
        node.names = [self.rename(n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node):
        node.name = self.rename(node.name)
        return self.generic_visit(node)


def _tidy_imports(body: list[ast.stmt]) -> list[ast.stmt]:
    """The module's imports first, each once, only those that bind a name the rest uses
    (a folder of notebooks gives one ``import torch`` per notebook)."""
    imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
    rest = [s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    used = {n.id for s in rest for n in ast.walk(s) if isinstance(n, ast.Name)}
    kept, seen = [], set()
    for s in imports:
        text = ast.unparse(s)
        if text in seen:
            continue
        special = isinstance(s, ast.ImportFrom) and (s.module == "__future__" or any(a.name == "*" for a in s.names))
        binds = {(a.asname or a.name).split(".")[0] for a in s.names}
        if special or binds & used:
            seen.add(text)
            kept.append(s)
    return kept + rest


def anonymous_code(statements: list[ast.stmt], tokens=frozenset(), keep=()) -> str:
    """The source of ``statements`` with nothing a student wrote in words and no identifier
    or string holding one of ``tokens`` as a word (see :func:`name_tokens`); ``keep``: names
    never renamed. It still runs: only words and names change."""
    module = parse(ast.unparse(ast.Module(body=list(statements), type_ignores=[])))  # a copy: comments gone
    finder = _Words()
    finder.visit(module)
    worker = _Anonymise(tokens, set(keep), finder.marked)
    worker.stored_attrs = {n.attr for n in ast.walk(module) if isinstance(n, ast.Attribute)
                           and isinstance(n.ctx, ast.Store)}
    module = worker.visit(module)
    module.body = worker._body(_tidy_imports(module.body))
    return ast.unparse(ast.fix_missing_locations(module))


def mask_names(code: str, tokens, keep=()) -> str:
    """``code`` (from :func:`anonymous_code`) with the identifiers and strings that hold one
    of ``tokens`` as a word masked too: for names known only later (a roster's)."""
    if not code:
        return code
    try:
        tree = parse(code)
    except SyntaxError:
        return ""
    return anonymous_code(tree.body, tokens, keep)


def mask_text(text: str, tokens) -> str:
    """``text`` with every word that *is* one of ``tokens`` (compared whole, never as a piece
    of a longer word) replaced by ``[name]``: for text a student wrote. The course's own text
    (hints, the grader's messages) is never given to it."""
    if not tokens:
        return text
    return re.sub(r"[0-9A-Za-z_]+", lambda m: "[name]" if _holds(m.group(0), tokens) else m.group(0), text)


# ----------------------------------------------------------------------------- answer groups

class _Normalise(ast.NodeTransformer):
    def __init__(self, aliases: dict[str, str], bound: dict[str, str]):
        self.aliases, self.bound = aliases, bound
        self.modules = set(aliases.values())

    def visit_Name(self, node):
        node.id = self.bound.get(node.id) or self.aliases.get(node.id) or node.id
        return node

    def visit_Attribute(self, node):
        """``F.softmax``, ``torch.nn.functional.softmax`` and an imported ``softmax`` alike:
        a chain of attributes on a module becomes one dotted name."""
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id in self.modules:
            dotted = f"{node.value.id}.{node.attr}"
            self.modules.add(dotted)
            return ast.copy_location(ast.Name(id=dotted, ctx=node.ctx), node)
        return node

    def visit_arg(self, node):
        node.arg = self.bound.get(node.arg, node.arg)
        node.annotation = None
        return node

    def visit_FunctionDef(self, node):
        node.name = self.bound.get(node.name, node.name)
        node.returns = None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        return self.visit(ast.Assign(targets=[node.target], value=node.value, lineno=0))


def _imports_out(tree: ast.Module) -> dict[str, str]:
    """Remove every import statement, at any depth, and return the aliases they bound
    (``th`` -> ``torch``, ``softmax`` -> ``torch.softmax``)."""
    aliases: dict[str, str] = {}

    class Strip(ast.NodeTransformer):
        def visit_Import(self, node):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            return None

        def visit_ImportFrom(self, node):
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module or ''}.{a.name}"
            return None

    Strip().visit(tree)
    for node in ast.walk(tree):  # a body left empty by its imports
        for attr in ("body", "orelse", "finalbody"):
            if getattr(node, attr, None) == [] and attr == "body":
                setattr(node, attr, [ast.Pass()])
    return aliases


def _inline_returned(tree: ast.Module) -> None:
    """``name = expr`` followed at once by ``return name``, where the name is used nowhere
    else in the function: ``return expr``."""
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        uses: dict[str, int] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Name):
                uses[n.id] = uses.get(n.id, 0) + 1
        for block in [n for n in ast.walk(fn) if isinstance(getattr(n, "body", None), list)]:
            for attr in ("body", "orelse", "finalbody"):
                stmts = getattr(block, attr, None)
                if not isinstance(stmts, list):
                    continue
                out = []
                for s in stmts:
                    prev = out[-1] if out else None
                    if (isinstance(s, ast.Return) and isinstance(s.value, ast.Name) and isinstance(prev, ast.Assign)
                            and len(prev.targets) == 1 and isinstance(prev.targets[0], ast.Name)
                            and prev.targets[0].id == s.value.id and uses.get(s.value.id) == 2):
                        out[-1] = ast.Return(value=prev.value)
                        continue
                    out.append(s)
                setattr(block, attr, out)


def fingerprint(code: str, function: str = "") -> str:
    """A short hash of the shape of ``code``: equal for two answers that differ only in the
    names they bind, their imports (aliases, and where they are), formatting, comments,
    docstrings, messages, annotations, or a name assigned and returned at once; different
    where a string that decides the answer differs. ``function``, the exercise's function,
    keeps its name. "" when the code does not parse."""
    try:
        tree = parse(anonymous_code(parse(code).body, keep={function}))
    except (SyntaxError, ValueError):
        return ""
    aliases = _imports_out(tree)
    _inline_returned(tree)
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name != function:
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names = [node.id]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names = [node.name]
        for n in names:
            bound.setdefault(n, f"v{len(bound)}")
    tree = _Normalise(aliases, bound).visit(tree)
    shape = ast.dump(tree, annotate_fields=False, include_attributes=False)
    return hashlib.sha256(shape.encode()).hexdigest()[:16]

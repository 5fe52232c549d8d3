"""Student code on a page to share, and answers grouped by their code.

``anonymous_code`` turns the statements an answer was graded on into code an instructor can
show the class: comments are gone (the code is unparsed from its syntax tree), docstrings
and other bare strings are dropped, every other string becomes ``'...'`` (an f-string too),
and every identifier that holds a token of the student's name (``victor_helper``) or id is
renamed (``name_1``). Two kinds of string are kept, because they are the answer's maths and
cannot say much: ``float('-inf')``'s argument and the subscripts of ``einsum`` (or einops'
``rearrange``), unless they hold a token of the name.

``fingerprint`` is the shape of an answer: its code with the imports resolved
(``F.softmax`` and ``torch.nn.functional.softmax`` alike), every name the answer binds
renumbered in order, annotations dropped. Two answers with the same fingerprint are the
same answer, written with other names, formatting, comments or strings.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import re

from .extract import parse

KEPT_CALLS = {"einsum", "rearrange", "reduce", "repeat", "pack", "unpack"}  # subscripts are maths
SUBSCRIPTS = re.compile(r"[A-Za-z0-9.,()\s>-]{1,60}")
FLOAT_WORDS = re.compile(r"\s*[+-]?(inf|infinity|nan)\s*", re.I)
BUILTIN_NAMES = frozenset(dir(builtins))
# Words of file and folder names that are not a person's name: never masked in code.
NOT_A_NAME = frozenset({
    "copy", "final", "version", "draft", "homework", "assignment", "submission", "student", "solution",
    "solutions", "answer", "answers", "lesson", "section", "notebook", "ipynb", "exercise", "exercises",
    "the", "and", "one", "head", "heads", "mask", "masks", "masking", "causal", "attention", "softmax",
    "dimension", "math", "layer", "step", "by", "cross", "gradients", "cost", "flash", "cache", "kv",
    "gqa", "mla", "induction", "kernels", "why", "several", "parameter", "counts", "scratch", "from",
    "pytorch", "built", "ins", "triton", "untitled", "late", "group", "team", "test", "work",
})


def name_tokens(*names: str) -> frozenset[str]:
    """The words of a student's name, file name or id that code must not show: lower case,
    three letters or more (or five digits or more, an id), words of the course left out."""
    tokens = set()
    for name in names:
        for word in re.split(r"[^0-9A-Za-z]+|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])", name or ""):
            word = word.lower()
            if (len(word) >= 3 and not word.isdigit() or len(word) >= 5) and word not in NOT_A_NAME:
                tokens.add(word)
    return frozenset(tokens)


def _holds(text: str, tokens) -> bool:
    low = text.lower()
    return any(t in low for t in tokens)


class _Anonymise(ast.NodeTransformer):
    def __init__(self, tokens, keep: set[str]):
        self.tokens = tokens
        self.keep = keep                 # identifiers never renamed (the exercise's function)
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

    # words: docstrings and bare strings go; other strings become '...'
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

    def visit_Call(self, node):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        self.generic_visit(node)
        kept = []
        if called in KEPT_CALLS and node.args:
            kept = [node.args[0]]
        elif called == "float" and len(node.args) == 1:
            kept = [node.args[0]]
        for arg in kept:
            if isinstance(arg, ast.Constant) and getattr(arg, "_mha_masked", None) is not None:
                text = arg._mha_masked
                ok = FLOAT_WORDS.fullmatch(text) if called == "float" else SUBSCRIPTS.fullmatch(text)
                if ok and not _holds(text, self.tokens):
                    arg.value = text
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            node._mha_masked = node.value
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


def anonymous_code(statements: list[ast.stmt], tokens=frozenset(), keep=()) -> str:
    """The source of ``statements`` with nothing a student wrote in words and no identifier
    holding one of ``tokens`` (see :func:`name_tokens`); ``keep``: names never renamed."""
    module = parse(ast.unparse(ast.Module(body=list(statements), type_ignores=[])))  # a copy: comments gone
    worker = _Anonymise(tokens, set(keep))
    worker.stored_attrs = {n.attr for n in ast.walk(module) if isinstance(n, ast.Attribute)
                           and isinstance(n.ctx, ast.Store)}
    module = worker.visit(module)
    module.body = worker._body(module.body)
    return ast.unparse(ast.fix_missing_locations(module))


def mask_names(code: str, tokens, keep=()) -> str:
    """``code`` (from :func:`anonymous_code`) with the identifiers that hold one of
    ``tokens`` renamed too: for names known only later (a roster's)."""
    if not code or not tokens:
        return code
    try:
        tree = parse(code)
    except SyntaxError:
        return ""
    return anonymous_code(tree.body, tokens, keep)


def mask_text(text: str, tokens) -> str:
    """``text`` with every word that holds one of ``tokens`` replaced by ``[name]``: for
    messages shown beside the code, which should hold none, but might one day quote one."""
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


def fingerprint(code: str, function: str = "") -> str:
    """A short hash of the shape of ``code``: equal for two answers that differ only in the
    names they bind, their imports' aliases, formatting, comments, strings or annotations.
    ``function``, the exercise's function, keeps its name. "" when the code does not parse."""
    try:
        tree = parse(anonymous_code(parse(code).body, keep={function}))
    except (SyntaxError, ValueError):
        return ""
    aliases: dict[str, str] = {}
    body = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(stmt, ast.ImportFrom):
            for a in stmt.names:
                aliases[a.asname or a.name] = f"{stmt.module or ''}.{a.name}"
        else:
            body.append(stmt)
    tree.body = body
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

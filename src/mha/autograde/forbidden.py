"""The static scan for forbidden names: what a graded function's source reaches.

An exercise may forbid functions (``Exercise.forbidden``: dotted names such as
``torch.softmax``, or ``"mha"`` for the whole course package). Before running a submission the
grader, and ``check`` in a notebook, look through the source it keeps for any name that could
reach one: the name itself, an import of it, a string that names it (what ``getattr`` or
``importlib`` would need), and every dynamic lookup, which could hide any of them. Messages
(docstrings, what ``raise``, ``assert``, ``print`` and logging say) are not lookups and are
left out. At run time the same functions are also replaced by stand-ins that raise
(:mod:`mha.autograde.calls`), so the scan is the first of two fences.
"""

from __future__ import annotations

import ast

# Names through which code could switch off the recording of its operations (the stacks of
# torch function and dispatch modes): an exercise with an audit forbids them. Names without a
# dot are looked for in the source only, never replaced at run time (the recorder needs them).
UNWATCHED = ("overrides", "DisableTorchFunction", "DisableTorchFunctionSubclass", "_disabled_torch_function_impl",
             "_pop_torch_function_stack", "_len_torch_function_stack", "_pop_mode", "_pop_mode_temporarily",
             "_push_mode", "_python_dispatch", "_disable_current_modes", "_pop_torch_dispatch_mode")

# Lookups that could reach any function by name, so a forbidden one too. Bare names: the
# builtins that look things up or run code. Attributes: only those that are lookups whatever
# object they belong to; `sys.modules` and `builtins.compile` are recognised by their module,
# since `model.modules()`, `re.compile` and `torch.compile` are ordinary calls.
DYNAMIC_NAMES = {"eval", "exec", "compile", "__import__", "importlib", "globals", "vars", "__builtins__",
                 "getattr", "setattr", "__dict__", "__globals__", "import_module", "attrgetter", "methodcaller",
                 "__getattribute__", "getattr_static"}
DYNAMIC_ATTRS = {"__import__", "importlib", "globals", "vars", "__builtins__", "__dict__", "__globals__",
                 "getattr", "setattr", "eval", "exec", "import_module", "attrgetter", "methodcaller",
                 "__getattribute__", "getattr_static"}
DYNAMIC_QUALIFIED = {"sys.modules", "builtins.compile", "builtins.__dict__"}


def forbidden_uses(tree: ast.AST, forbidden: tuple[str, ...]) -> list[str]:
    """Names in ``tree`` that reach a forbidden function (static, on the source).

    ``forbidden`` holds dotted names; ``"mha"`` forbids the whole course package.
    Dynamic lookups (getattr, eval, importlib, sys.modules, ...) are reported too, since
    they could hide a forbidden call.
    """
    if not forbidden:
        return []
    leaves = {f.rsplit(".", 1)[-1] for f in forbidden if f != "mha"}
    modules = set(forbidden)
    facts = _facts(tree)
    aliases = {}  # local name -> module, from `import sys as s`
    for kind, value in facts:
        if kind == "alias":
            local, _, module = value.partition("=")
            aliases[local] = module
    found: list[str] = []

    def add(what: str):
        if what not in found:
            found.append(what)

    for kind, value in facts:
        if kind == "name":  # a forbidden function reaches a bare name only through an import, seen below
            if value in DYNAMIC_NAMES:
                add(f"{value} (dynamic lookups are not allowed here)")
            elif value == "mha" and "mha" in modules:
                add("the mha package")
        elif kind == "attr":
            if value in leaves:
                add(value)
            elif value in DYNAMIC_ATTRS:
                add(f"{value} (dynamic lookups are not allowed here)")
        elif kind == "chain":
            owner, _, attr = value.partition(".")
            qualified = f"{aliases.get(owner, owner)}.{attr}"
            if qualified in DYNAMIC_QUALIFIED:
                add(f"{qualified} (dynamic lookups are not allowed here)")
        elif kind == "from":
            if value in DYNAMIC_QUALIFIED:
                add(f"{value} (dynamic lookups are not allowed here)")
            module, _, name = value.rpartition(".")
            if name == "*" and any(f.startswith(module + ".") for f in modules):
                add(f"from {module} import * (name what you import)")
        elif kind == "module":
            if "mha" in modules and (value == "mha" or value.startswith("mha.")) and value != "mha.exercises":
                add("the mha package")
            if any(value == f or value.startswith(f + ".") for f in modules):
                add(value)
        elif kind == "imported":
            if value in leaves:
                add(value)
        elif kind == "str":  # a string that could serve a lookup: the name itself, or a dotted path to it
            name = value.strip()
            for leaf in leaves:
                if len(leaf) > 6 and (name == leaf or name.endswith("." + leaf)):
                    add(f"{leaf} (a string that names it, as a lookup by name would)")
            if name in modules and name != "mha":
                add(f"{name} (a string that names it, as a lookup by name would)")
    return found


def _facts(tree: ast.AST) -> list[tuple[str, str]]:
    """What ``forbidden_uses`` looks at, in source order: names, attributes, imported
    modules and names, and string constants that are not docstrings. A module's facts are
    those of its statements, each worked out once and kept on the statement (the grader
    asks about the same statements for every exercise of a submission)."""
    if not isinstance(tree, ast.Module):
        return _walk_facts(tree)
    body = tree.body
    if body and _is_docstring(body[0]):
        body = body[1:]
    out: list[tuple[str, str]] = []
    for stmt in body:
        cached = getattr(stmt, "_mha_facts", None)
        if cached is None:
            cached = stmt._mha_facts = _walk_facts(stmt)
        out += cached
    return out


def _is_docstring(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


# Calls whose arguments are messages for a person, never looked up: print(...), warnings.warn(...),
# logging's and a logger's methods.
MESSAGE_CALLS = {"print", "warn", "debug", "info", "warning", "error", "exception", "critical", "log"}


def _messages(tree: ast.AST) -> set[int]:
    """The ids of the string constants of ``tree`` that are messages: docstrings, what a
    ``raise`` or an ``assert`` says, the arguments of print and of warnings and logging
    calls. A message that mentions a function does not use it."""
    out = set()

    def strings(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                out.add(id(n))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.body and _is_docstring(node.body[0]):
                out.add(id(node.body[0].value))
        elif isinstance(node, ast.Raise):
            strings(node)
        elif isinstance(node, ast.Assert) and node.msg is not None:
            strings(node.msg)
        elif isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if called in MESSAGE_CALLS:
                for a in [*node.args, *(k.value for k in node.keywords)]:
                    strings(a)
    return out


def _walk_facts(tree: ast.AST) -> list[tuple[str, str]]:
    # A message is not a lookup: a docstring that says "computes the backward pass", or a
    # ValueError whose text speaks of "an attention mask", must not cost an honest answer its
    # points. Other strings are kept, and count where they name a forbidden function exactly
    # (what getattr(x, "name") or importlib would need).
    facts: dict[tuple[str, str], None] = {}
    docstrings = _messages(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            facts["name", node.id] = None
        elif isinstance(node, ast.Attribute):
            facts["attr", node.attr] = None
            if isinstance(node.value, ast.Name):
                facts["chain", f"{node.value.id}.{node.attr}"] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names]
            for full in ([node.module] if isinstance(node, ast.ImportFrom) and node.module else []) + names:
                if full:
                    facts["module", full] = None
            for n in names:
                facts["imported", n] = None
            for a in node.names:
                if isinstance(node, ast.Import) and a.asname:
                    facts["alias", f"{a.asname}={a.name}"] = None
                elif isinstance(node, ast.ImportFrom) and node.module:
                    facts["from", f"{node.module}.{a.name}"] = None
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            facts["str", node.value] = None
    return list(facts)


"""The exercise framework keeps its shape: ``mha.autograde`` is the format and the judge,
``mha.exercises`` the course's content, ``mha.grading`` the batch grader, and the imports run
one way (grading -> autograde <- exercises). Read from the source, without importing it."""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import mha

SRC = Path(mha.__file__).parent
AUTOGRADE, EXERCISES, GRADING = SRC / "autograde", SRC / "exercises", SRC / "grading"
MAX_LINES = 450  # "small enough to read in one sitting"


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) for every import of ``path``, relative ones made absolute."""
    package = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out.append((module, [a.name for a in node.names]))
    return out


def test_the_framework_imports_nothing_of_the_grader_and_the_course_in_one_place():
    for path in sorted(AUTOGRADE.glob("*.py")):
        for module, names in imports(path):
            assert not module.startswith("mha.grading"), f"{path.name} imports {module}"
            assert not module.startswith("mha.exercises"), f"{path.name} imports {module}: only registry.course() reads the course"
    assert 'COURSE = "mha.exercises"' in (AUTOGRADE / "registry.py").read_text()


def test_the_modules_the_worker_loads_by_path_stand_alone():
    """The sandboxed worker loads calls.py and wire.py from their files before it hides the
    package: they may import the standard library, numpy and torch, nothing of the course."""
    for name in ("calls.py", "wire.py"):
        for module, _ in imports(AUTOGRADE / name):
            assert not module.startswith("mha"), f"{name} imports {module}"


def test_the_grader_imports_only_public_names_of_the_framework():
    for path in sorted(GRADING.glob("*.py")):
        for module, names in imports(path):
            if module.startswith("mha.exercises"):
                raise AssertionError(f"grading/{path.name} imports {module}: import the framework, mha.autograde")
            if module.startswith("mha.autograde"):
                private = [n for n in [module.rsplit(".", 1)[-1], *names] if n.startswith("_")]
                assert not private, f"grading/{path.name} imports private names of the framework: {private}"


def test_the_course_content_is_one_file_per_lesson_and_imports_public_names():
    lessons = {p.stem for p in (SRC.parents[1] / "lessons").glob("*.md")}
    for info in pkgutil.iter_modules([str(EXERCISES)]):
        if info.name == "common":
            continue
        found = re.fullmatch(r"lesson(\d\d)_(\w+)", info.name)
        assert found, f"mha/exercises/{info.name}.py: content files are named lessonNN_<lesson>"
        lesson = f"{found[1]}-{found[2].replace('_', '-')}"
        assert lesson in lessons, f"mha/exercises/{info.name}.py names no lesson (lessons/{lesson}.md)"
        for module, names in imports(EXERCISES / f"{info.name}.py"):
            if module.startswith("mha."):
                assert module.startswith(("mha.autograde", "mha.exercises.common")) or "." not in module[4:], \
                    f"{info.name}.py imports {module}"
                assert not any(n.startswith("_") for n in names), f"{info.name}.py imports private names {names}"


def test_every_module_of_the_framework_reads_in_one_sitting():
    """(tests/test_package_docs.py checks that the package's docstring describes each.)"""
    for info in pkgutil.iter_modules([str(AUTOGRADE)]):
        lines = len((AUTOGRADE / f"{info.name}.py").read_text().splitlines())
        assert lines <= MAX_LINES, f"mha/autograde/{info.name}.py has {lines} lines: split it by concept"

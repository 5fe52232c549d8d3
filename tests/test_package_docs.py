"""Each package's docstring lists every module in it, so that its listing reads as the
architecture (and a new module is described where a newcomer looks first)."""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import pytest

import mha

SRC = Path(mha.__file__).parent


@pytest.mark.parametrize("package", [".", "autograde", "grading"])
def test_every_module_is_described_in_its_package_docstring(package):
    folder = SRC / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
    for info in pkgutil.iter_modules([str(folder)]):
        name = f"{info.name}/" if info.ispkg else info.name
        assert re.search(rf"(?<![\w/]){re.escape(name)}(\.py)?(?![\w])", doc), \
            f"{folder.name}/__init__.py does not describe {name}"

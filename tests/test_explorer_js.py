"""The attention explorer's JavaScript (src/mha/explorer.js), tested as JavaScript with Node:
it parses, and its functions compute what the Python side and the HTML contract say. The
browser tests (test_explorer_browser.py) drive the same script on a page."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mha import explorer
from mha.plotting import attention_explorer

JS = Path(explorer.__file__).with_name("explorer.js")


@pytest.fixture(scope="module")
def node():
    path = shutil.which("node")
    if path is None:
        message = "Node.js is not installed (apt-get install nodejs)"
        if os.environ.get("CI"):
            pytest.fail(message + "; it is required in CI")
        pytest.skip(message)
    return path


def run_node(node, script: str):
    """Run `script` with the explorer's exports bound to `ae`; returns what it prints as JSON."""
    program = f"const ae = require({json.dumps(str(JS))});\n{script}"
    done = subprocess.run([node, "-e", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_script_parses(node):
    done = subprocess.run([node, "--check", str(JS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_script_is_strict_and_loads_without_a_page(node):
    assert "'use strict';" in JS.read_text()
    assert run_node(node, "console.log(JSON.stringify(Object.keys(ae).sort()))") == [
        "colour", "init", "readoutText", "step"]


def test_colours_match_the_ones_python_draws_first(node):
    weights = [k / 40 for k in range(41)] + [-0.5, 1.5, 0.123456, 0.999]
    stops = [list(c) for c in explorer._STOPS]
    got = run_node(node, f"console.log(JSON.stringify({json.dumps(weights)}.map(w => ae.colour({json.dumps(stops)}, w))))")
    assert got == [explorer._colour(w) for w in weights]


def test_readout_text_follows_the_contract(node):
    got = run_node(node, "console.log(JSON.stringify([ae.readoutText('head 2', 'cat', 'sat', 0.43124), "
                         "ae.readoutText('head 0', 'a', 'b', 1)]))")
    assert got == ["head 2: cat -> sat = 0.4312", "head 0: a -> b = 1.0000"]


def test_keyboard_steps_stay_on_the_grid(node):
    got = run_node(node, "console.log(JSON.stringify([ae.step(-1, -1, 1, 0, 3, 5), ae.step(0, 0, -1, -1, 3, 5), "
                         "ae.step(2, 4, 1, 1, 3, 5), ae.step(1, 2, 0, -5, 3, 5), ae.step(1, 2, 0, 5, 3, 5)]))")
    assert got == [[1, 0], [0, 0], [2, 4], [1, 0], [1, 4]]


def test_each_explorer_inlines_the_script_and_its_colour_scale():
    html = attention_explorer(torch.full((2, 3, 3), 1 / 3), ["a", "b", "c"]).to_html()
    assert f"<script>{JS.read_text()}</script>" in html
    assert f'data-stops="{json.dumps([list(c) for c in explorer._STOPS], separators=(",", ":"))}"' in html
    assert "__" not in JS.read_text()  # no placeholder left for Python to fill in

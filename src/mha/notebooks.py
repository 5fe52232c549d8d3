"""Clean student notebooks from the lessons, and the Sphinx hook that publishes them.

A lesson (MyST Markdown, jupytext) becomes a plain ``.ipynb`` that any Jupyter renders:

- every code cell keeps its code, except the lines between ``# BEGIN SOLUTION`` and
  ``# END SOLUTION``, which become ``raise NotImplementedError(...)`` (the signature,
  docstring and anything around the markers stay);
- MyST-only syntax becomes Markdown: exercise and admonition directives become bold
  titles and quotes, dropdowns ``<details>``, ``{cite}`` author-year text, labels and
  solution directives disappear;
- ``{glue:text}`` and ``{glue:}`` become the value the page shows, formatted as on the page,
  where the site has been built (``make book`` leaves each lesson's glued values in
  ``_build/jupyter_execute/lessons/<lesson>.glue.json``); otherwise the value's name, and at
  its first mention where running the code prints it;
- cells tagged ``after-you-answer`` (the measurement that reveals a prediction's answer, and
  the text that states it) are folded: code cells with their source hidden, text inside
  ``<details>``, after a line that says to predict first;
- ``check(...)`` cells stay, so the student gets instant feedback.

Used by ``mha notebooks --out DIR`` and, as a Sphinx extension (``mha.notebooks`` in
``_config.yml``), by the book build, which links each lesson's notebook from its page.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import __version__
from .book import BOOK_BUILD_ENV

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
STUB = 'raise NotImplementedError("Write your solution here, then run the check cell below.")'
ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger",
               "error", "seealso", "admonition", "margin", "sidebar", "topic", "epigraph"}
DROPPED = {"exercise-end", "solution-end", "bibliography", "tableofcontents", "toctree",
           "solution", "glue:any"}
AFTER_YOU_ANSWER = "after-you-answer"  # the tag of the cells that reveal a prediction's answer
FOLDED_NOTE = ("**After you answer.** The folded cells below measure the answer of the prediction above, "
               "and the text states it: make your prediction and run its check first, then run them "
               "and open them.")

# The first code cell of every student notebook: a student who downloaded the notebook
# from the website has no clone of the repository, so `import mha` would fail with a bare
# ImportError. This cell says instead what to install, then stops the run.
SETUP_CELL = """\
# The lessons import the course's package `mha`. If it is missing, this cell says how to
# install it (the wheel is offered next to this notebook on the course website).
import importlib.util, sys

if importlib.util.find_spec("mha") is None:
    raise SystemExit(
        "The course package `mha` is not installed in this Python (" + sys.executable + ").\\n"
        "Download {wheel} from the course website (page 'How to use this course'),\\n"
        "then run, in a terminal, in the folder where you saved it:\\n\\n"
        "    python -m pip install {wheel} jupyterlab --extra-index-url https://download.pytorch.org/whl/cpu\\n\\n"
        "(the extra index gives the CPU build of PyTorch), and restart this notebook's kernel.")
"""


# ----------------------------------------------------------------------------- code cells

def stub_solutions(source: str) -> str:
    """Replace each BEGIN/END SOLUTION block (markers included) by a stub at the same indent."""
    out, inside = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise ValueError("nested '# BEGIN SOLUTION' markers")
            inside = True
            out.append(line[: len(line) - len(line.lstrip())] + STUB)
        elif stripped.startswith(END):
            if not inside:
                raise ValueError("'# END SOLUTION' without '# BEGIN SOLUTION'")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("'# BEGIN SOLUTION' without '# END SOLUTION'")
    return "\n".join(out)


def solution_blocks(source: str) -> list[str]:
    """The code between each pair of markers (for tests that compare with the references)."""
    blocks, cur = [], None
    for line in source.splitlines():
        s = line.strip()
        if s.startswith(BEGIN):
            cur = []
        elif s.startswith(END) and cur is not None:
            blocks.append("\n".join(cur))
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


# ----------------------------------------------------------------------------- markdown

_OPEN = re.compile(r"^(\s*)(`{3,}|:{3,})\{([\w:.-]+)\}\s*(.*)$")
_ROLE = re.compile(r"\{([\w:.-]+)\}`([^`]*)`")


def load_bib(path) -> dict[str, str]:
    """key -> "Surname et al. Year" from a .bib file (enough for in-text citations)."""
    refs = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return refs
    for m in re.finditer(r"@\w+\{([^,]+),(.*?)\n\}", text, re.S):
        key, body = m.group(1).strip(), m.group(2)
        author = re.search(r"author\s*=\s*\{(.*?)\},?\s*\n", body, re.S)
        year = re.search(r"year\s*=\s*\{?(\d{4})", body)
        if not author:
            continue
        people = [p.strip() for p in re.sub(r"[{}]", "", author.group(1)).split(" and ")]
        first = people[0].split(",")[0].strip() if "," in people[0] else people[0].split()[-1]
        who = first if len(people) == 1 else (f"{first} and {people[1].split(',')[0].strip()}"
                                              if len(people) == 2 else f"{first} et al.")
        refs[key] = f"{who} {year.group(1) if year else ''}".strip()
    return refs


def format_glued(plain: str, spec: str) -> str:
    """A glued value's text/plain as the page shows it with the role's format ``spec``
    (``{glue:text}`name:.2f```): the same rule as MyST-NB's."""
    import ast

    try:
        value = ast.literal_eval(plain)
    except (SyntaxError, ValueError):
        value = plain
    if not spec:
        return str(value)
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


class Glued:
    """The glued values of one lesson, as the site's build left them (``values``, name ->
    text/plain; None without a build), and the names mentioned so far (``seen``)."""

    def __init__(self, values: dict[str, str] | None = None):
        self.values, self.seen = values, set()

    def text(self, role_text: str) -> str:
        name, _, spec = role_text.partition(":")
        if self.values is not None and name in self.values:
            try:
                return format_glued(self.values[name], spec)
            except (TypeError, ValueError):
                pass
        if name in self.seen:
            return f"`{name}`"
        self.seen.add(name)
        return f"`{name}` (printed as `{name} = ...` when you run the code above)"


def glue_values(lesson: Path, build: Path | None = None) -> dict[str, str] | None:
    """The values the site build glued into ``lesson`` (name -> text/plain), from the
    executed notebook's record in the build folder (``build``, by default ``_build`` beside
    the lessons' folder: ``_build/jupyter_execute/lessons/<lesson>.glue.json``); None where
    the site has not been built. A record older than the lesson is not used."""
    import json

    lesson = Path(lesson)
    build = lesson.parent.parent / "_build" if build is None else Path(build)
    record = build / "jupyter_execute" / lesson.parent.name / f"{lesson.stem}.glue.json"
    try:
        if record.stat().st_mtime < lesson.stat().st_mtime:
            return None
        data = json.loads(record.read_text(encoding="utf-8"))
        return {name: out["data"]["text/plain"] for name, out in data.items()
                if isinstance(out, dict) and "text/plain" in out.get("data", {})}
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _role(m: re.Match, bib: dict[str, str], glued: Glued | None = None) -> str:
    name, text = m.group(1), m.group(2)
    if name.startswith("glue"):
        return (glued or Glued()).text(text)
    if name.startswith("cite"):
        keys = [k.strip() for k in text.split(",")]
        cited = "; ".join(bib.get(k, k) for k in keys)
        return cited if name == "cite:t" else f"({cited})"
    if name == "math":
        return f"${text}$"
    ref = re.match(r"^(.*?)\s*<(.+)>$", text)
    if ref:
        return ref.group(1)
    return f"`{text}`" if name in ("ref", "numref", "doc", "eq", "any", "term") else text


def _strip_options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    opts = {}
    if body and body[0].strip() == "---":
        end = next((i for i in range(1, len(body)) if body[i].strip() == "---"), None)
        if end is not None:
            for line in body[1:end]:
                k, _, v = line.partition(":")
                opts[k.strip()] = v.strip()
            body = body[end + 1:]
    while body and re.match(r"^\s*:[\w-]+:", body[0]):
        k, _, v = body[0].strip()[1:].partition(":")
        opts[k] = v.strip()
        body = body[1:]
    return opts, body


def myst_to_markdown(text: str, bib: dict[str, str] | None = None, glued: Glued | None = None) -> str:
    """Turn MyST-only syntax into Markdown that Jupyter renders; ``glued`` gives the glued
    values (and remembers which names a placeholder has introduced)."""
    bib = bib or {}
    text = "\n".join(_convert(text.splitlines(), bib, glued or Glued())).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text)


def _convert(lines: list[str], bib, glued: Glued) -> list[str]:
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = _OPEN.match(line)
        if not m:
            if re.match(r"^\s*\([\w:.-]+\)=\s*$", line) or re.match(r"^%", line):
                i += 1  # a label target, or a MyST comment
                continue
            out.append(_ROLE.sub(lambda r: _role(r, bib, glued), line))
            i += 1
            continue
        indent, fence, name, arg = m.groups()
        j, body = i + 1, []
        closer = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        while j < len(lines) and not closer.match(lines[j]):
            body.append(lines[j])
            j += 1
        i = j + 1
        opts, body = _strip_options(body)
        inner = _convert(body, bib, glued)
        arg = _ROLE.sub(lambda r: _role(r, bib, glued), arg)
        out += _directive(name, arg, opts, inner, bib)
    return out


def _directive(name: str, arg: str, opts: dict, body: list[str], bib) -> list[str]:
    if name in DROPPED:
        return []
    if name == "exercise-start" or name == "exercise":
        return ["", f"**Exercise: {arg}**" if arg else "**Exercise**", "", *body, ""]
    if name == "solution-start":
        return ["", "*Write your solution in the code cell below, then run the check cell.*", ""]
    if name in ADMONITIONS:
        title = arg if (name == "admonition" and arg) else (arg or name.capitalize())
        if name != "admonition" and not arg:
            title = {"seealso": "See also"}.get(name, name.capitalize())
        return ["", f"> **{title}**", ">", *[("> " + b) if b.strip() else ">" for b in body], ""]
    if name == "dropdown":
        return ["", f"<details><summary>{arg or 'Details'}</summary>", "", *body, "", "</details>", ""]
    if name == "math":
        return ["", "$$", *body, "$$", ""]
    if name in ("code-block", "code", "sourcecode"):
        return ["```" + arg, *body, "```"]
    if name in ("figure", "image"):
        caption = " ".join(b.strip() for b in body if b.strip()) or opts.get("alt", "")
        return ["", f"*(Figure on the course website{': ' + caption if caption else ''})*", ""]
    if name.startswith("glue"):
        return ["", f"*(Run the code above to see `{arg.split(':')[0]}`.)*", ""]
    return body


# ----------------------------------------------------------------------------- notebooks

def wheel_name() -> str:
    """The file name of the package's wheel, as the book build publishes it."""
    return f"mha_course-{__version__}-py3-none-any.whl"


def _values_note(values: dict[str, str] | None) -> str:
    if values is None:
        return (" A name in code font in the text, such as `name`, stands for a value the lesson computes: "
                "running the code cell above the text prints it as `name = ...`.")
    return (" The numbers in the text are those of the course website's run of this lesson; running the "
            "cells prints your run's own as `name = ...` (the same, but for timings).")


def student_notebook(lesson: Path, bib: dict[str, str] | None = None, values: dict[str, str] | None = None):
    """The clean student notebook (an nbformat NotebookNode) for one lesson file; ``values``:
    the glued values of the site's build (:func:`glue_values`), None for none."""
    import jupytext
    import nbformat

    lesson = Path(lesson)
    nb = jupytext.read(lesson, fmt="md:myst")
    title = next((line[2:].strip() for c in nb.cells if c.cell_type == "markdown"
                  for line in c.source.splitlines() if line.startswith("# ")), lesson.stem)
    glues = any("{glue" in c.source for c in nb.cells if c.cell_type == "markdown")
    cells = [nbformat.v4.new_markdown_cell(
        f"*Student notebook for the lesson \u201c{title}\u201d of the multi-head attention course.* "
        "Write each exercise function where it says `raise NotImplementedError`, then run the "
        "`check(...)` cell after it for instant feedback. Those are public checks only, not your "
        "grade: the grader also runs hidden checks, in a separate process."
        + (_values_note(values) if glues else "")),
             nbformat.v4.new_code_cell(SETUP_CELL.format(wheel=wheel_name()))]
    glued, folding = Glued(values), False
    for cell in nb.cells:
        folded = AFTER_YOU_ANSWER in cell.metadata.get("tags", [])
        if folded and not folding:
            cells.append(nbformat.v4.new_markdown_cell(FOLDED_NOTE))
        folding = folded
        if cell.cell_type == "code":
            src = stub_solutions(cell.source)
            code = nbformat.v4.new_code_cell(src)
            if folded:
                code.metadata = {"jupyter": {"source_hidden": True}, "tags": [AFTER_YOU_ANSWER]}
            cells.append(code)
        elif cell.cell_type == "markdown":
            md = myst_to_markdown(cell.source, bib, glued)
            if md.strip():
                if folded:
                    md = f"<details><summary>After you answer</summary>\n\n{md}\n\n</details>"
                cells.append(nbformat.v4.new_markdown_cell(md))
    out = nbformat.v4.new_notebook(cells=cells)
    out.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                    "language_info": {"name": "python"}}
    return out


def default_lessons(root: Path | None = None) -> list[Path]:
    root = Path(root or Path.cwd())
    return sorted((root / "lessons").glob("*.md"))


def write_student_notebooks(out_dir, lessons=None, bib_path=None, build=None) -> list[Path]:
    """Write ``<lesson stem>.ipynb`` for each lesson into ``out_dir``; return the paths. The
    text holds the glued values where the site has been built (in ``build``, by default
    ``_build`` beside the lessons) since the lesson last changed (:func:`glue_values`)."""
    import nbformat

    lessons = [Path(p) for p in (lessons or default_lessons())]
    if not lessons:
        raise ValueError("no lessons given and no lessons/*.md in the current folder")
    for p in lessons:
        if p.suffix != ".md" or not p.is_file():
            raise ValueError(f"lessons must be MyST .md files; {p} is not")
    if bib_path is None:
        candidates = [p.parent.parent / "book" / "references.bib" for p in lessons]
        bib_path = next((c for c in candidates if c.is_file()), None)
    bib = load_bib(bib_path) if bib_path else {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for lesson in lessons:
        target = out / f"{lesson.stem}.ipynb"
        nbformat.write(student_notebook(lesson, bib, glue_values(lesson, build)), target)
        written.append(target)
    return written


# ----------------------------------------------------------------------------- Sphinx

NOTEBOOK_DIR = "_build/student-notebooks"  # relative to the book's source folder


def build_wheel(project: Path, out_dir: Path) -> Path:
    """Build the package's wheel from the project at ``project`` into ``out_dir`` (offline:
    no build isolation, the environment's setuptools); return its path."""
    import shutil
    import subprocess
    import sys

    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
           "--wheel-dir", str(out_dir), str(project)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    shutil.rmtree(project / "build", ignore_errors=True)  # setuptools' scratch folder
    wheel = out_dir / wheel_name()
    if not wheel.is_file():
        raise RuntimeError(f"pip wheel did not write {wheel}")
    return wheel


def _generate(app) -> None:
    src = Path(app.srcdir)
    lessons = sorted((src / "lessons").glob("*.md"))
    if lessons:
        write_student_notebooks(src / NOTEBOOK_DIR, lessons, src / "book" / "references.bib")
    if (src / "pyproject.toml").is_file():  # the wheel students install, next to the notebooks
        build_wheel(src, src / NOTEBOOK_DIR)


def _with_values(app, env) -> list[str]:
    """Once every lesson has been executed (MyST-NB executes a page as it reads it), write the
    student notebooks again, with the values the pages glue (the download links copy them
    when the build writes the site, after this)."""
    src = Path(app.srcdir)
    lessons = sorted((src / "lessons").glob("*.md"))
    if lessons:
        write_student_notebooks(src / NOTEBOOK_DIR, lessons, src / "book" / "references.bib")
    return []


def _link(app, docname: str, source: list[str]) -> None:
    """Add a download link for the student notebook under each lesson's title."""
    if not docname.startswith("lessons/"):
        return
    stem = docname.split("/", 1)[1]
    if not (Path(app.srcdir) / NOTEBOOK_DIR / f"{stem}.ipynb").is_file():
        return
    note = ("\n```{admonition} Work through this lesson in Jupyter\n:class: tip\n"
            f"Download the {{download}}`student notebook </{NOTEBOOK_DIR}/{stem}.ipynb>`: this lesson "
            "with the exercise solutions taken out, ready to run in Jupyter. Its `check` cells give "
            "instant feedback (public checks only; grades come from `mha grade`). It needs the "
            f"course's package, {{download}}`{wheel_name()} </{NOTEBOOK_DIR}/{wheel_name()}>`: "
            "{doc}`/book/how-to-use` gives the one command that installs it.\n```\n")
    text = source[0]
    m = re.search(r"^# .*$", text, re.M)
    if m:
        source[0] = text[: m.end()] + "\n" + note + text[m.end():]


def setup(app):
    """Sphinx extension: write the student notebooks and link them from the lessons."""
    # Kernels that execute the lessons inherit this: mha.book.glue then hands values to
    # the page instead of printing them (see src/mha/book.py).
    os.environ[BOOK_BUILD_ENV] = "1"
    app.connect("builder-inited", _generate)
    app.connect("env-updated", _with_values)
    app.connect("source-read", _link)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}

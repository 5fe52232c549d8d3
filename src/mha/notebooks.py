"""Clean student notebooks from the lessons, and the Sphinx hook that publishes them.

A lesson (MyST Markdown, jupytext) becomes a plain ``.ipynb`` that any Jupyter renders:

- every code cell keeps its code, except the lines between ``# BEGIN SOLUTION`` and
  ``# END SOLUTION``, which become ``raise NotImplementedError(...)`` (the signature,
  docstring and anything around the markers stay);
- MyST-only syntax becomes Markdown: exercise and admonition directives become bold
  titles and quotes, dropdowns ``<details>``, ``{cite}`` author-year text, ``{glue:}``
  the name of the computed value, labels and solution directives disappear;
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


def _role(m: re.Match, bib: dict[str, str]) -> str:
    name, text = m.group(1), m.group(2)
    if name.startswith("glue"):
        return f"`{text.split(':')[0]}`"
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


def myst_to_markdown(text: str, bib: dict[str, str] | None = None) -> str:
    """Turn MyST-only syntax into Markdown that Jupyter renders."""
    bib = bib or {}
    text = "\n".join(_convert(text.splitlines(), bib)).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text)


def _convert(lines: list[str], bib) -> list[str]:
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = _OPEN.match(line)
        if not m:
            if re.match(r"^\s*\([\w:.-]+\)=\s*$", line) or re.match(r"^%", line):
                i += 1  # a label target, or a MyST comment
                continue
            out.append(_ROLE.sub(lambda r: _role(r, bib), line))
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
        inner = _convert(body, bib)
        arg = _ROLE.sub(lambda r: _role(r, bib), arg)
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


def student_notebook(lesson: Path, bib: dict[str, str] | None = None):
    """The clean student notebook (an nbformat NotebookNode) for one lesson file."""
    import jupytext
    import nbformat

    lesson = Path(lesson)
    nb = jupytext.read(lesson, fmt="md:myst")
    title = next((line[2:].strip() for c in nb.cells if c.cell_type == "markdown"
                  for line in c.source.splitlines() if line.startswith("# ")), lesson.stem)
    cells = [nbformat.v4.new_markdown_cell(
        f"*Student notebook for the lesson \u201c{title}\u201d of the multi-head attention course.* "
        "Write each exercise function where it says `raise NotImplementedError`, then run the "
        "`check(...)` cell after it for instant feedback. Those are public checks only, not your "
        "grade: the grader also runs hidden checks, in a separate process."),
             nbformat.v4.new_code_cell(SETUP_CELL.format(wheel=wheel_name()))]
    for cell in nb.cells:
        if cell.cell_type == "code":
            src = stub_solutions(cell.source)
            cells.append(nbformat.v4.new_code_cell(src))
        elif cell.cell_type == "markdown":
            md = myst_to_markdown(cell.source, bib)
            if md.strip():
                cells.append(nbformat.v4.new_markdown_cell(md))
    out = nbformat.v4.new_notebook(cells=cells)
    out.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                    "language_info": {"name": "python"}}
    return out


def default_lessons(root: Path | None = None) -> list[Path]:
    root = Path(root or Path.cwd())
    return sorted((root / "lessons").glob("*.md"))


def write_student_notebooks(out_dir, lessons=None, bib_path=None) -> list[Path]:
    """Write ``<lesson stem>.ipynb`` for each lesson into ``out_dir``; return the paths."""
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
        nbformat.write(student_notebook(lesson, bib), target)
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
    app.connect("source-read", _link)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}

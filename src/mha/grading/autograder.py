"""Build a Gradescope autograder zip: ``setup.sh``, ``run_autograder`` and the course source.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once to build the
image, and ``run_autograder`` for every submission, which must leave
``/autograder/results/results.json``. The grader runs as root there, so the sandbox has
everything it needs: namespaces, an unprivileged user, hidden course files.
"""

from __future__ import annotations

import shlex
import zipfile
from pathlib import Path

SETUP = """#!/usr/bin/env bash
# Runs once when Gradescope builds the autograder image.
set -euo pipefail
cd /autograder/source
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip util-linux >/dev/null
python3 -m venv /opt/mha
# torch first, pinned and from the CPU index, so nothing pulls a multi-GB CUDA build.
/opt/mha/bin/pip install --quiet --upgrade pip
/opt/mha/bin/pip install --quiet -c course/constraints.txt torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
/opt/mha/bin/pip install --quiet -c course/constraints.txt ./course
/opt/mha/bin/mha grade --help >/dev/null
"""

RUN = """#!/usr/bin/env bash
# Runs for every submission; writes /autograder/results/results.json.
set -uo pipefail
mkdir -p /autograder/results
/opt/mha/bin/mha grade /autograder/submission --by-folder --jobs 1 --quiet {only} \\
    --gradescope /autograder/results
if [ ! -s /autograder/results/results.json ]; then
  echo '{{"score": 0, "output": "The grader could not run; please tell your instructor."}}' \\
    > /autograder/results/results.json
fi
"""

# What the course package needs to install: no lessons, tests or book.
SOURCE_FILES = ("pyproject.toml", "constraints.txt", "README.md")


def project_root() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "mha").is_dir():
            return parent
    raise ValueError("the autograder zip is built from a source checkout (pyproject.toml and "
                     "src/mha not found above the installed package)")


def build_zip(out, *, only: list[str] | None = None, root: Path | None = None,
              exercises: list | None = None) -> Path:
    """Write the autograder zip to ``out``; ``only`` restricts the exercises it grades;
    ``exercises`` are instructors' own exercise files (checked now, as ``mha grade
    --exercises`` does, and graded on Gradescope from ``exercises/`` in the zip)."""
    from mha.autograde import load_exercises, select, unregister

    files = [Path(f) for f in exercises or []]
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise ValueError(f"two exercise files have the same name: {', '.join(sorted(names))}")
    try:
        for f in files:
            load_exercises(f)
        select(only)  # fail now, not on Gradescope, if a pattern matches nothing
    finally:
        for f in files:
            unregister(f)
    root = root or project_root()
    flags = " ".join([f"--only {shlex.quote(o)}" for o in (only or [])]
                     + [f"--exercises /autograder/source/exercises/{shlex.quote(n)}" for n in names])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        _add(z, "setup.sh", SETUP)
        _add(z, "run_autograder", RUN.format(only=flags))
        for name in SOURCE_FILES:
            if (root / name).is_file():
                z.write(root / name, f"course/{name}")
        for path in sorted((root / "src" / "mha").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                z.write(path, f"course/{path.relative_to(root)}")
        for f in files:
            z.write(f, f"exercises/{f.name}")
    return out


def _add(z: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = 0o755 << 16  # executable
    z.writestr(info, text)

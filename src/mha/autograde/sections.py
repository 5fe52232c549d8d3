"""Where a point is taught: the lesson section an exercise, or one of its mistakes, links to.

An exercise's ``section`` is the heading of the section of its lesson that teaches it; a
mistake whose point is taught elsewhere names its own (``Mistake.section``). Either is written
as the page shows it:

- ``"Why divide by $\\sqrt{d_h}$?"``: a heading of the exercise's own lesson;
- ``"05-causal-masking: Pitfall 2: the row with nothing allowed"``: a heading of another lesson;
- ``"05-causal-masking#pitfall-2-the-row-with-nothing-allowed"``: a lesson and an anchor;
- ``"https://..."``: any page.

:func:`taught` resolves them to the key the class report links by, ``"<lesson>#<anchor>"``
(or the URL as it is), and remembers each heading's plain title for the report's text.
"""

from __future__ import annotations

import re
import unicodedata

# The plain title of every heading resolved so far, by key.
TITLES: dict[str, str] = {}

_OTHER_LESSON = re.compile(r"(\d\d-[\w-]+): (.+)$", re.S)


def taught(ex, mistake: int | None = None) -> str:
    """The key of where mistake ``mistake`` of ``ex`` is taught (its own section, else the
    exercise's), or of the exercise itself when ``mistake`` is None; "" where none is given."""
    own = ex.mistakes[mistake].section if mistake is not None else ""
    return resolve(own or ex.section, ex.lesson)


def resolve(section: str, lesson: str) -> str:
    """The key of ``section`` as written in ``lesson``'s exercises (see the module's docstring)."""
    if not section or "://" in section or section.startswith("file:") or re.fullmatch(r"[\w.-]+#[\w-]*", section):
        return section
    found = _OTHER_LESSON.match(section)
    if found:
        lesson, section = found.groups()
    key = f"{lesson}#{anchor(section)}"
    TITLES[key] = plain_title(section)
    return key


def text(key: str) -> str:
    """How a link to where a point is taught reads: "lesson 05: Pitfall 2: ..." for a section
    of the course (``<lesson>#<anchor>``); a URL as it is."""
    if not key or "://" in key or key.startswith("file:"):
        return key
    lesson, _, anchor_ = key.partition("#")
    title = TITLES.get(key) or anchor_.replace("-", " ")
    return f"lesson {lesson[:2]}: {title}" if lesson[:2].isdigit() else f"{lesson}: {title}"


def anchor(heading: str) -> str:
    """The id the website gives a section with this heading (docutils' ``make_id``: lower
    case, ASCII, every run of other characters one hyphen; MyST's maths ``$\\sqrt{d_h}$``
    counts as its TeX text)."""
    text = heading.replace("$", "").lower()
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^a-z0-9]+", "-", " ".join(text.split()))
    return re.sub(r"^[-0-9]+|-+$", "", text)


def plain_title(heading: str) -> str:
    """A heading as plain text: its maths and code marks turned into characters."""
    text = re.sub(r"\\sqrt\{([^}]*)\}", "\u221a\\1", heading)
    text = text.replace("^\\top", "\u1d40").replace("\\,", " ")
    return " ".join(re.sub(r"[$`*]", "", text).split())

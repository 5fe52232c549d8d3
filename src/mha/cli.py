"""The ``mha`` command: ``grade``, ``report``, ``feedback``, ``assign``, ``notebooks``, ``autograder`` and ``bench``."""

from __future__ import annotations

import argparse
import sys

# mha.grading.sandbox.LEVELS (tests/test_sandbox_levels.py holds the two equal), not imported
# here: the sandbox needs a Unix, and the other commands run anywhere.
ISOLATION_LEVELS = ("namespaces", "user-namespace", "landlock", "none")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # the benchmark parses its own arguments
        from mha import benchmark

        return benchmark.main(argv[1:]) or 0
    parser = argparse.ArgumentParser(prog="mha", description="Multi-head attention course tools.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="grade submissions (.ipynb, .md, .py, or folders)")
    g.add_argument("submissions", nargs="+", metavar="SUBMISSION")
    g.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    g.add_argument("--csv", metavar="FILE", help="write one row of points per submission (with --roster: the roster's "
                                                   "id, name, section, and a row for each student who submitted nothing)")
    g.add_argument("--gradescope", metavar="DIR",
                   help="write Gradescope results.json (DIR/results.json for one submission, "
                        "else DIR/<student>/results.json)")
    g.add_argument("--jobs", "-j", type=int, default=2, help="submissions graded at once (default 2)")
    g.add_argument("--only", action="append", metavar="ID",
                   help="grade only these exercises: an id, a prefix (dims) or a lesson name; repeatable")
    g.add_argument("--by-folder", action="store_true",
                   help="each folder given is one student's submission (all its notebooks together)")
    g.add_argument("--seed", type=int, help="seed of the hidden checks (default: fresh per submission)")
    g.add_argument("--exercise-timeout", type=float, default=10.0, metavar="S")
    g.add_argument("--submission-timeout", type=float, default=120.0, metavar="S")
    g.add_argument("--details", action="store_true", help="print every failed check")
    g.add_argument("--report", metavar="DIR",
                   help="write the class report: DIR/class-report.html (one offline page) and DIR/class-report.csv")
    _report_options(g)
    g.add_argument("--exercises", metavar="FILE", action="append",
                   help="grade the exercises defined in FILE, an instructor's own Python file (repeatable); "
                        "with --only, choose among them and the course's")
    g.add_argument("--exercises-draws", type=int, default=None, metavar="N",
                   help="hidden draws on which --exercises files are checked when loaded (default 20; fewer is "
                        "quicker while writing one)")
    g.add_argument("--submitted-at", metavar="WHEN",
                   help="when these submissions were handed in (2024-03-08 23:59), for --due; default: the time "
                        "each notebook was last changed")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    g.add_argument("--isolation", choices=ISOLATION_LEVELS, default=ISOLATION_LEVELS[0],
                   help="the strongest isolation to try (default: namespaces as root, else a user namespace, else "
                        "Landlock, the first this machine allows); a weaker one only to compare them")
    g.add_argument("--allow-unsandboxed", action="store_true",
                   help="grade even where no isolation is to be had (then each submission runs as you and can read, "
                        "change or delete your files); without it mha grade refuses")

    r = sub.add_parser("report", help="make the class report again from the grades of mha grade --json")
    r.add_argument("grades", nargs="+", metavar="GRADES.json",
                   help="grades of mha grade --json; several are merged (a late submission, a section graded again)")
    r.add_argument("--out", required=True, metavar="DIR",
                   help="write DIR/class-report.html and DIR/class-report.csv")
    _report_options(r)
    _merge_options(r)
    r.add_argument("--json", metavar="FILE", help="write the merged grades, with the roster and adjustments, as one "
                                                  "grades file")
    r.add_argument("--csv", metavar="FILE", help="write one row of points per submission, as mha grade --csv")
    r.add_argument("--gradescope", metavar="DIR", help="write Gradescope results.json per submission, as mha grade")
    r.add_argument("--draft-mistakes", metavar="FILE",
                   help="write every error of the class that no hint explains, made by --draft-min students or more, "
                        "as a draft Mistake of its exercise, in a Python file to edit and grade with (--exercises)")
    r.add_argument("--draft-min", type=int, default=2, metavar="N",
                   help="the fewest students an error needs for a draft mistake (default 2)")

    f = sub.add_parser("feedback", help="write one feedback page per student, from the grades of mha grade --json")
    f.add_argument("grades", nargs="+", metavar="GRADES.json", help="grades of mha grade --json (several are merged)")
    f.add_argument("--out", required=True, metavar="DIR",
                   help="write DIR/<id>.html per student who submitted (pages that open in any browser) and "
                        "DIR/index.csv")
    f.add_argument("--roster", metavar="CSV", help="the class list (default: the one the grades keep): pages are "
                                                   "named after its ids")
    _adjust_options(f)
    f.add_argument("--site-url", metavar="URL", help="address of the course website, for links to lesson sections")
    _merge_options(f)

    s = sub.add_parser("assign", help="make the student version of an instructor's exercise file")
    s.add_argument("file", metavar="FILE", help="the instructor's Python file of exercises")
    s.add_argument("--out", required=True, metavar="DIR",
                   help="where to write FILE's student version (.json) and a student notebook (.ipynb)")
    s.add_argument("--draws", type=int, default=None, metavar="N",
                   help="hidden draws on which FILE is checked (default 20; fewer is quicker while writing it)")

    n = sub.add_parser("notebooks", help="write clean student notebooks (.ipynb) from the lessons; after `make book` "
                       "their text holds the values the website shows")
    n.add_argument("--out", required=True, metavar="DIR")
    n.add_argument("lessons", nargs="*", metavar="LESSON.md", help="default: lessons/*.md")

    a = sub.add_parser("autograder", help="build a Gradescope autograder zip")
    a.add_argument("--out", required=True, metavar="FILE.zip")
    a.add_argument("--only", action="append", metavar="ID", help="exercises this assignment grades")
    a.add_argument("--exercises", metavar="FILE", action="append",
                   help="an instructor's own exercise file to grade (repeatable), as for mha grade")

    sub.add_parser("bench", help="run the benchmarks (mha.benchmark)")
    args = parser.parse_args(argv)

    if args.command == "grade":
        return _grade(args)
    if args.command == "report":
        return _report(args)
    if args.command == "feedback":
        return _feedback(args)
    if args.command == "assign":
        from mha.autograde import DRAWS, ExerciseFileError, write_student_version

        draws = DRAWS if args.draws is None else args.draws
        if draws < 1:
            print(f"mha assign: --draws must be at least 1, got {draws}", file=sys.stderr)
            return 2
        print(f"mha assign: checking {args.file} on {draws} hidden draws...", file=sys.stderr)
        try:
            paths = write_student_version(args.file, args.out, draws=draws)
        except (OSError, ExerciseFileError) as e:
            print(f"mha assign: {e}", file=sys.stderr)
            return 2
        for p in paths:
            print(p)
        return 0
    if args.command == "notebooks":
        from mha.notebooks import write_student_notebooks

        try:
            paths = write_student_notebooks(args.out, args.lessons or None)
        except (OSError, ValueError) as e:
            print(f"mha notebooks: {e}", file=sys.stderr)
            return 2
        for p in paths:
            print(p)
        from mha.notebooks import default_lessons, glue_values

        if any(glue_values(lesson) is None for lesson in (args.lessons or default_lessons())):
            print("mha notebooks: no site build of some lessons (make book): their text names each computed "
                  "value, which running the notebook prints", file=sys.stderr)
        return 0
    if args.command == "autograder":
        from mha.grading.autograder import build_zip

        try:
            print(build_zip(args.out, only=args.only, exercises=args.exercises))
        except (OSError, ValueError) as e:
            print(f"mha autograder: {e}", file=sys.stderr)
            return 2
        return 0
    return 2  # pragma: no cover


def _report_options(p) -> None:
    p.add_argument("--roster", metavar="CSV",
                   help="the class list: a CSV with the columns id, name and section (section optional; Canvas's "
                        "gradebook export will do); the report then names who submitted nothing and breaks every "
                        "table down by section, and every output carries the ids")
    p.add_argument("--pseudonymise", "--pseudonymize", action="store_true",
                   help="in the class report, show students under pseudonyms (student 01, ...); the key is "
                        "written beside the report's folder (DIR-pseudonym-key.csv), to keep to yourself")
    p.add_argument("--pseudonym-key", metavar="FILE", help="where to write the key to the pseudonyms (not inside "
                                                           "the report's folder)")
    p.add_argument("--site-url", metavar="URL",
                   help="address of the course website, for the class report's links to lesson sections")
    _adjust_options(p)
    p.add_argument("--lms-csv", metavar="FILE",
                   help="write a gradebook CSV any LMS imports: id, name, section, status, points per lesson, "
                        "late penalty, final; one row per student of the roster")
    p.add_argument("--canvas", metavar="FILE",
                   help="write Canvas's gradebook import CSV (needs --roster): a column per lesson, or one with "
                        "--canvas-assignment")
    p.add_argument("--canvas-assignment", metavar="NAME",
                   help="with --canvas: one column, the final total, headed NAME (as Canvas's export heads the "
                        "assignment's column: \"Homework 2 (12345)\")")
    p.add_argument("--feedback", metavar="DIR", help="write one feedback page per student into DIR (as mha feedback)")


def _adjust_options(p) -> None:
    p.add_argument("--overrides", metavar="CSV",
                   help="points changed by hand: a CSV with the columns student, exercise, points, reason (and by, "
                        "date); every row is kept as the trail, the last for a student and exercise counts")
    p.add_argument("--due", action="append", metavar="[LESSON=]WHEN",
                   help="due date, 2024-03-08 23:59, for every lesson or (LESSON=WHEN, repeatable) for one; "
                        "lateness is recorded, and --late-penalty applied")
    p.add_argument("--late-penalty", metavar="POLICY",
                   help="share of a late lesson's points taken per started hour, day or week late: 10%%/day, "
                        "with max=50%% and grace=15min after commas (default: none)")


def _merge_options(p) -> None:
    p.add_argument("--replace", action="store_true",
                   help="a submission (or roster student) in several files: take the last file's grades "
                        "(default: stop with an error naming the files)")


def _submissions(args, own_files) -> tuple[list, list[str]] | str:
    """The submissions the command line names, and lines to tell the user; or an error."""
    from pathlib import Path

    from mha.grading import extract
    from mha.grading.grader import expand

    said = []
    paths = []
    for given in map(Path, args.submissions):
        if given.is_dir() and not extract.gradable_files(given):
            inside, depth = _student_folders(given)
            full = sum(bool(extract.gradable_files(d)) for d in inside)
            where = f"{full} folders{' in its folders (sections)' if depth == 2 else ''} that do"
            empty = f", and {len(inside) - full} empty ones" if len(inside) > full else ""
            if inside and not args.by_folder:
                return (f"{given} holds no notebook but {where}{empty}: give --by-folder to grade each folder as "
                        "one student's submission")
            if inside:
                said.append(f"{given} holds no notebook but {where}{empty}: each is graded as one student's "
                            "submission")
                paths += inside
                continue
        paths += [given] if args.by_folder else expand([given])
    kept = []
    own = {f: f.read_bytes() for f in own_files if f.is_file()}
    for p in paths:
        if p.resolve() in own_files:
            said.append(f"{p} is an exercise file given with --exercises: not graded as a submission")
        elif p.is_file() and p.suffix == ".py" and (p.read_bytes() in own.values() or _defines_exercises(p)):
            said.append(f"{p} is an exercise file (a copy of one given with --exercises, or a file that defines "
                        "Exercise objects): not graded as a submission")
        else:
            kept.append(p)
    return kept, said


def _student_folders(folder) -> tuple[list, int]:
    """The student folders of a folder that holds no notebook: its folders, if one of them
    holds notebooks; else the folders of its folders (a class laid out by section), if one of
    those does. Empty ones are kept (the grader names them). ([], 0) when neither."""
    from mha.grading import extract

    def folders(f):
        return sorted(d for d in f.iterdir() if d.is_dir() and not d.name.startswith((".", "__")))

    first = folders(folder)
    if any(extract.gradable_files(d) for d in first):
        return first, 1
    second = [d for f in first if not extract.gradable_files(f) for d in folders(f)]
    if any(extract.gradable_files(d) for d in second):
        return second, 2
    return [], 0


def _defines_exercises(path) -> bool:
    """Whether a Python file builds Exercise objects at module level (an exercise file)."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return False
    for node in tree.body:
        value = getattr(node, "value", None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(value, ast.Call):
            name = getattr(value.func, "id", getattr(value.func, "attr", ""))
            if name == "Exercise":
                return True
    return False


def _cannot_write(target: str, folder: bool) -> str | None:
    """Why ``target`` (a file, or a ``folder`` to make) cannot be written, or None. The first
    part of its path that exists must be a folder this user may write in."""
    import os
    from pathlib import Path

    path = Path(target)
    if path.exists():
        if path.is_dir() != folder:
            return "is a folder" if path.is_dir() else "is a file, not a folder"
        return None if os.access(path, os.W_OK) else "cannot write to it"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot write in {parent}"


def _grade(args) -> int:
    from pathlib import Path

    missing = [s for s in args.submissions if not Path(s).exists()]
    if missing:
        print(f"mha grade: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"mha grade: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    for option, target, folder in [("--json", args.json, False), ("--csv", args.csv, False),
                                   ("--gradescope", args.gradescope, True), ("--report", args.report, True),
                                   *_output_targets(args)]:
        why = _cannot_write(target, folder) if target else None
        if why:  # said now, not after the grading
            print(f"mha grade: {option} {target}: {why}", file=sys.stderr)
            return 2
    adjustments = _adjustments(args, "mha grade")
    if isinstance(adjustments, int):
        return adjustments
    if args.submitted_at:
        from mha.grading.adjust import AdjustError, parse_when

        try:
            submitted_at = parse_when(args.submitted_at, "--submitted-at").isoformat(timespec="seconds")
        except AdjustError as e:
            print(f"mha grade: {e}", file=sys.stderr)
            return 2

    # After the checks that need nothing of the course: these import torch (a second or two).
    from mha.autograde import DRAWS, ExerciseFileError, load_exercises, select
    from mha.autograde.registry import EXTENDED
    from mha.grading import grades, reports
    from mha.grading.grader import grade_many, unique_names
    from mha.grading.sandbox import Limits

    draws = DRAWS if args.exercises_draws is None else args.exercises_draws
    if draws < 1:
        print(f"mha grade: --exercises-draws must be at least 1, got {draws}", file=sys.stderr)
        return 2
    roster = _roster(args, "mha grade")
    if isinstance(roster, int):
        return roster
    if args.canvas and not roster:
        print("mha grade: --canvas needs --roster: Canvas matches each row to a student by the ids of the roster",
              file=sys.stderr)
        return 2
    own = []
    for file in args.exercises or []:
        if Path(file).suffix == ".json":
            print(f"mha grade: --exercises {file}: that is a student version (no reference, no hidden checks); "
                  "grade with the instructor's .py file", file=sys.stderr)
            return 2
        if not args.quiet:
            print(f"mha grade: checking the exercises of {file} on {draws} hidden draws...", file=sys.stderr)
        try:
            own += [ex for ex in load_exercises(file, draws=draws) if ex.id not in EXTENDED]
        except ExerciseFileError as e:
            print(f"mha grade: --exercises: {e}", file=sys.stderr)
            return 2
    try:
        exercises = select(args.only) if args.only or not own else own
    except ValueError as e:
        print(f"mha grade: --only: {e}", file=sys.stderr)
        return 2
    found = _submissions(args, {Path(f).resolve() for f in args.exercises or []})
    if isinstance(found, str):
        print(f"mha grade: {found}", file=sys.stderr)
        return 2
    paths, said = found
    for line in said:
        print(f"mha grade: {line}", file=sys.stderr)
    if not paths:
        print("mha grade: no submission to grade", file=sys.stderr)
        return 2
    try:
        unique_names(paths)
    except ValueError as e:
        print(f"mha grade: {e}", file=sys.stderr)
        return 2
    isolation = _isolation(args)  # the last check: said, or refused, before any grading
    if isinstance(isolation, int):
        return isolation
    limits = Limits(exercise_s=args.exercise_timeout, submission_s=args.submission_timeout,
                    cpu_s=int(args.submission_timeout) + 5)
    tty = sys.stderr.isatty()

    def progress(r, done, total):
        if args.quiet:
            return
        msg = f"[{done}/{total}] {r.student}: {r.score:g}/{r.max_score:g} ({r.seconds:.1f} s)"
        print(("\r\033[K" + msg) if tty else msg, file=sys.stderr, end="" if tty and done < total else "\n",
              flush=True)

    reports_ = grade_many(paths, exercises, limits=limits, jobs=args.jobs, seed=args.seed, on_done=progress,
                          isolation=isolation)
    print(reports.table(reports_, exercises))
    _said_isolation(reports_, isolation)
    if args.details:
        for r in reports_:
            print()
            print(reports.details(r))
    status = _warn(reports_, exercises)
    doc = grades.document(reports_, exercises, roster)
    if adjustments:
        doc["adjustments"] = adjustments
    if args.submitted_at:
        for sub in doc["submissions"]:
            sub["submitted"] = {name: submitted_at for name in sub.get("files", [])}
    if args.json:
        try:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            reports.write_json(reports_, exercises, args.json, doc)
        except OSError as e:  # every other report is still written
            print(f"mha grade: --json {args.json}: {e.strerror or e}", file=sys.stderr)
            status = 2
    made = _outputs(doc, [], args, "mha grade", report=args.report, single=len(reports_) == 1)
    return max(status, made)


def _output_targets(args) -> list[tuple[str, str | None, bool]]:
    """The outputs of the report options, for the check that they can be written."""
    return [("--lms-csv", args.lms_csv, False), ("--canvas", args.canvas, False), ("--feedback", args.feedback, True),
            ("--pseudonym-key", getattr(args, "pseudonym_key", None), False)]


def _adjustments(args, command: str) -> dict | int:
    """The adjustments the options give (overrides, due dates, a late penalty), as the grades
    file keeps them; or an exit status after saying what is wrong."""
    from mha.grading import adjust

    try:
        overrides = adjust.read_overrides(args.overrides) if args.overrides else None
        due = adjust.parse_due(args.due)
        policy = adjust.parse_policy(args.late_penalty)
    except adjust.AdjustError as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 2
    if args.late_penalty and not due:
        print(f"{command}: --late-penalty needs --due (the date a lesson is late after)", file=sys.stderr)
        return 2
    return adjust.record(overrides, due, policy)


def _outputs(doc, notes, args, command: str, *, report=None, single=False) -> int:
    """Every output of the grades but the grades file: the grader's CSV and Gradescope files,
    the class report, the LMS exports, feedback pages and draft mistakes. Each is written or
    says why not; returns the exit status."""
    from pathlib import Path

    from mha.grading import adjust, gradebook
    from mha.grading.roster import RosterError

    status = 0
    try:
        book = gradebook.entries(doc)
    except (adjust.AdjustError, RosterError) as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 2
    roster = bool(doc.get("roster"))
    if getattr(args, "canvas", None) and not roster:
        print(f"{command}: --canvas needs --roster: Canvas matches each row to a student by the ids of the roster",
              file=sys.stderr)
        return 2
    exercises = doc["exercises"]
    lessons = list(dict.fromkeys(e["lesson"] for e in exercises))
    max_of = {x: sum(float(e["points"]) for e in exercises if e["lesson"] == x) for x in lessons}
    due = bool((doc.get("adjustments") or {}).get("due"))
    writers = [
        ("--csv", getattr(args, "csv", None), lambda t: gradebook.write_csv(book, exercises, t, roster=roster, due=due)),
        ("--gradescope", getattr(args, "gradescope", None),
         lambda t: gradebook.write_gradescope(book, exercises, t, single=single)),
        ("--lms-csv", args.lms_csv, lambda t: gradebook.write_lms_csv(book, lessons, t)),
        ("--canvas", args.canvas, lambda t: _canvas(book, lessons, max_of, t, args, command)),
        ("--feedback", args.feedback, lambda t: _feedback_pages(book, doc, t, args)),
    ]
    for option, target, write in writers:
        if not target:
            continue
        try:
            (Path(target) if option in ("--gradescope", "--feedback") else Path(target).parent).mkdir(
                parents=True, exist_ok=True)
            write(target)
        except (OSError, ValueError) as e:  # every other output is still written
            print(f"{command}: {option} {target}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            status = 2
    if report:
        status = max(status, _class_report(doc, notes, args, report, command))
    return status


def _isolation(args):
    """The isolation mha grade will use, said on stderr; or the exit status 2 after saying
    why it will not grade (no isolation here, and no --allow-unsandboxed)."""
    from mha.grading import sandbox

    isolation = sandbox.Isolation(args.isolation, allow_none=args.allow_unsandboxed)
    level = sandbox.probe(isolation)
    if level == "none" and not args.allow_unsandboxed:
        print(f"mha grade: refused: no isolation is to be had here ({sandbox.PROTECTS['none']}). Grade as root, in a "
              "container (book/grading.md says how), or on a machine that allows user namespaces or Landlock; "
              "--allow-unsandboxed grades anyway", file=sys.stderr)
        return 2
    if level == "none":
        line = "!" * 78
        print(f"{line}\nmha grade: WARNING: grading WITHOUT ISOLATION (--allow-unsandboxed).\n"
              f"{sandbox.PROTECTS['none']}.\nGrade only submissions you trust this way.\n{line}", file=sys.stderr)
    else:
        print(f"mha grade: isolation: {level} ({sandbox.PROTECTS[level]})", file=sys.stderr)
    return isolation


def _said_isolation(reports_, isolation) -> None:
    """Name the submissions whose workers reached a weaker isolation than the probe did."""
    from mha.grading import sandbox

    expected = sandbox.probe(isolation)
    weaker = [r.student for r in reports_ if r.sandbox and sandbox.weakest([r.sandbox, expected]) != expected]
    if weaker:
        print(f"mha grade: WARNING: {len(weaker)} submission(s) ran with less isolation than {expected}: "
              f"{', '.join(weaker[:10])} (see each one's \"sandbox\" in --json)", file=sys.stderr)


def _canvas(book, lessons, max_of, target, args, command: str) -> None:
    from mha.grading import gradebook

    left_out = gradebook.write_canvas(book, lessons, max_of, target, args.canvas_assignment)
    if left_out:
        print(f"{command}: --canvas {target}: left out {len(left_out)} submission(s) not on the roster "
              f"({', '.join(left_out)}): Canvas could not match them", file=sys.stderr)


def _feedback_pages(book, doc, target, args) -> None:
    from mha.grading import classreport, feedback

    pages = feedback.write(book, doc["exercises"], target, graded=doc.get("graded", ""),
                           site_url=args.site_url or classreport.local_site())
    print(f"feedback: {len(pages)} pages in {target} (and {feedback.INDEX}, whose page is whose)", file=sys.stderr)


def _warn(reports_, exercises) -> int:
    """Say what the instructor should look at: submissions that could not be read (exit
    status 1), exercises that no submission answers (a lesson not handed in, or a missing
    --only)."""
    status = 0
    for r in reports_:
        if r.exercises and all(e.status == "unreadable" for e in r.exercises):
            reason = r.notes[0] if r.notes else "it could not be read"
            print(f"mha grade: {r.path}: not graded: {reason}", file=sys.stderr)
            status = 1
    readable = [r for r in reports_ if not all(e.status == "unreadable" for e in r.exercises)]
    absent = [e for k, e in enumerate(exercises) if readable and all(r.exercises[k].status == "missing"
                                                                   for r in readable)]
    if absent:
        lessons = {}
        for e in absent:
            lessons.setdefault(e.lesson, []).append(e)
        whole = [lesson for lesson, es in lessons.items()
                 if len(es) == sum(e.lesson == lesson for e in exercises)]
        if whole:
            print(f"mha grade: no submission answers any exercise of {', '.join(whole)} ({sum(len(lessons[x]) for x in whole)} "
                  "exercises): --only LESSON grades only the lessons handed in", file=sys.stderr)
        for lesson, es in lessons.items():
            if lesson not in whole:
                print(f"mha grade: no submission defines {', '.join(e.function for e in es)} "
                      f"({', '.join(e.id for e in es)})", file=sys.stderr)
    return status


def _roster(args, command: str):
    """The roster of --roster (None without one), or an exit status after saying what is wrong."""
    if not args.roster:
        return None
    from mha.grading.roster import RosterError, read

    try:
        return read(args.roster)
    except RosterError as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 2


def _class_report(doc, notes, args, out, command: str) -> int:
    from mha.grading import adjust, classreport, classstats, drafts
    from mha.grading.roster import RosterError

    try:
        report = classstats.build(doc, pseudonymise=args.pseudonymise,
                                  site_url=args.site_url or classreport.local_site(), notes=notes)
        written = classreport.write(report, out, key=args.pseudonym_key)
    except (RosterError, adjust.AdjustError, ValueError) as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{command}: cannot write the class report into {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"class report: {written[0]} and {written[1]}", file=sys.stderr)
    if len(written) > 2:
        print(f"the key to the pseudonyms (keep it to yourself): {written[2]}", file=sys.stderr)
    target = getattr(args, "draft_mistakes", None)
    if target:
        named = report if not args.pseudonymise else classstats.build(doc, notes=notes)
        try:
            n = drafts.write(named, target, min_students=args.draft_min)
        except OSError as e:
            print(f"{command}: --draft-mistakes {target}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"draft mistakes: {n} in {target} (write their hints, then grade with --exercises {target})",
              file=sys.stderr)
    return 0


def _read_grades(args, command: str):
    """The grades files of the command line, merged, with the roster and adjustments the
    options give (which replace those the files keep); or an exit status."""
    from pathlib import Path

    from mha.grading import grades
    from mha.grading.roster import RosterError, as_records, match

    seen: dict = {}
    for path in args.grades:
        key = Path(path).resolve()
        if key in seen:
            print(f"{command}: {path} is given twice (as {seen[key]} and {path}): give each grades file once",
                  file=sys.stderr)
            return 2
        seen[key] = path
    roster = _roster(args, command) if getattr(args, "roster", None) else None
    if isinstance(roster, int):
        return roster
    adjustments = _adjustments(args, command)
    if isinstance(adjustments, int):
        return adjustments
    try:
        named = [(path, grades.read(path)) for path in args.grades]
        if roster is None:
            kept = [d["roster"] for _, d in named if d.get("roster")]
            if kept:
                from mha.grading.roster import from_records

                roster = from_records(kept[-1])

        def same(a, b):  # two submissions of one student of the roster
            return (x := match(roster, a)) is not None and x == match(roster, b)

        doc, notes = grades.merge(named, replace=args.replace, same=same if roster else None)
    except (grades.GradesError, RosterError) as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 2
    doc = dict(doc)
    if roster:
        doc["roster"] = as_records(roster)
    kept = {}
    for _, d in named:
        kept.update(d.get("adjustments") or {})
    kept.update(adjustments)
    if kept:
        doc["adjustments"] = kept
    for name, d in named:
        notes += grades.against_course(d, name)
    for note in notes:
        print(f"{command}: {note}", file=sys.stderr)
    return doc, notes


def _report(args) -> int:
    why = _cannot_write(args.out, True) or next((f"{o} {t}: {w}" for o, t, f in _output_targets(args) + [
        ("--json", args.json, False), ("--csv", args.csv, False), ("--gradescope", args.gradescope, True),
        ("--draft-mistakes", args.draft_mistakes, False)] if t and (w := _cannot_write(t, f))), None)
    if why:
        print(f"mha report: {why}", file=sys.stderr)
        return 2
    read = _read_grades(args, "mha report")
    if isinstance(read, int):
        return read
    doc, notes = read
    status = 0
    if args.json:
        from mha.grading import grades

        try:
            grades.write(doc, args.json)
        except OSError as e:
            print(f"mha report: --json {args.json}: {e.strerror or e}", file=sys.stderr)
            status = 2
    return max(status, _outputs(doc, notes, args, "mha report", report=args.out,
                                single=len(doc["submissions"]) == 1))


def _feedback(args) -> int:
    why = _cannot_write(args.out, True)
    if why:
        print(f"mha feedback: --out {args.out}: {why}", file=sys.stderr)
        return 2
    read = _read_grades(args, "mha feedback")
    if isinstance(read, int):
        return read
    doc, _ = read
    from mha.grading import adjust, gradebook
    from mha.grading.roster import RosterError

    try:
        book = gradebook.entries(doc)
        _feedback_pages(book, doc, args.out, args)
    except (adjust.AdjustError, RosterError) as e:
        print(f"mha feedback: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"mha feedback: cannot write into {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``mha`` command: ``grade``, ``report``, ``assign``, ``notebooks``, ``autograder`` and ``bench``."""

from __future__ import annotations

import argparse
import sys


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
    g.add_argument("--csv", metavar="FILE", help="write one row of points per submission")
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
    g.add_argument("--quiet", "-q", action="store_true", help="no progress display")

    r = sub.add_parser("report", help="make the class report again from the grades of mha grade --json")
    r.add_argument("grades", nargs="+", metavar="GRADES.json",
                   help="grades of mha grade --json; several are merged (a late submission, a section graded again)")
    r.add_argument("--out", required=True, metavar="DIR",
                   help="write DIR/class-report.html and DIR/class-report.csv")
    _report_options(r)
    r.add_argument("--replace", action="store_true",
                   help="a submission (or roster student) in several files: take the last file's grades "
                        "(default: stop with an error naming the files)")

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
                   help="the class list, for the class report: a CSV with the columns id, name and section "
                        "(section optional); the report then names who submitted nothing and breaks every "
                        "table down by section")
    p.add_argument("--pseudonymise", "--pseudonymize", action="store_true",
                   help="in the class report, show students under pseudonyms (student 01, ...); the key is "
                        "written beside the report (pseudonym-key.csv), to keep to yourself")
    p.add_argument("--site-url", metavar="URL",
                   help="address of the course website, for the class report's links to lesson sections")


def _submissions(args, own_files) -> tuple[list, list[str]] | str:
    """The submissions the command line names, and lines to tell the user; or an error."""
    from pathlib import Path

    from mha.grading import extract
    from mha.grading.grader import expand

    said = []
    paths = []
    for given in map(Path, args.submissions):
        if given.is_dir() and not extract.gradable_files(given):
            inside = sorted(d for d in given.iterdir() if d.is_dir() and extract.gradable_files(d))
            if inside and not args.by_folder:
                return (f"{given} holds no notebook but {len(inside)} folders that do: give --by-folder to grade "
                        "each folder as one student's submission")
            if inside:
                said.append(f"{given} holds no notebook but {len(inside)} folders that do: each is graded as one "
                            "student's submission")
                paths += inside
                continue
        paths += [given] if args.by_folder else expand([given])
    kept = []
    for p in paths:
        if p.resolve() in own_files:
            said.append(f"{p} is an exercise file given with --exercises: not graded as a submission")
        else:
            kept.append(p)
    return kept, said


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
                                   ("--gradescope", args.gradescope, True), ("--report", args.report, True)]:
        why = _cannot_write(target, folder) if target else None
        if why:  # said now, not after the grading
            print(f"mha grade: {option} {target}: {why}", file=sys.stderr)
            return 2

    # After the checks that need nothing of the course: these import torch (a second or two).
    from mha.autograde import DRAWS, ExerciseFileError, load_exercises, select
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
    own = []
    for file in args.exercises or []:
        if Path(file).suffix == ".json":
            print(f"mha grade: --exercises {file}: that is a student version (no reference, no hidden checks); "
                  "grade with the instructor's .py file", file=sys.stderr)
            return 2
        if not args.quiet:
            print(f"mha grade: checking the exercises of {file} on {draws} hidden draws...", file=sys.stderr)
        try:
            own += load_exercises(file, draws=draws)
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
    limits = Limits(exercise_s=args.exercise_timeout, submission_s=args.submission_timeout,
                    cpu_s=int(args.submission_timeout) + 5)
    tty = sys.stderr.isatty()

    def progress(r, done, total):
        if args.quiet:
            return
        msg = f"[{done}/{total}] {r.student}: {r.score:g}/{r.max_score:g} ({r.seconds:.1f} s)"
        print(("\r\033[K" + msg) if tty else msg, file=sys.stderr, end="" if tty and done < total else "\n",
              flush=True)

    reports_ = grade_many(paths, exercises, limits=limits, jobs=args.jobs, seed=args.seed, on_done=progress)
    print(reports.table(reports_, exercises))
    if args.details:
        for r in reports_:
            print()
            print(reports.details(r))
    status = _warn(reports_, exercises)
    doc = grades.document(reports_, exercises) if args.json or args.report else None
    for option, target, write in [("--json", args.json, lambda t: reports.write_json(reports_, exercises, t, doc)),
                                  ("--csv", args.csv, lambda t: reports.write_csv(reports_, exercises, t)),
                                  ("--gradescope", args.gradescope, lambda t: reports.write_gradescope(reports_, t))]:
        if not target:
            continue
        try:
            (Path(target) if option == "--gradescope" else Path(target).parent).mkdir(parents=True, exist_ok=True)
            write(target)
        except (OSError, ValueError) as e:  # every other report is still written
            print(f"mha grade: {option} {target}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            status = 2
    if args.report:
        made = _class_report(doc, [], roster, args, args.report, "mha grade")
        status = max(status, made)
    return status


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


def _class_report(doc, notes, roster, args, out, command: str) -> int:
    from mha.grading import classreport, classstats
    from mha.grading.roster import RosterError

    try:
        report = classstats.build(doc, roster=roster, pseudonymise=args.pseudonymise,
                                  site_url=args.site_url or classreport.local_site(), notes=notes)
        written = classreport.write(report, out)
    except RosterError as e:
        print(f"{command}: --roster: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{command}: cannot write the class report into {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"class report: {written[0]} and {written[1]}", file=sys.stderr)
    if len(written) > 2:
        print(f"the key to the pseudonyms (keep it to yourself): {written[2]}", file=sys.stderr)
    return 0


def _report(args) -> int:
    from mha.grading import grades
    from mha.grading.roster import RosterError, match

    roster = _roster(args, "mha report")
    if isinstance(roster, int):
        return roster
    try:
        named = [(path, grades.read(path)) for path in args.grades]

        def same(a, b):  # two submissions of one student of the roster
            return (x := match(roster, a)) is not None and x == match(roster, b)

        doc, notes = grades.merge(named, replace=args.replace, same=same if roster else None)
    except (grades.GradesError, RosterError) as e:
        print(f"mha report: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"mha report: {note}", file=sys.stderr)
    return _class_report(doc, notes, roster, args, args.out, "mha report")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

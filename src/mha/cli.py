"""The ``mha`` command: ``grade``, ``assign``, ``notebooks``, ``autograder`` and ``bench``."""

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
    g.add_argument("--pseudonymise", "--pseudonymize", action="store_true",
                   help="in the class report, show students under pseudonyms (student 01, ...) in a random order")
    g.add_argument("--site-url", metavar="URL",
                   help="address of the course website, for the class report's links to lesson sections")
    g.add_argument("--exercises", metavar="FILE", action="append",
                   help="grade the exercises defined in FILE, an instructor's own Python file (repeatable); "
                        "with --only, choose among them and the course's")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress display")

    s = sub.add_parser("assign", help="make the student version of an instructor's exercise file")
    s.add_argument("file", metavar="FILE", help="the instructor's Python file of exercises")
    s.add_argument("--out", required=True, metavar="DIR",
                   help="where to write FILE's student version (.json) and a student notebook (.ipynb)")

    n = sub.add_parser("notebooks", help="write clean student notebooks (.ipynb) from the lessons")
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
    if args.command == "assign":
        from mha.exercises import ExerciseFileError, write_student_version

        try:
            paths = write_student_version(args.file, args.out)
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


def _grade(args) -> int:
    from pathlib import Path

    from mha.exercises import ExerciseFileError, load_exercises, select
    from mha.grading import reports
    from mha.grading.grader import expand, grade_many
    from mha.grading.sandbox import Limits

    missing = [s for s in args.submissions if not Path(s).exists()]
    if missing:
        print(f"mha grade: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    own = []
    for file in args.exercises or []:
        if Path(file).suffix == ".json":
            print(f"mha grade: --exercises {file}: that is a student version (no reference, no hidden checks); "
                  "grade with the instructor's .py file", file=sys.stderr)
            return 2
        try:
            own += load_exercises(file)
        except ExerciseFileError as e:
            print(f"mha grade: --exercises: {e}", file=sys.stderr)
            return 2
    try:
        exercises = select(args.only) if args.only or not own else own
    except ValueError as e:
        print(f"mha grade: --only: {e}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"mha grade: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    paths = [Path(s) for s in args.submissions] if args.by_folder else expand(args.submissions)
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
    if args.json:
        reports.write_json(reports_, exercises, args.json)
    if args.csv:
        reports.write_csv(reports_, exercises, args.csv)
    if args.gradescope:
        reports.write_gradescope(reports_, args.gradescope)
    if args.report:
        from mha.grading import classreport

        site = args.site_url or classreport.local_site()
        page, table = classreport.write(classreport.build(reports_, exercises, pseudonymise=args.pseudonymise,
                                                          site_url=site), args.report)
        print(f"class report: {page} and {table}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

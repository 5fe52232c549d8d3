"""The course's auto-graded exercises: one module per lesson, named after it
(``lesson01_one_head``, ...), each with a tuple ``EXERCISES`` in the page's order.

A lesson defines each exercise's function with the solution between ``# BEGIN SOLUTION`` and
``# END SOLUTION`` and calls ``check("dims.split_heads", split_heads)`` right after. ``check``
runs the *public* checks in the student's own kernel: it teaches, it does not grade. Grades
come from ``mha grade`` (see :mod:`mha.grading`), which runs student code in a separate,
limited process. The format and the judge are :mod:`mha.autograde`, whose public names this
package re-exports; ``common`` holds what several lessons' exercises forbid.
"""

from mha.autograde import (EXERCISES, Case, CheckResult, Exercise, ExerciseFileError, Mistake, Op, Outcome, Verdict,
                           check, get, load_exercises, select, write_student_version)

__all__ = ["check", "CheckResult", "EXERCISES", "get", "select", "Exercise", "Case", "Mistake",
           "Op", "Outcome", "Verdict", "load_exercises", "write_student_version", "ExerciseFileError"]

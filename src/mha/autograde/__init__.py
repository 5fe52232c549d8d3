"""The exercise framework: the format of an auto-graded exercise, and the judge that ``check``
in a notebook and ``mha grade`` share.

One concept per module:

================== ===========================================================================
exercise           :class:`Exercise`: its cases, reference and named mistakes; field checks
model              :class:`Case`, :class:`Mistake`, :class:`Outcome`, :class:`Verdict`, and the
                   words that describe them (:class:`Status`, :class:`Kind`, :class:`Called`)
judge              one verdict per check (:func:`judge`), one score per exercise (:func:`score`)
compare            how an answer is compared with the expected one, by the kind of answer
diagnose           words for what a wrong answer got wrong, where no listed mistake says it;
                   an exercise's own hints for the errors its slips raise (:class:`ErrorHint`)
forbidden          the static scan of an answer's source for names its exercise forbids
calls              how a graded function is called (traps, recording, watched arguments) and
                   the record of the call; free-standing, the grader's worker loads it by path
wire               the plain values that cross from a graded call to the judge; free-standing
record             reading a call's record, trusted in nothing, into an :class:`Outcome`
draw               random draws exercises share, and a draw that keeps mistakes apart
sections           where a point is taught: the lesson section a mistake links to
registry           every exercise by id: the course's (read from ``mha.exercises``, the one
                   place the framework names it) and those loaded from instructors' files
check              ``check(id, fn)``: the public checks, in the student's own notebook
instructor         an instructor's own file of exercises: loading, checking, the student version
student_version    the student version's format: public cases with their answers, no reference
================== ===========================================================================

It imports nothing from ``mha.grading``: the grader imports the names below.
"""

from .check import CheckResult, call_outcome, check, traps_of
from .compare import ANSWERS, TOLERANCE, compare
from .diagnose import ErrorHint, Explain
from .exercise import Exercise, ExerciseFileError, check_fields
from .forbidden import forbidden_uses
from .instructor import DRAWS, check_exercise, load_exercises, write_student_version
from .judge import FORBIDDEN_CALL, NO_KERNEL, ExerciseScore, judge, safe_error_name, score, score_verdicts
from .model import Called, Case, Kind, Mistake, Op, Outcome, Status, Verdict
from .record import read_record
from .registry import EXERCISES, LOADED, get, register, select, unregister
from .wire import MalformedResult

__all__ = ["ANSWERS", "DRAWS", "EXERCISES", "FORBIDDEN_CALL", "LOADED", "NO_KERNEL", "TOLERANCE", "Called", "Case",
           "CheckResult", "ErrorHint", "Exercise", "ExerciseFileError", "Explain", "ExerciseScore", "Kind",
           "MalformedResult", "Mistake", "Op", "Outcome", "Status", "Verdict", "call_outcome", "check", "check_exercise", "check_fields", "compare",
           "forbidden_uses", "get", "judge", "load_exercises", "read_record", "register", "safe_error_name", "score",
           "score_verdicts", "select", "traps_of", "unregister", "write_student_version"]

"""The batch grader: student code runs in a separate, limited process; the trusted parent
makes the inputs, computes the expected answers, compares and writes every report. It judges
with the exercise framework, :mod:`mha.autograde`, the same judge as ``check``.

Modules: ``extract`` (read notebooks, keep what the exercises need), ``worker`` (the sandboxed
side; it confines itself with ``confine``, ``namespaces``, ``landlock`` and ``seccomp``),
``sandbox`` (starting and watching workers, with ``watch``), ``grader`` (scoring), ``reports``
(table, JSON, CSV, Gradescope), ``autograder`` (the Gradescope zip), ``answer_key`` (every
exercise solved by its model answer, as a lesson to grade); the class report: ``grades`` (a
run's grades as one JSON document, read back and merged), ``classstats`` (its numbers, as
plain data), ``classreport`` (the page, from ``templates/``), ``figures`` (its inline SVG),
``anonymise`` (names out of code, answer fingerprints) and ``roster`` (the class list); what
the instructor does with the grades: ``adjust`` (overrides, due dates, late penalties),
``gradebook`` (the final points per student, and the files an LMS or Gradescope imports),
``feedback`` (a page per student to hand back) and ``drafts`` (the class's unexplained errors
as draft mistakes). See book/grading.md.
"""

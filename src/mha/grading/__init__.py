"""The batch grader: student code runs in a separate, limited process; the trusted parent
makes the inputs, computes the expected answers, compares and writes every report.

Modules: ``extract`` (read notebooks, keep what the exercises need), ``plain`` (the data
that may cross back: the neutral ``mha._plain``, which the exercises use too), ``worker``
(the sandboxed side; it confines itself with ``confine``, ``namespaces``, ``landlock`` and
``seccomp``), ``sandbox`` (starting and watching workers, with ``watch``), ``grader`` (scoring),
``reports`` (table, JSON, CSV, Gradescope), ``autograder`` (the Gradescope zip),
``answer_key`` (every exercise solved by its model answer, as a lesson to grade). See
book/grading.md.
"""

"""Checkers of the exercises, one module per notebook (nbNN.py), and their machinery.

- registry.py: `@exercise(id, hint=..., cases=...)`, how each exercise is probed;
- probing.py: runs where the learner's code lives, turns the answer into data;
- codec.py: answers as data (JSON and .npy, never pickles);
- verdict.py and judge.py: the checker's side, run in a clean process when grading;
- feedback.py: short messages; the expected value only with full feedback;
- nb00.py ... nb10.py: the checkers of each notebook's exercises; nb99.py and oracles.py: a
  purpose-built exercise (99.half) and its stand-in lesson function, for the grader's own tests.

Checkers may use lesson code as their oracle. Hidden checkers are not here: they live in the
instructor's tree (instructor/hidden_checks/), which learners never install.
"""

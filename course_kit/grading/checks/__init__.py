"""Checkers of the exercises, one module per notebook (nbNN.py), and their machinery.

- registry.py: `@exercise(id, hint=..., cases=...)`, how each exercise is probed;
- probing.py: runs where the learner's code lives, turns the answer into data;
- codec.py: answers as data (JSON and .npy, never pickles);
- verdict.py and judge.py: the checker's side, run in a clean process when grading;
- feedback.py: short messages; the expected value only with full feedback.

Checkers may use lesson code as their oracle. Hidden checkers are not here: they live in the
instructor's tree (instructor/hidden_checks/), which learners never install.
"""

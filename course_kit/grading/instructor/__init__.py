"""The instructor's tools: release (student notebooks), grade (run submissions in a sandbox and
judge their answers in a clean process), and the sandbox itself.

Import rule: nothing here imports lesson code or the checkers (tests/test_grading_layout.py checks
it). Checkers run in their own process (course_kit.grading.checks.judge), started by the grader.

- cells.py: the exercise-cell convention; release.py: student notebooks;
- submissions.py: reading submissions as hostile files; assemble.py: the notebook that is run;
- sandbox.py, launch.py: bubblewrap, cgroups, uids; kernel.py: the driver inside the sandbox;
- runner.py: one notebook run and its verdicts; grade.py: a whole class; cli.py: the commands.
"""

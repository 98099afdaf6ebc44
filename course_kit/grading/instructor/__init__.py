"""The instructor's tools: release (student notebooks), grade (run submissions in a sandbox and
judge their answers in a clean process), and the sandbox itself.

Import rule: nothing here imports lesson code or the checkers (tests/test_grading_layout.py checks
it). Checkers run in their own process (course_kit.grading.checks.judge), started by the grader.

- cells.py: the exercise-cell convention; release.py: student notebooks;
- submissions.py: reading submissions as hostile files; assemble.py: the notebook that is run;
- sandbox.py, launch.py: bubblewrap and uids; cgroups.py: memory, process and CPU caps; disk.py: the
  size cap on what a run writes, and the grader's free disk; kernel.py: the driver inside the sandbox;
- runner.py: one notebook run and its verdicts, from context.py (what runs share), execute.py (the
  cells in the sandbox) and judging.py (the checkers' process); grade.py: a whole class; cli.py: the
  commands.
"""

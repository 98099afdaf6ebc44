"""Notebook 10 (capstone): the course engine against HF transformers on one workload.

    ladder      the technique ladder: each technique's share of the capstone's throughput, and
                the waterfall of the ones the learner keeps switched on

Widget `widgets/capstone.py`, figures `plots/capstone.py`, record `course-kit bench capstone`
(`benchmarks/capstone.py`), checks `grading/checks/nb10.py`.
"""

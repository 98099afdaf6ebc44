"""Notebook 10 (capstone): the course engine against HF transformers on one workload.

    ladder      the technique ladder: each technique's share of the capstone's throughput, and
                the waterfall of the ones the learner keeps switched on
    speculative speculative decoding at batch 1 on a target and a draft the course trains on the
                standard library's sources (corpus, pair, train_pair; decoder, steps, rules)

Widget `widgets/capstone.py`, figures `plots/capstone.py`, record `course-kit bench capstone`
(`benchmarks/capstone.py`), checks `grading/checks/nb10.py`.
"""

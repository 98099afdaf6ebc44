"""Checks for notebook 10 (capstone)."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback


def _rows() -> list[list[dict]]:
    return [
        [{"name": "engine: continuous + paged KV", "throughput_tok_s": 900.0},
         {"name": "engine: + async loop", "throughput_tok_s": 1200.0},
         {"name": "HF generate", "throughput_tok_s": 300.0},
         {"name": "HF generate_batch", "skipped": "off at this size"}],
        [{"name": "HF generate", "throughput_tok_s": 2.5e3},
         {"name": "engine: + CUDA graphs", "throughput_tok_s": 4.0e4},
         {"name": "HF generate_batch", "throughput_tok_s": 5.0e3}],
    ]


HINT = """Find the row named "HF generate" and take its throughput as the peer. For every row that
has a throughput (skipped rows have none), the ratio is its throughput / the peer's. Return a dict
name -> ratio."""


@grading.exercise("10.ratios", cases=lambda: [(rows,) for rows in _rows()], hint=HINT)
def ratios(fn) -> None:
    for i, rows in enumerate(_rows()):
        peer = next(r["throughput_tok_s"] for r in rows if r["name"] == "HF generate")
        expected = {r["name"]: r["throughput_tok_s"] / peer for r in rows if "throughput_tok_s" in r}
        found = fn(rows)
        what = f"table {i + 1} ({len(rows)} rows{', one skipped' if len(expected) < len(rows) else ''})"
        if not isinstance(found, dict):
            raise grading.Wrong(f"{what}: expected a dict name -> ratio, found {feedback.describe(found)}")
        if set(found) != set(expected):
            raise grading.Wrong(f"{what}: expected one ratio per measured row (skipped rows left out), "
                                f"found keys {sorted(map(str, found))}", expected=sorted(expected))
        for name, value in expected.items():
            feedback.number(found[name], value, f"{what}: ratio of {name!r}", rel=1e-9)

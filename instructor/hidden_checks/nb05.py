"""Hidden check of notebook 05: choose_buckets on other seeded traces (heavier load, larger k) and
edge cases: a single step, and every batch size once."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks.nb05 import _trace, judge_buckets


def _named() -> list[tuple[str, list[int], int]]:
    out = [("a single step", [5], 3), ("every batch size once", list(range(1, 21)), 5),
           ("two sizes, k = 2", [4] * 9 + [9] * 2, 2)]
    for i, (rate, lens, max_batch, k) in enumerate([(25, (5, 40), 12, 2), (70, (4, 60), 32, 5),
                                                     (20, (1, 100), 16, 6), (90, (2, 20), 20, 3)]):
        out.append((f"hidden trace {i + 1} (max batch {max_batch}, k = {k})",
                    _trace(500 + i, 250, rate, lens, max_batch), k))
    return out


@grading.exercise("05.choose_buckets_hidden", cases=lambda: [(b, k) for _, b, k in _named()])
def choose_buckets_hidden(fn) -> None:
    judge_buckets(fn, _named())


# ---- 05.bucket_waste: the answer key ---
# Measured with buckets.bucket_cost on the task's trace (waste_trace(): 300 requests, Poisson at 10/s,
# seed 5) and the sizes [1, 2, 4, 8]; tests/test_answer_keys.py measures it again.
grading.answer_key("05.bucket_waste", waste=0.18962477965248048, worst=8, extra=5)
# ---- 05.read_trace: the values, judged from the table the answer names ---------------------------
from course_kit.grading.checks import feedback as _fb   # noqa: E402
from course_kit.grading.checks.nb05 import FIXES, trace_table   # noqa: E402

GRAPH_GAP_US = 1.0     # a gap between two kernels of a replayed CUDA graph (the task states it)


def _gaps(rows):
    """(index of the kernel after the gap, gap length) for each gap between consecutive kernels."""
    out, end = [], rows[0]["end_us"]
    for i, r in enumerate(rows[1:], start=1):
        if r["start_us"] > end:
            out.append((i, r["start_us"] - end))
        end = max(end, r["end_us"])
    return out


def truth(rows) -> dict:
    rows = sorted(rows, key=lambda r: r["start_us"])
    span = max(r["end_us"] for r in rows) - rows[0]["start_us"]
    gaps = _gaps(rows)
    by_name = {}
    for r in rows:
        by_name[r["name"]] = by_name.get(r["name"], 0.0) + r["end_us"] - r["start_us"]
    graphs = span - sum(max(0.0, g - GRAPH_GAP_US) for _, g in gaps)
    # fusion: each run of 2+ consecutive "other" kernels becomes one, as long as its longest kernel,
    # and the gaps inside the run vanish
    gap_before = dict(gaps)
    saved, run = 0.0, []
    for i, r in enumerate(rows + [{"kind": "end"}]):
        if r.get("kind") == "other":
            run.append(i)
            continue
        if len(run) >= 2:
            d = [rows[j]["end_us"] - rows[j]["start_us"] for j in run]
            saved += sum(d) - max(d) + sum(gap_before.get(j, 0.0) for j in run[1:])
        run = []
    fusion = span - saved
    batch = span + sum(r["end_us"] - r["start_us"] for r in rows if r["kind"] != "matmul")
    gains = {"A": span / graphs, "B": span / fusion, "C": 2 * span / batch}
    fix = max(gains, key=gains.get)
    return {"dominant": max(by_name, key=by_name.get), "gap_share": sum(g for _, g in gaps) / span,
            "fix": fix, "gain": gains[fix], "gains": gains}


@grading.exercise("05.read_trace_hidden")
def read_trace_hidden(trace_id, dominant, gap_share, fix, gain) -> None:
    t = truth(trace_table(trace_id))
    grading.expect(dominant == t["dominant"], "DOMINANT: another kernel takes more GPU time over the step",
                   t["dominant"], dominant)
    _fb.number(gap_share, t["gap_share"], "GAP_SHARE, the share of the step with no kernel running", rel=1e-3)
    found = _fb.choice(fix, "FIX", FIXES)
    grading.expect(found == t["fix"], "FIX: another fix gives a larger speed-up on this step", t["fix"], fix)
    _fb.number(gain, t["gain"], "GAIN, the best fix's speed-up in tokens per second", rel=1e-3)

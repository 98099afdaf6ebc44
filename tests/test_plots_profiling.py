"""The profiler figures: lanes and gaps drawn from the trace rows, no piled-up labels, plain numbers."""
from __future__ import annotations

from course_kit.plots import profiling as pplots
from course_kit.profiling import trace as tr

from tests.test_profiling import gpu_trace


def test_gantt_has_one_row_per_stream_and_marks_the_launch_gap():
    rows = tr.gantt_rows(gpu_trace(), steps=None)
    fig = pplots.kernel_gantt(rows, "demo", threshold_us=1.0)
    lanes = {y for t in fig.data for y in t.y}
    assert lanes == {"stream 7", "stream 8", "stream 9", pplots.GAP_LANE}
    gap = next(t for t in fig.data if t.y[0] == pplots.GAP_LANE)
    assert len(gap.x) == 1 and abs(gap.x[0] - 0.002) < 1e-9           # the 2 µs gap of step 0, in ms
    assert all(t.textposition == "none" for t in fig.data)              # names on hover only
    assert pplots.step_gaps(rows, threshold_us=5.0) == []              # a higher threshold hides it


def test_gantt_pair_stacks_runs_and_top_kernels_reads_plain_numbers():
    rows = tr.gantt_rows(gpu_trace(), steps=None)
    fig = pplots.gantt_pair({"this CPU": rows, "H200": rows}, "two")
    assert len(fig.layout.annotations) == 2 and fig.layout.height > 300
    top = pplots.top_kernels(tr.summarize(gpu_trace()), "top")
    assert top.data[0].y[-1] == "gemv" and "e+" not in " ".join(top.data[0].text)

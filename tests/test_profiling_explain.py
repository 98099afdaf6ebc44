"""The profiler's sentences follow the numbers, both ways."""
from __future__ import annotations

from course_kit.profiling import explain as X, trace as tr

from tests.test_profiling import gpu_trace


def _s(**kw):
    base = {"device": "cuda", "kernels": 100, "kernels_per_step": 50.0, "step_us_median": 400.0,
            "idle_fraction": 0.30, "idle_between_steps": 0.20, "idle_within_steps": 0.10,
            "launch_gaps": {"per_step": 40, "threshold_us": 1.0, "median_us": 2.5},
            "top_kernels": [{"name": "gemv", "calls_per_step": 12, "per_step_us": 120.0, "share": 0.4}],
            "profiler_overhead": 0.25, "profiled_wall_s": 0.5, "unprofiled_wall_s": 0.4, "idle_fraction_corrected": 0.12}
    return {**base, **kw}


def test_describe_names_gpu_idle_only_on_a_gpu():
    gpu = X.describe(_s(), "H200")
    assert "GPU idle: **30.0%**" in gpu and "20.0% between steps" in gpu and "10.0% inside steps" in gpu
    assert "+25%" in gpu and "would be 12.0%" in gpu and "`gemv`, 12 calls" in gpu
    cpu = X.describe(_s(device="cpu", idle_fraction_corrected=None), "CPU")
    assert "GPU idle" not in cpu and "Time with no operator running (Python" in cpu and "operators per step" in cpu
    assert "would be" not in cpu


def test_compare_says_where_the_idle_went():
    eager, graph = _s(), _s(kernels_per_step=50.0, step_us_median=200.0, idle_fraction=0.10,
                           idle_between_steps=0.08, idle_within_steps=0.02)
    text = X.compare(eager, graph, ("eager", "the graph"))
    assert "the same 50 kernels per step" in text and "2.00x faster than eager" in text
    assert "most of the change is between steps" in text
    assert "between steps 20.0% → 8.0% (12.0 points less)" in text
    inside = X.compare(eager, _s(idle_between_steps=0.19, idle_within_steps=0.01, idle_fraction=0.2), ("a", "b"))
    assert "most of the change is inside steps" in inside


# The H200 record's traces (data/reference/h200/traces.json, lesson 05), as notebook 05 cell 36 read them.
H200_EAGER = _s(kernels_per_step=1488, step_us_median=71684.34, idle_fraction=0.9687, idle_between_steps=0.011867,
                idle_within_steps=0.956871, steps=5, unprofiled_wall_s=0.22527, profiled_wall_s=0.38126)
H200_GRAPH = _s(kernels_per_step=1488, step_us_median=3174.72, idle_fraction=0.4445, idle_between_steps=0.173206,
                idle_within_steps=0.27131, steps=5, unprofiled_wall_s=0.015577, profiled_wall_s=0.022751)


def test_compare_words_each_change_in_the_direction_of_its_arrow():
    """The record printed "(-16.1% between, +68.6% inside)" after "96.9% (eager) → 44.5% (the graph)":
    eager minus graph, against the arrow. Idle between steps rose and idle inside steps fell."""
    text = X.compare(H200_EAGER, H200_GRAPH, ("eager", "the graph"))
    assert "GPU idle 96.9% (eager) → 44.5% (the graph)" in text
    assert "between steps 1.2% → 17.3% (16.1 points more)" in text
    assert "inside steps 95.7% → 27.1% (68.6 points less)" in text
    assert "most of the change is inside steps" in text
    assert "-16.1%" not in text and "+68.6%" not in text
    # the other way round (07's async against sync: between steps fell 18.2% -> 2.4%)
    sync = _s(idle_fraction=0.40, idle_between_steps=0.182, idle_within_steps=0.218)
    async_ = _s(idle_fraction=0.40, idle_between_steps=0.024, idle_within_steps=0.376)
    back = X.compare(sync, async_, ("sync", "async"))
    assert "between steps 18.2% → 2.4% (15.8 points less)" in back
    assert "inside steps 21.8% → 37.6% (15.8 points more)" in back
    same = X.compare(sync, sync, ("a", "b"))
    assert "(no change)" in same


def test_compare_gives_the_unprofiled_step_beside_the_profiled_span():
    text = X.compare(H200_EAGER, H200_GRAPH, ("eager", "the graph"))
    assert "under the profiler its step spanned 3.17 ms against 71.68 ms: 22.58x faster than eager" in text
    assert "unprofiled, a step took 3.12 ms against 45.05 ms on average: 14.46x faster than eager" in text
    without = X.compare(_s(), _s(step_us_median=200.0), ("a", "b"))
    assert "unprofiled" not in without     # no step count: no per-step unprofiled time


def test_describe_agrees_the_noun_with_its_number():
    """03 cell 17 printed "**1 kernels** per step"."""
    one = X.describe(_s(kernels_per_step=1.0, launch_gaps={"count": 1, "per_step": 1.0, "threshold_us": 1.0,
                                                          "median_us": 2.0},
                        top_kernels=[{"name": "k", "calls_per_step": 1.0, "per_step_us": 3.0, "share": 1.0}]), "03")
    assert "**1 kernel per step**" in one and "1 kernels" not in one
    assert "`k`, 1 call for" in one and "1.0 gaps" in one
    many = X.describe(_s(kernels_per_step=1488.0), "05")
    assert "**1488 kernels per step**" in many
    cpu = X.describe(_s(device="cpu", kernels_per_step=1.0, idle_fraction_corrected=None), "cpu")
    assert "**1 operator per step**" in cpu and "between one step's operators" in cpu
    assert X.plural("1", "kernel") == "kernel" and X.plural("0", "kernel") == "kernels"
    assert X.plural("1.0", "gap") == "gaps"


def test_event_vs_profiler_both_ways():
    more = X.event_vs_profiler(0.023, 0.32, 0.12, "async, llama-1b")
    assert "2.3%" in more and "32.0%" in more and "as busy" in more and "12.0% of the window" in more
    less = X.event_vs_profiler(0.30, 0.28, 0.01, "sync")
    assert "no more idle than the brackets" in less


def test_describe_a_real_summary():
    assert "kernels per step" in X.describe(tr.summarize(gpu_trace()), "demo")
    assert "Perfetto" not in X.how_to_open("x.gz") or "ui.perfetto.dev" in X.how_to_open("x.gz")


def test_counted_is_the_number_as_printed_and_its_noun():
    """05 cell 27 printed "`_row_argmax_kernel`: 1 calls"."""
    assert X.counted(1.0, "call") == "1 call" and X.counted(49.0, "call") == "49 calls"
    assert X.counted(0.6, "call") == "1 call"          # rounds to 1 as printed
    assert X.counted(1.0, "gap", ".1f") == "1.0 gaps"

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
    inside = X.compare(eager, _s(idle_between_steps=0.19, idle_within_steps=0.01, idle_fraction=0.2), ("a", "b"))
    assert "most of the change is inside steps" in inside


def test_event_vs_profiler_both_ways():
    more = X.event_vs_profiler(0.023, 0.32, 0.12, "async, llama-1b")
    assert "2.3%" in more and "32.0%" in more and "as busy" in more and "12.0% of the window" in more
    less = X.event_vs_profiler(0.30, 0.28, 0.01, "sync")
    assert "no more idle than the brackets" in less


def test_describe_a_real_summary():
    assert "kernels per step" in X.describe(tr.summarize(gpu_trace()), "demo")
    assert "Perfetto" not in X.how_to_open("x.gz") or "ui.perfetto.dev" in X.how_to_open("x.gz")

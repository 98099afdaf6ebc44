"""The GPU-idle arithmetic (against a brute-force oracle), the trace reader (on hand-written traces
shaped like torch.profiler's Chrome export, and on a real CPU profile), and the kept trace files."""
from __future__ import annotations

import random

import pytest
import torch

from course_kit import profiling
from course_kit.profiling import files, intervals as iv, trace as tr


def _brute_idle(busy, window, n=20000):
    """Idle by sampling the window at n midpoints: the oracle for the interval union."""
    lo, hi = window
    idle = 0
    for i in range(n):
        t = lo + (i + 0.5) * (hi - lo) / n
        idle += not any(a <= t < b for a, b in busy)
    return idle / n


@pytest.mark.parametrize("busy, window, idle", [
    ([(1, 3), (2, 4), (6, 7)], (0, 10), 0.6),            # overlapping kernels count once
    ([(0, 10), (2, 3), (4, 5)], (0, 10), 0.0),           # nested: a copy inside a kernel's time
    ([], (0, 4), 1.0),                                    # nothing ran: all idle
    ([(0, 2), (4, 6), (1, 5)], (0, 8), 0.25),            # two streams that overlap
    ([(-5, 2), (9, 20)], (0, 10), 0.7),                  # clipped to the window
    ([(3, 3), (5, 5)], (0, 10), 1.0),                    # zero-length activities take no time
])
def test_idle_fraction_by_hand(busy, window, idle):
    assert iv.idle_fraction(busy, window) == pytest.approx(idle)


def test_idle_fraction_matches_a_sampled_oracle_on_random_streams():
    rng = random.Random(0)
    for _ in range(20):
        busy = []
        for _stream in range(rng.randint(1, 3)):
            t = rng.uniform(0, 5)
            for _ in range(rng.randint(0, 8)):
                d = rng.uniform(0, 4)
                busy.append((t, t + d))
                t += d + rng.uniform(0, 3)
        window = (rng.uniform(-2, 3), rng.uniform(20, 40))
        assert iv.idle_fraction(busy, window) == pytest.approx(_brute_idle(busy, window), abs=2e-3)


def test_empty_window_and_backwards_interval_are_refused():
    with pytest.raises(ValueError, match="empty"):
        iv.idle_fraction([(0, 1)], (3, 3))
    with pytest.raises(ValueError, match="ends before"):
        iv.idle_fraction([(2, 1)], (0, 3))


def test_split_idle_adds_up_and_puts_each_gap_where_it_lies():
    busy = [(0, 1), (2, 4), (6, 10)]
    s = iv.split_idle(busy, steps=[(0, 4), (6, 10)], window=(0, 12))
    assert s["idle"] == pytest.approx(5 / 12)
    assert s["within_steps"] == pytest.approx(1 / 12)          # the gap 1..2 inside step 0
    assert s["between_steps"] == pytest.approx(4 / 12)         # 4..6 and 10..12
    assert s["within_steps"] + s["between_steps"] == pytest.approx(s["idle"])


def test_split_idle_with_overlapping_steps_of_two_streams():
    # async: step 1's copy (stream 2) starts before step 0's kernels end (stream 1)
    busy = [(0, 3), (2.5, 3.5), (5, 8)]
    s = iv.split_idle(busy, steps=[(0, 3), (2.5, 8)], window=(0, 10))
    assert s["idle"] == pytest.approx(1 - 6.5 / 10)
    assert s["within_steps"] == pytest.approx(1.5 / 10)        # 3.5..5 lies inside step 1's span
    assert s["between_steps"] == pytest.approx(2 / 10)


# ---- the trace reader -----------------------------------------------------------------------------

def _x(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def gpu_trace():
    """Two steps; step 0 launches two kernels with a 2 µs gap, step 1 one kernel on another stream,
    a copy, and a GPU-side mirror of a step range (which is not work)."""
    return {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        _x("user_annotation", "window", 0, 100),
        _x("user_annotation", "step 0", 0, 10), _x("user_annotation", "step 1", 50, 10),
        _x("cuda_runtime", "cudaLaunchKernel", 2, 1, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", 5, 1, correlation=2),
        _x("cuda_runtime", "cudaGraphLaunch", 52, 1, correlation=3),
        _x("cuda_runtime", "cudaMemcpyAsync", 55, 1, correlation=4),
        _x("kernel", "gemv", 20, 5, correlation=1, stream=7),
        _x("kernel", "rmsnorm", 27, 3, correlation=2, stream=7),
        _x("kernel", "gemv", 70, 10, correlation=3, stream=8),
        _x("gpu_memcpy", "Memcpy HtoD", 78, 4, correlation=4, stream=9),
        _x("gpu_user_annotation", "step 0", 20, 10, stream=7),
        _x("cpu_op", "aten::mm", 2, 3),
    ]}


def test_summary_of_a_gpu_trace():
    s = tr.summarize(gpu_trace())
    assert s["device"] == "cuda" and s["method"] == profiling.GPU_IDLE_METHOD
    assert s["busy_us"] == pytest.approx(5 + 3 + 12)              # 70..82: kernel and copy overlap
    assert s["idle_fraction"] == pytest.approx(0.80)
    assert s["idle_within_steps"] == pytest.approx(0.02)          # the 25..27 gap of step 0
    assert s["idle_between_steps"] == pytest.approx(0.78)
    assert s["steps"] == 2 and s["kernels"] == 3 and s["copies"] == 1
    assert s["kernels_per_step"] == 1.5
    assert s["launch_gaps"]["count"] == 1 and s["launch_gaps"]["total_us"] == pytest.approx(2)
    top = s["top_kernels"][0]
    assert top["name"] == "gemv" and top["calls"] == 2 and top["total_us"] == pytest.approx(15)


def test_kernels_without_a_launch_call_fall_back_on_the_gpu_mirror_of_their_step():
    t = gpu_trace()
    t["traceEvents"] = [e for e in t["traceEvents"] if e.get("cat") != "cuda_runtime"]
    acts = tr.gpu_activities(tr.events(t))
    assert [a.step for a in acts if a.start_us < 40] == [0, 0]
    assert [a.step for a in acts if a.start_us > 40] == [None, None]


def test_gantt_rows_start_at_zero_and_keep_the_first_steps():
    rows = tr.gantt_rows(gpu_trace(), steps=1)
    assert [r["name"] for r in rows] == ["gemv", "rmsnorm"] and rows[0]["start_us"] == 0


def test_a_real_cpu_profile_is_labelled_as_cpu_operators(capfd):
    x = torch.randn(64, 64)
    prof = profiling.profile_steps(lambda: torch.relu(x @ x).sum(), steps=3, warmup=1, repeat=1)
    s = prof.summary
    assert s["device"] == "cpu" and s["method"] == profiling.CPU_OP_METHOD
    assert s["steps"] == 3 and s["kernels_per_step"] == 3          # matmul, relu, sum
    assert {k["name"] for k in s["top_kernels"]} == {"aten::matmul", "aten::relu", "aten::sum"}
    assert 0 <= s["idle_fraction"] <= 1 and s["profiler_overhead"] is not None
    assert profiling.record_fields(s) == {}                         # a CPU run has no GPU idle
    assert "USDT" not in capfd.readouterr().err                     # the profiler's lines are silenced


def test_record_fields_name_the_method():
    s = tr.summarize(gpu_trace())
    fields = profiling.record_fields(s)
    assert fields["gpu_idle_method"] == profiling.GPU_IDLE_METHOD
    assert fields["gpu_idle_fraction"] == pytest.approx(0.8)


# ---- kept trace files -----------------------------------------------------------------------------

def test_saved_trace_keeps_the_first_steps_and_loads_back(tmp_path):
    path = files.save(gpu_trace(), "demo", where=tmp_path, steps=1)
    assert path.name == "demo.trace.json.gz"
    back = files.load("demo", where=tmp_path)
    names = {e["name"] for e in back["traceEvents"] if e.get("ph") == "X"}
    assert {"gemv", "rmsnorm", "step 0", "window"} <= names and "step 1" not in names
    assert any(e.get("ph") == "M" for e in back["traceEvents"])
    assert files.load("missing", where=tmp_path) is None


def test_a_trace_too_large_is_refused(tmp_path):
    big = gpu_trace()
    rng = random.Random(1)
    big["traceEvents"] += [_x("kernel", f"k{rng.random()}", 21, 1, correlation=1, stream=7) for _ in range(3000)]
    with pytest.raises(ValueError, match="limit"):
        files.save(big, "big", where=tmp_path, steps=1, max_bytes=10_000)
    with pytest.raises(ValueError, match="plain file name"):
        files.save(gpu_trace(), "../x", where=tmp_path)


def test_the_profilers_cycle_warning_is_silenced_and_no_other(monkeypatch):
    """05 cell 35, 07 cell 42 and 03 cell 16 left torch.profiler's "clears events at the end of each
    cycle" UserWarning on stderr; the capture silences that one warning, and lets others through."""
    import warnings
    from torch.profiler import profile
    message = ("Warning: Profiler clears events at the end of each cycle.Only events from the current cycle "
               "will be reported.To keep events across cycles, set acc_events=True.")
    start = profile.start

    def warning_start(self):
        warnings.warn(message, UserWarning)
        warnings.warn("another profiler warning", UserWarning)
        return start(self)

    monkeypatch.setattr(profile, "start", warning_start)
    x = torch.ones(8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiling.profile_steps(lambda: x @ x, steps=2, warmup=1, repeat=1)
    said = [str(w.message) for w in caught]
    assert not any("clears events" in m for m in said), said
    assert "another profiler warning" in said
    with warnings.catch_warnings(record=True) as outside:   # the filter does not outlive the capture
        warnings.simplefilter("always")
        warnings.warn(message, UserWarning)
    assert len(outside) == 1

"""Notebook 07, sections 6 and 7: inside-step idle split from a trace, and a sweep's trends in words."""
from __future__ import annotations

import pytest

from course_kit import reference
from course_kit.profiling import files
from course_kit.profiling import step_gaps
from course_kit.streams import sweep


def test_split_step_gaps_by_hand():
    # two steps; busy intervals leave per step one long gap and two short ones
    busy = [(0, 10), (90, 95), (97, 100), (102, 110),          # step 1 spans 0..110: gaps 80, 2, 2
            (200, 210), (270, 280), (281, 290)]                # step 2 spans 200..290: gaps 60, 1
    spans = [(0, 110), (200, 290)]
    f = step_gaps.split_step_gaps(busy, spans, threshold_us=1.0)
    assert f["steps"] == 2 and f["inside_us"] == pytest.approx(145)
    assert f["largest_us"] == pytest.approx(140) and f["rest_us"] == pytest.approx(5) and f["rest_gaps"] == 3
    assert f["largest_share"] == pytest.approx(140 / 145) and f["largest_median_us"] == pytest.approx(70)
    assert step_gaps.largest_gaps(busy, spans) == [(10, 90), (210, 270)]
    with pytest.raises(ValueError, match="threshold_us=-1"):
        step_gaps.split_step_gaps(busy, spans, -1)


def test_host_call_covering_names_the_call_under_the_gaps():
    gaps = [(10, 90), (210, 270)]
    calls = [("cudaMemcpyAsync", 0, 12), ("cudaGraphLaunch", 12, 89), ("cudaGraphLaunch", 212, 268)]
    hit = step_gaps.host_call_covering(gaps, calls)
    assert hit["name"] == "cudaGraphLaunch" and hit["share"] == pytest.approx(133 / 140)
    assert step_gaps.host_call_covering(gaps, [("cudaFree", 100, 200)]) is None


def test_explain_step_gaps_follows_the_numbers():
    f = {"steps": 2, "threshold_us": 1.0, "inside_us": 145, "largest_us": 140, "rest_us": 5, "rest_gaps": 4,
         "largest_share": 140 / 145, "largest_median_us": 70, "rest_median_us": 1.2, "inside_per_step_us": 72.5,
         "device": "cuda", "host_call": {"name": "cudaGraphLaunch", "covered_us": 133, "share": 0.95}}
    text = step_gaps.explain_step_gaps(f, "Here")
    assert "makes up 97% of it" in text and "inside `cudaGraphLaunch`" in text and "host work inside the step" in text
    assert "The other 2 gaps per step" in text
    uncovered = step_gaps.explain_step_gaps({**f, "host_call": {"name": "x", "covered_us": 10, "share": 0.07}}, "Here")
    assert "No single host call covers" in uncovered and "host work inside the step" not in uncovered
    assert "no idle gap" in step_gaps.explain_step_gaps({**f, "inside_us": 0}, "Here")


@pytest.mark.skipif(files.load("07-sync", reference.REFERENCE_GPU) is None, reason="no kept H200 trace")
def test_kept_h200_traces_idle_inside_steps_is_half_one_graph_launch():
    """Finding: notebook 07 said inside-step idle is launch latency between kernels; in the kept H200
    traces about half of it is one gap per step, while the host is in cudaGraphLaunch (sync ~841 µs)."""
    for name, largest in (("07-sync", 841), ("07-async", 581)):
        f = step_gaps.from_trace(files.load(name))
        assert f["host_call"]["name"] == "cudaGraphLaunch" and f["host_call"]["share"] > 0.9
        assert f["largest_median_us"] == pytest.approx(largest, abs=1)
        assert 0.45 < f["largest_share"] < 0.6 and f["rest_median_us"] < 50
        text = step_gaps.explain_step_gaps(f, name)
        assert "host work inside the step, not for the next kernel" in text


def _rows(model, idle_by_batch, gain_by_batch, key="gpu_idle_fraction"):
    out = []
    for b, idle in idle_by_batch.items():
        out.append({"model": model, "batch": b, "mode": "sync", key: idle, "host_step_gap_fraction": 0.2,
                    "tokens_per_s": 1000.0})
        out.append({"model": model, "batch": b, "mode": "async", key: idle / 2, "host_step_gap_fraction": 0.01,
                    "tokens_per_s": 1000.0 * gain_by_batch[b]})
    return out


def test_sweep_words_read_the_direction_from_the_rows():
    """Finding: section 7 said small batches idle most and big batches keep the GPU busy, while the
    H200 sweep's sync idle rose with the batch (about 65% -> 71% -> 72%)."""
    rows = _rows("smollm-135m", {4: 0.65, 16: 0.71, 64: 0.72}, {4: 1.45, 16: 1.3, 64: 1.1})
    text = sweep.sweep_words(rows)
    assert "from batch 4 to batch 64 the sync loop's GPU idle (profiler) rose (65.0% → 71.0% → 72.0%)" in text
    assert "async's throughput over sync's shrank (1.45x → 1.10x)" in text
    fell = sweep.sweep_words(_rows("m", {4: 0.7, 64: 0.3}, {4: 1.1, 64: 1.5}))
    assert "fell (70.0% → 30.0%)" in fell and "grew (1.10x → 1.50x)" in fell
    flat = sweep.sweep_words(_rows("m", {4: 0.50, 64: 0.51}, {4: 1.2, 64: 1.21}, key="host_step_gap_fraction"))
    assert "stayed about the same" in flat
    two = sweep.sweep_words(_rows("small", {16: 0.7, 64: 0.6}, {16: 1.2, 64: 1.1})
                            + _rows("big", {16: 0.3}, {16: 1.05}))
    assert "At batch 16, big's sync loop idled less than small's (30.0% against 70.0%)" in two
    assert "no trend" in sweep.sweep_words(_rows("m", {16: 0.6}, {16: 1.1}))


def test_record_holds_names_its_cases():
    one = _rows("llama-1b", {16: 0.60}, {16: 1.087})
    assert sweep.record_holds(one) == ("It holds one case: llama-1b at batch 16, so it shows no trend across "
                                       "batch sizes or models.")
    assert sweep.describe_record(one) == sweep.record_holds(one)
    many = _rows("a", {4: 0.5, 16: 0.6}, {4: 1.1, 16: 1.2}) + _rows("b", {16: 0.3}, {16: 1.0})
    assert sweep.record_holds(many) == "It holds 3 cases: a at batches 4, 16; b at batch 16."
    assert "rose" in sweep.describe_record(many)

"""CUDA-graph buckets for a trace (notebook 05): the slot simulation, padding and time, the widget."""
from __future__ import annotations

import pytest

from course_kit.cuda_graphs import buckets
from course_kit.widgets.cuda_graphs import GraphBuckets


def test_batch_trace_by_hand():
    # a at 0 for 3 steps; b at 0.015 (joins at step 2) for 2; c at 0 waits for a slot (max 2)
    got = buckets.batch_trace([0.0, 0.015, 0.0], [3, 2, 1], max_batch=2, step_s=0.01)
    # step0: a, c (c leaves after 1) -> 2; step1: a -> 1; step2: a, b -> 2; step3: b -> 1
    assert got == [2, 1, 2, 1]
    assert buckets.batch_trace([], [], 4, 0.01) == []
    with pytest.raises(ValueError, match="max_batch=0"):
        buckets.batch_trace([0.0], [1], 0, 0.01)
    with pytest.raises(ValueError, match="step_s=0"):
        buckets.batch_trace([0.0], [1], 1, 0)


def test_bucket_cost_by_hand():
    eager = {1: 10.0, 4: 13.0}            # 1 ms more per row: batch 3 -> 12 ms, batch 5 -> 14 ms
    graph = {1: 1.0, 2: 1.5, 4: 2.0}
    c = buckets.bucket_cost([1, 3, 5], [1, 4], eager, graph)
    assert [s["graph"] for s in c["steps"]] == [1, 4, None]        # 5 is above every bucket: eager
    assert [s["padding"] for s in c["steps"]] == [0, 1, 0]
    assert c["padding_rows"] == 1 and c["real_rows"] == 9 and c["padding_waste"] == pytest.approx(0.1)
    assert c["eager_ms"] == pytest.approx(10 + 12 + 14)
    assert c["replay_ms"] == pytest.approx(1 + 2 + 14) and c["eager_fallback_steps"] == 1
    # more buckets: less padding, no fallback
    c2 = buckets.bucket_cost([1, 3, 5], [1, 2, 3, 4, 5, 6], eager, {**graph, 6: 3.0})
    assert c2["padding_rows"] == 0 and c2["eager_fallback_steps"] == 0
    with pytest.raises(ValueError, match="bucket sizes"):
        buckets.bucket_cost([1], [], eager, graph)
    with pytest.raises(ValueError, match=">= 1"):
        buckets.bucket_cost([0], [1], eager, graph)


def test_step_times_from_record_rows():
    rows = [{"variant": "eager", "batch": 1, "ms_per_step": 5.0, "preset": "a"},
            {"variant": "eager", "batch": 1, "ms_per_step": 9.0, "preset": "b"},
            {"variant": "graph", "batch": 2, "ms_per_step": 1.0, "preset": "a"}]
    assert buckets.step_times(rows, "eager", "a") == {1: 5.0}
    assert buckets.step_times(rows, "graph") == {2: 1.0}


def test_widget_unticking_a_bucket_changes_padding_time_and_figure():
    trace = [1, 2, 3, 3, 4, 1]
    w = GraphBuckets(trace, {1: 10.0, 4: 13.0}, {1: 1.0, 2: 1.2, 4: 2.0}, max_batch=4, chosen=[1, 2, 4],
                     source="hand-made")
    text0, fig0 = w.readout.value, [list(t.y) for t in w.figure.data]
    assert "2 padding rows" in text0 and "faster than stepping eagerly" in text0
    w.boxes[4].value = False             # batches 3 and 4 now run eagerly
    assert w.cost["eager_fallback_steps"] == 3 and w.readout.value != text0
    assert [list(t.y) for t in w.figure.data] != fig0
    w.boxes[3].value = True
    assert w.cost["padding_rows"] == 0
    for box in w.boxes.values():
        box.value = False
    assert "no graph captured" in w.readout.value and "about as fast as" in w.readout.value
    with pytest.raises(ValueError, match="chosen sizes"):
        GraphBuckets(trace, {1: 1.0}, {1: 1.0}, max_batch=4, chosen=[8])

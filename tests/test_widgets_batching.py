"""Notebook 06's live engine widget, headless: Run replays the workload through the real engine."""
from __future__ import annotations

import math

import pytest
import torch

from course_kit.batching import live as bl
from course_kit.engine.metrics import RequestOutput
from course_kit.models import llama
from course_kit.widgets.batching import LiveEngine


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return llama.Transformer.from_preset("tiny", seed=0)


def test_request_latencies_by_hand():
    o = RequestOutput("r0", [1, 2], [5, 6, 7], arrival=1.0, first_token=1.5, finish=2.5, finish_reason="length")
    (row,) = bl.request_latencies([o])
    assert row["ttft_s"] == pytest.approx(0.5) and row["tpot_s"] == pytest.approx(0.5) and row["tokens"] == 3
    one = RequestOutput("r1", [1], [5], arrival=0.0, first_token=0.2, finish=0.2, finish_reason="length")
    assert math.isnan(bl.request_latencies([one])[0]["tpot_s"])


def test_workload_is_seeded_and_starts_at_zero():
    p1, s1, a1 = bl.workload(6, 10.0, 100, seed=3)
    p2, s2, a2 = bl.workload(6, 10.0, 100, seed=3)
    assert p1 == p2 and a1 == a2 and a1[0] == 0.0 and a1 == sorted(a1)
    with pytest.raises(ValueError, match="n=0"):
        bl.workload(0, 1.0, 100)


def test_run_live_matches_the_reference_loop_and_reports_progress(tiny):
    seen = []
    run = bl.run_live(tiny, "continuous", slots=2, chunk=16, rate=50.0, n_requests=4, on_progress=seen.append)
    assert seen[-1] == 1.0 and all(0 <= f <= 1 for f in seen)
    prompts, params, _ = bl.workload(4, 50.0, tiny.config.vocab_size)
    want = [llama.generate(tiny, [p], q.max_new_tokens)[0] for p, q in zip(prompts, params)]
    want = [w.tolist() if hasattr(w, "tolist") else list(w) for w in want]
    assert run["tokens"] == want                                   # fp32: batching never changes tokens
    assert {r["slot"] for r in run["intervals"]} <= {0, 1}
    assert all(r["ttft_s"] >= 0 for r in run["latencies"])
    for bad, match in (({"policy": "fifo"}, "policy 'fifo'"), ({"slots": 0}, "slots=0"),
                       ({"chunk": 0}, "chunk=0"), ({"rate": 0}, "rate=0")):
        with pytest.raises(ValueError, match=match):
            bl.run_live(tiny, **{"n_requests": 2, **bad})


def test_widget_run_button_redraws_with_the_new_settings(tiny):
    w = LiveEngine(tiny, policy="continuous", slots=4, chunk=64, rate=50.0, n_requests=6)
    text0, title0, tokens0 = w.readout.value, w.figure.layout.annotations[0].text, w.run["tokens"]
    w.policy.value, w.slots.value = "static", 2
    assert w.readout.value == text0                               # nothing runs before Run is pressed
    w.button.click()
    assert w.run["policy"] == "static" and w.run["slots"] == 2
    assert w.readout.value != text0 and "<b>static</b>, 2 slots" in w.readout.value
    assert w.figure.layout.annotations[0].text != title0
    assert {r["slot"] for r in w.run["intervals"]} <= {0, 1}
    assert w.run["tokens"] == tokens0 and w.progress.value == 1.0
    with pytest.raises(ValueError, match="slots=99"):
        LiveEngine(tiny, slots=99, run=False)


def test_log_ticks_label_every_tick_with_its_decade():
    from course_kit.plots.batching import log_ticks
    t = log_ticks([0.6, 3.0, 140.0])
    assert t["tickvals"] == [0.5, 1, 2, 5, 10, 20, 50, 100, 200]
    assert t["ticktext"] == ["0.5", "1", "2", "5", "10", "20", "50", "100", "200"]
    assert log_ticks([0, None]) == {}


def test_gantt_legend_says_faded_and_solid_in_grey():
    from course_kit.plots.batching import gantt
    rows = [{"request": "r1", "slot": 0, "phase": "prefill", "start": 0.0, "end": 0.1},
            {"request": "r1", "slot": 0, "phase": "decode", "start": 0.1, "end": 0.5}]
    fig = gantt({"static": rows, "continuous": rows})
    shown = [t for t in fig.data if t.showlegend]
    assert [t.name for t in shown] == ["prefill (faded)", "decode (solid)"]
    assert {t.marker.color for t in shown} == {"#555555"}
    assert not any(t.showlegend for t in fig.data if t.name in ("prefill", "decode"))

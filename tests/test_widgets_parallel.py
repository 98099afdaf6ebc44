"""Notebook 09 and 10 widgets, headless: the controls drive the pure functions underneath."""
import json
import time
from pathlib import Path

import pytest

from course_kit.benchmarks import capstone as capstone_bench
from course_kit.capstone import ladder
from course_kit.parallel import schedules, zero
from course_kit.widgets.capstone import TechniqueLadder
from course_kit.widgets.parallel import ZeroMemory
from course_kit.widgets.pipeline import PipelineSchedules

CAPSTONE = Path(__file__).resolve().parents[1] / "data" / "reference" / "h200" / "capstone.json"


def test_pipeline_widget_follows_its_controls_quickly():
    w = PipelineSchedules(p=4, m=8, kind="1f1b")
    assert w.summary["bubble"] == pytest.approx(schedules.bubble_theory(4, 8))
    t0 = time.perf_counter()
    w.kind.value = "interleaved"
    w.v.value = 2
    assert time.perf_counter() - t0 < 0.5 * 2          # two redraws, each well under 0.5 s
    assert w.summary["bubble"] == pytest.approx(3 / (2 * 8 + 3))
    assert "less idle than 1F1B" in w.text.value and "v=2" in w.figure.layout.title.text
    w.m.value = 6                                       # not a multiple of p: said, not drawn
    assert w.summary is None and "multiple of p" in w.text.value
    w.kind.value = "gpipe"
    assert w.v.disabled and "more activations" in w.text.value


def test_zero_widget_shards_one_more_part_per_stage():
    w = ZeroMemory(model="8b", gpus=8)
    totals = [sum(v.values()) for v in w.result.values()]
    assert totals == sorted(totals, reverse=True)
    n = zero.zero_bytes_per_gpu
    from course_kit.dtypes.memory import PRESETS
    assert totals[3] == pytest.approx(sum(n(PRESETS["8b"].n_params(), 8, 3).values()))
    before = totals[1]
    w.gpus.value = 64
    assert sum(list(w.result.values())[1].values()) < before
    assert "GiB" in w.text.value and ("fits" in w.text.value or "does not fit" in w.text.value)


def test_zero_explainer_both_ways():
    small = zero.explain_stages(zero.stages_table(1e9, 8), 80 * 2**30)
    assert small[0].startswith("plain DP") and "fits (" in small[0]
    big = zero.explain_stages(zero.stages_table(30e9, 8), 80 * 2**30)
    assert "does not fit" in big[0] and "fits (" in big[3] and "8.0x less than plain DP" in big[3]


def test_ladder_from_the_record_and_composed_sets():
    rec = json.loads(CAPSTONE.read_text())
    steps = ladder.ladder(rec["summary"]["throughput_tok_s"])
    full = ladder.waterfall(steps, ladder.TECHNIQUES)
    assert full["measured"] and full["final"] == pytest.approx(rec["summary"]["throughput_tok_s"]["engine: + async loop"])
    part = ladder.waterfall(steps, ["continuous batching + paged KV", "async loop"])
    assert not part["measured"] and "composed" in ladder.explain_waterfall(part, "x")
    prefix = ladder.waterfall(steps, ["continuous batching + paged KV", "CUDA graphs"])
    assert prefix["measured"] and prefix["final"] == pytest.approx(
        rec["summary"]["throughput_tok_s"]["engine: + CUDA graphs"])
    with pytest.raises(ValueError, match="unknown"):
        ladder.waterfall(steps, ["speculative decoding"])


def test_ladder_words_follow_the_sign():
    up = ladder.waterfall(ladder.ladder({"HF generate": 100.0, "engine: continuous + paged KV": 150.0}),
                          ["continuous batching + paged KV"])
    down = ladder.waterfall(ladder.ladder({"HF generate": 100.0, "engine: continuous + paged KV": 80.0}),
                            ["continuous batching + paged KV"])
    assert "1.50x faster than HF" in ladder.explain_waterfall(up, "x")
    assert "1.25x slower than HF" in ladder.explain_waterfall(down, "x")
    none = ladder.waterfall(ladder.ladder({"HF generate": 100.0, "engine: continuous + paged KV": 80.0}), [])
    assert "no technique" in ladder.explain_waterfall(none, "x")
    with pytest.raises(ValueError, match="HF generate"):
        ladder.ladder({"engine: + async loop": 1.0})


def test_ladder_widget_toggles_and_live_run():
    rec = json.loads(CAPSTONE.read_text())
    w = TechniqueLadder(rec, "H200")
    assert "measured in one run" in w.text.value
    w.toggles["CUDA graphs"].value = False
    assert "composed" in w.text.value and "off" in w.figure.data[0].text
    w.toggles["async loop"].value = False
    w.toggles["CUDA graphs"].value = True
    live = capstone_bench.live_run(w.enabled(), n_requests=2)
    assert set(live) == {"HF generate", "engine: continuous + paged KV"} and all(v > 0 for v in live.values())


def test_ep_and_cp_sentences_both_ways():
    from course_kit.parallel import explain
    assert "uneven" in explain.explain_load([15, 10, 12]) and "1.50x" in explain.explain_load([15, 10, 12])
    assert "even here" in explain.explain_load([8, 8])
    assert "unequal" in explain.explain_causal_blocks([1, 2]) and "equal work" in explain.explain_causal_blocks([2, 2])
    with pytest.raises(ValueError):
        explain.explain_load([])


def test_capstone_headline_both_ways():
    up = {"throughput_tok_s": {"engine: + async loop": 300.0, "HF generate": 100.0}, "full_engine": "engine: + async loop"}
    down = {"throughput_tok_s": {"engine: + async loop": 50.0, "HF generate": 100.0,
                                 "HF generate_batch": 49.0}, "full_engine": "engine: + async loop"}
    assert "3.00x faster than** HF generate" in ladder.explain_summary(up, "x")
    text = ladder.explain_summary(down, "x")
    assert "2.00x slower than** HF generate" in text and "about as fast as" in text


def test_ep_cp_speed_sentences_both_ways_and_missing():
    from course_kit.parallel import explain
    rec = {"results": [{"name": "ep_moe", "n": 2, "speedup": 1.6, "median_s": 1e-3, "max_rel_err_fp32": 1e-7},
                       {"name": "ring_attention", "n": 2, "causal": True, "speedup": 0.5, "median_s": 2e-3,
                        "max_rel_err_fp32": 1e-7}]}
    assert "1.60x faster than** one rank" in explain.explain_ep_cp_speed(rec, "x", "ep_moe")
    assert "2.00x slower than** one rank" in explain.explain_ep_cp_speed(rec, "x", "ring_attention")
    assert "no ring attention timings" in explain.explain_ep_cp_speed({"results": []}, "x", "ring_attention")


def test_pipeline_widget_says_why_v_is_off():
    w = PipelineSchedules(p=4, m=8, kind="gpipe")
    assert w.v.disabled and "v applies to interleaved 1F1B only" in w.v_note.value
    w.kind.value = "interleaved"
    assert not w.v.disabled and w.v_note.value == ""
    bubble = w.summary["bubble"]
    w.v.value = 4                                      # v now changes the schedule
    assert w.summary["bubble"] < bubble

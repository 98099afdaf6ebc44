"""The sync/async explainer of notebook 07: its wording follows the numbers, in every direction."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_kit.streams import Timeline
from course_kit.streams.explain import explain_overlap, explain_pair, overlap_figures

REF = Path(__file__).resolve().parents[1] / "data" / "reference" / "h200" / "async.json"


def tl(*spans):
    t = Timeline()
    for lane, a, b in spans:
        t.add(lane, f"{lane} work", a, b)
    return t


def test_above_the_bound_names_the_lane_whose_busy_time_shrank():
    sync = tl(("cpu", 0, 2), ("gpu", 2, 10))            # wall 10, gpu busy 8: bound 1.25x
    asyn = tl(("cpu", 0, 2), ("gpu", 0, 7))             # wall 7, gpu busy 7: 1.43x
    f = overlap_figures(sync, asyn)
    assert f["bound_sync"] == pytest.approx(1.25) and f["speedup"] == pytest.approx(10 / 7)
    text = explain_overlap(f)
    assert "above that bound" in text and "faster than" in text
    assert "the gpu lane was busy 8.000 s in sync and 7.000 s in async (12.5% less)" in text
    assert "1.43x" in text and "within the bound" not in text


def test_within_the_bound_says_how_much_was_realised():
    sync = tl(("cpu", 0, 2), ("gpu", 2, 10))
    asyn = tl(("cpu", 0, 2), ("gpu", 1, 9))              # wall 9: 1.11x of a 1.25x bound
    text = explain_pair(sync, asyn)
    assert "within the bound: 44% of the gain it allows was realised." in text
    assert "above" not in text and "slower" not in text


def test_slower_with_a_lane_that_grew():
    sync = tl(("cpu", 0, 5), ("device", 5, 8))
    asyn = tl(("cpu", 0, 7), ("device", 1, 9))           # host work stretched beside the worker
    text = explain_pair(sync, asyn, lanes=("cpu", "device"), device_lane="device", device_name="device")
    assert "slower than sync" in text and "Async was slower" in text
    assert "the cpu lane was busy 5.000 s in sync and 7.000 s in async (40.0% more)" in text
    assert "do not show why" not in text
    assert "overlap removed idle time but not wall time" in text     # device idle 62% -> 11%


def test_slower_and_idler_does_not_claim_idle_was_removed():
    sync = tl(("cpu", 0, 5), ("device", 5, 8))
    asyn = tl(("cpu", 0, 9), ("device", 6, 8.5))          # device idle 62% -> 72%
    text = explain_pair(sync, asyn, lanes=("cpu", "device"), device_lane="device")
    assert "the device lane did not idle less" in text and "removed idle" not in text


def test_slower_without_growth_says_the_cause_is_unknown():
    sync = tl(("cpu", 0, 5), ("gpu", 5, 8))
    asyn = tl(("cpu", 0, 5), ("gpu", 5.6, 8.6))
    text = explain_pair(sync, asyn)
    assert "slower" in text and "the timelines do not show why" in text


def test_about_the_same_at_the_edge():
    sync = tl(("cpu", 0, 1), ("gpu", 1, 10))
    asyn = tl(("cpu", 0, 1), ("gpu", 0.9, 9.9))          # 10 / 9.9: 1% faster, within noise
    text = explain_pair(sync, asyn)
    assert "about as fast as" in text and "slower" not in text and "faster" not in text


def test_the_engines_gpu_lane_is_never_called_gpu_idle():
    sync = tl(("cpu", 0, 2), ("gpu", 2, 10))
    asyn = tl(("cpu", 0, 2), ("gpu", 1, 9))
    text = explain_pair(sync, asyn)
    assert "GPU idle" not in text.split("(the host's picture")[0] and "step brackets" in text
    worker = explain_pair(tl(("cpu", 0, 2), ("device", 2, 10)), tl(("cpu", 0, 2), ("device", 1, 9)),
                          lanes=("cpu", "device"), device_lane="device", device_name="device")
    assert worker.startswith("device idle: 20.0% (sync)")


def test_which_mattered_follows_the_host_lanes_growth():
    from course_kit.streams.explain import which_mattered
    kw = dict(lanes=("cpu", "device"), device_lane="device")
    real = overlap_figures(tl(("cpu", 0, 5), ("device", 5, 8)), tl(("cpu", 0, 7), ("device", 1, 9)), **kw)
    ideal = overlap_figures(tl(("cpu", 0, 5), ("device", 5, 8)), tl(("cpu", 0, 5), ("device", 1, 6)), **kw)
    text = which_mattered(real, ideal)
    assert "competition for the CPU mattered" in text and "40% longer than in sync" in text
    assert "about as long as in sync beside the sleeping device" in text
    same = which_mattered(ideal, ideal)
    assert "did not matter" in same and "mattered:" not in same
    reverse = which_mattered(ideal, real)        # the host grew more beside the sleeping device
    assert "does not explain the stretch" in reverse and "within" not in reverse


def test_bad_arguments():
    with pytest.raises(ValueError, match="device_lane 'gpu' must be one of"):
        overlap_figures(tl(("cpu", 0, 1)), tl(("cpu", 0, 1)), lanes=("cpu", "device"))
    with pytest.raises(ValueError, match="empty"):
        overlap_figures(tl(("gpu", 1, 1)), tl(("gpu", 0, 1)))


@pytest.mark.skipif(not REF.exists(), reason="no H200 async record")
def test_h200_record_headline_is_explained_in_its_own_direction():
    """The record's headline pair, explained from its timelines: the step-bracket figure the record
    keeps (host_step_gap) is the one the timelines give, and the wording follows the measured speed-up
    against the bound, whichever side it falls (the 2026-11-30 record: above it; a re-record may not be)."""
    rec = json.loads(REF.read_text())
    head = rec["summary"]["headline"]
    key = f"{head['model']}/b{head['batch']}"
    f = overlap_figures(rec["timelines"][f"{key}/sync"], rec["timelines"][f"{key}/async"])
    assert f["sync"]["idle"] == pytest.approx(head["sync_host_step_gap"], abs=1e-3)
    text = explain_overlap(f)
    assert "step brackets" in text and "GPU idle comes from the profiler" in text
    if f["speedup"] > f["bound_sync"] * 1.01:
        assert "above that bound" in text
    elif f["speedup"] >= 1 - 0.03:
        assert "above that bound" not in text


CLAIM = {"source": "the blog", "model": "8B", "batch": 32, "sync_gpu_idle": 0.24, "async_gpu_idle": 0.006,
         "sync_s": 300.6, "async_s": 234.5, "time_saved": 0.22}


def _row(system, mode, wall, idle=None, **kw):
    return {"system": system, "mode": mode, "wall_s": wall, "tokens_per_s": 1000 / wall, "gpu_idle_fraction": idle, **kw}


def test_blog_explainer_follows_each_system_and_records_a_failure():
    from course_kit.streams.explain import explain_blog
    rows = [_row("course engine", "sync", 10.0, 0.20), _row("course engine", "async", 8.0, 0.01),
            _row("HF generate_batch", "sync", 20.0, 0.25),
            {"system": "HF generate_batch", "mode": "async", "error": "RuntimeError: boom\nmore"}]
    text = explain_blog(rows, {"claim": CLAIM, "model": "llama-3-8b", "batch": 32, "new_tokens": 256,
                               "engine_tokens_identical": True})
    assert "GPU idle 20.0% (sync) → 1.0% (async), and the run took 20.0% less time in async mode" in text
    with_overhead = explain_blog([_row("course engine", "sync", 10.0, 0.2, profiler_overhead=0.12),
                                  _row("course engine", "async", 8.0, 0.05, profiler_overhead=0.18)],
                                 {"claim": CLAIM, "model": "m", "batch": 4, "new_tokens": 6})
    assert "the profiler slowed the runs by 12% and 18%" in with_overhead
    assert "at about the same as" not in text and "below the blog's 22%" not in text
    assert "about the same as the blog's 22%" in text          # 20% vs 22%: within 10%
    assert "sync mode ran at 50 tokens/s with the GPU idle 25.0%; async mode failed (RuntimeError: boom)" in text
    assert "GPU idle 24% → 0.6% and 22% less time" in text and "tokens are identical" in text


def test_blog_explainer_slower_and_below():
    from course_kit.streams.explain import explain_blog
    rows = [_row("course engine", "sync", 10.0), _row("course engine", "async", 12.0),
            _row("HF generate_batch", "sync", 10.0, 0.3), _row("HF generate_batch", "async", 9.0, 0.1)]
    text = explain_blog(rows, {"claim": CLAIM, "model": "tiny", "batch": 4, "new_tokens": 6,
                               "engine_tokens_identical": False})
    assert "20.0% more time in async mode" in text and "GPU idle not measured" in text
    assert "10.0% less time in async mode, below the blog's 22%" in text
    assert "tokens differ" in text


def test_blog_explainer_when_the_whole_case_failed():
    from course_kit.streams.explain import explain_blog
    text = explain_blog([], {"claim": CLAIM, "error": "OutOfMemoryError: CUDA out of memory\ntrace"})
    assert "failed: OutOfMemoryError: CUDA out of memory." in text and "unchecked" in text


def test_record_headline_states_the_records_throughput_speed_up():
    """Finding: the H200 record's headline (llama-1b, batch 16) said 'Async ran 1.11x faster (wall time
    396.2 → 358.1 ms)' and '37% of the gain', from the timelines' windows, while the record's speed-up
    and its chart are the tokens/s ratio 7,691 → 8,362 = 1.087x: 30% of the bound's gain."""
    from course_kit.streams.explain import with_throughput
    sync = tl(("cpu", 0, 0.112), ("gpu", 0.0882, 0.3962))      # wall 396.2 ms, gpu busy 307.9 ms
    asyn = tl(("cpu", 0, 0.3103), ("gpu", 0.0047, 0.3581))      # wall 358.1 ms, gpu busy 353.4 ms
    old = explain_pair(sync, asyn)
    assert "1.11x faster" in old and "37% of the gain" in old          # the windows' ratio: another figure
    text = explain_pair(sync, asyn, throughput=(7690.676, 8362.120))
    assert "Async ran 1.09x faster than sync (throughput 7,691 → 8,362 tokens/s" in text
    assert "396.2 ms → 358.1 ms" in text and "1.11x" not in text
    assert "30% of the gain it allows was realised" in text
    f = with_throughput(overlap_figures(sync, asyn), 7690.676, 8362.120)
    assert f["speedup"] == pytest.approx(1.0873, abs=1e-4)
    with pytest.raises(ValueError, match="sync_tokens_per_s must be a positive throughput"):
        with_throughput(f, 0.0, 1.0)


@pytest.mark.skipif(not REF.exists(), reason="no H200 async record")
def test_record_headline_speed_up_is_the_records_own():
    rec = json.loads(REF.read_text())
    head = rec["summary"]["headline"]
    key = f"{head['model']}/b{head['batch']}"
    text = explain_pair(rec["timelines"][f"{key}/sync"], rec["timelines"][f"{key}/async"],
                        throughput=(head["sync_tokens_per_s"], head["async_tokens_per_s"]))
    assert f"{head['speedup']:.2f}x" in text and f"{head['sync_tokens_per_s']:,.0f} → " in text


def _loop_figs(sync_cpu, async_cpu, sync_dev, async_dev):
    """overlap_figures of a loop whose host lane and device lane were busy as given (ms)."""
    kw = dict(lanes=("cpu", "device"), device_lane="device")
    ms = 1e-3
    sync = tl(("cpu", 0, sync_cpu * ms), ("device", sync_cpu * ms, (sync_cpu + sync_dev) * ms))
    asyn = tl(("cpu", 0, async_cpu * ms), ("device", 0, async_dev * ms))
    return overlap_figures(sync, asyn, **kw)


def test_which_mattered_reads_the_device_lane_too():
    """Finding: the H200 run's real-matmul loop (cpu 56.8 -> 64.6 ms, device 13.1 -> 72.0 ms) against
    the sleeping device (cpu 42.8 -> 62.5, device 67.1 -> 75.8) was told 'competition for the CPU does
    not explain the stretch': the device lane's 450% stretch beside the host is that competition."""
    from course_kit.streams.explain import which_mattered
    real = _loop_figs(56.8, 64.6, 13.1, 72.0)
    ideal = _loop_figs(42.8, 62.5, 67.1, 75.8)
    text = which_mattered(real, ideal)
    assert "competition for the CPU mattered on the device's side" in text
    assert "does not explain" not in text
    assert "the device's steps took 450% longer than in sync with real matmuls and 13% longer than in sync asleep" in text
    assert "the host's work took 14% longer than in sync beside the worker doing real matmuls" in text
    # the host side alone
    host = which_mattered(_loop_figs(50, 70, 30, 30), _loop_figs(50, 50, 30, 30))
    assert "mattered on the host's side" in host and "device's side" not in host
    both = which_mattered(_loop_figs(50, 70, 30, 60), _loop_figs(50, 50, 30, 30))
    assert "mattered on both sides" in both
    neither = which_mattered(_loop_figs(50, 50, 30, 30), _loop_figs(50, 50, 30, 30))
    assert "did not matter" in neither and "mattered on" not in neither
    loop = which_mattered(_loop_figs(50, 50, 30, 30), _loop_figs(50, 70, 30, 30))
    assert "does not explain the stretch" in loop and "Neither side grew more" in loop


def test_blog_states_time_next_to_idle_and_no_negative_overhead():
    """Finding: the H200 record's HF row read 'the profiler slowed the runs by -4% and -1%', and
    nothing said that HF's async mode idled less (25.4% -> 6.0%) yet took 4x as long."""
    from course_kit.streams.explain import explain_blog
    rows = [_row("course engine", "sync", 2.1292, 0.2720, profiler_overhead=0.1253),
            _row("course engine", "async", 1.7504, 0.0544, profiler_overhead=0.0197),
            _row("HF generate_batch", "sync", 12.0837, 0.2544, profiler_overhead=-0.0392),
            _row("HF generate_batch", "async", 48.8788, 0.0602, profiler_overhead=-0.0076)]
    text = explain_blog(rows, {"claim": CLAIM, "model": "llama-3-8b", "batch": 32, "new_tokens": 256,
                               "engine_tokens_identical": True})
    hf = next(line for line in text.splitlines() if "HF generate_batch" in line)
    engine = next(line for line in text.splitlines() if "course engine" in line)
    assert "-4%" not in text and "-1%" not in text and "slowed the runs by" not in hf
    assert "GPU idle 25.4% (sync) → 6.0% (async), and the run took 4.05x as long in async mode" in hf
    assert "the GPU idled less, yet the run took longer" in hf
    assert "sync 4% shorter, async about as long (within 3%)" in hf and "smaller than the variation" in hf
    assert "17.8% less time in async mode" in engine and "less idle and less time" in engine
    assert "sync 13% longer, async about as long (within 3%)." in engine and "variation" not in engine


def test_idle_vs_time_in_every_direction():
    from course_kit.streams.explain import idle_vs_time
    assert idle_vs_time(0.25, 0.05, 0.2) == ": less idle and less time."
    assert idle_vs_time(0.05, 0.25, -0.2) == ": more idle and more time."
    assert "idled less, yet the run took longer" in idle_vs_time(0.25, 0.05, -3.0)
    assert "idled more, yet the run took less time" in idle_vs_time(0.05, 0.25, 0.2)
    assert "about as long" in idle_vs_time(0.25, 0.05, 0.01)
    assert "about as much GPU idle" in idle_vs_time(0.25, 0.24, 0.2)

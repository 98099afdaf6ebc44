"""course_kit.streams: timeline arithmetic, the worker-thread loops, and (on a GPU) the demos."""
import pytest
import torch

from course_kit import streams
from course_kit.plots import streams as splots
from course_kit.streams import Span, Timeline


def _tl() -> Timeline:
    tl = Timeline()
    tl.add("cpu", "prepare 0", 0.0, 1.0)
    tl.add("gpu", "step 0", 1.0, 2.0)
    tl.add("cpu", "prepare 1", 2.0, 3.0)
    tl.add("gpu", "step 1", 3.0, 4.5)
    tl.add("gpu", "copy 1", 4.0, 5.0)  # overlaps step 1: counted once
    return tl


def test_busy_idle_gaps_by_hand():
    tl = _tl()
    assert tl.lanes == ["cpu", "gpu"]
    assert tl.window() == (0.0, 5.0)
    assert tl.busy_s("gpu") == pytest.approx(3.0)
    assert tl.idle_fraction("gpu") == pytest.approx(2.0 / 5.0)
    assert tl.gaps("gpu") == [(2.0, 3.0)]
    assert tl.gaps("gpu", (0.0, 5.0)) == [(0.0, 1.0), (2.0, 3.0)]
    # busiest lane: gpu with 3 s of 5 s -> overlap could give at most 5/3
    assert tl.overlap_speedup_bound() == pytest.approx(5.0 / 3.0)
    assert streams.speedup_bound_from_idle(0.4) == pytest.approx(1 / 0.6)
    assert streams.idle_fraction(tl.spans, "gpu") == pytest.approx(0.4)


def test_timeline_roundtrip_and_errors():
    tl = _tl()
    back = Timeline.from_records(tl.to_records())
    assert sorted(back.spans, key=lambda s: s.start_s) == sorted(tl.spans, key=lambda s: s.start_s)
    assert tl.shifted(1.0).window() == (-1.0, 4.0)
    with pytest.raises(ValueError, match="before it"):
        Span("gpu", "bad", 2.0, 1.0)
    with pytest.raises(ValueError, match="lanes"):
        tl.on("nope")
    with pytest.raises(ValueError, match="outside"):
        streams.speedup_bound_from_idle(1.0)


def test_sync_and_async_give_identical_tokens_and_valid_timelines():
    kw = dict(batch=4, steps=6, hidden=64, layers=2, vocab=128, prep_work=200)
    res = streams.compare(**kw)
    sync, asyn = res["sync"], res["async"]
    assert sync["outputs"] == asyn["outputs"]
    assert all(len(o) == 6 for o in sync["outputs"])
    # the oracle: the same toy model run step by step with no threads at all
    model = streams.ToyDecoder.create(128, 64, 2, seed=0)
    g = torch.Generator().manual_seed(1)
    last = torch.randint(0, 128, (4,), generator=g)
    lengths = torch.randint(4, 64, (4,), generator=g)
    expected = []
    for _ in range(6):
        last = model.step(last, lengths)
        lengths = lengths + 1
        expected.append(last.tolist())
    assert sync["outputs"] == [list(col) for col in zip(*expected)]
    for r in (sync, asyn):
        tl = r["timeline"]
        assert set(tl.lanes) == {"cpu", "device"}
        assert len(tl.on("device")) == 6
        assert 0.0 <= r["device_idle"] < 1.0
        assert r["speedup_bound"] >= 1.0
    # in sync mode the device never runs while the host prepares: the host waits for every step
    dev = sync["timeline"].on("device")
    prep = [s for s in sync["timeline"].on("cpu") if s.name.startswith("prepare")]
    for p, d in zip(prep, dev):
        assert p.end_s <= d.start_s + 1e-6


def test_async_placeholder_is_filled_on_the_device():
    model = streams.ToyDecoder.create(64, 32, 1)
    with pytest.raises(RuntimeError, match="placeholder"):
        model.step(torch.tensor([-1, 3]), torch.tensor([1, 2]))
    first = model.step(torch.tensor([5, 3]), torch.tensor([1, 2]))
    again = streams.ToyDecoder(model.embed, model.weights)
    ref = again.step(first, torch.tensor([2, 3]))
    got = model.step(torch.tensor([-1, -1]), torch.tensor([2, 3]))
    assert torch.equal(got, ref)


def test_decode_loop_rejects_bad_values():
    with pytest.raises(ValueError, match="mode"):
        streams.decode_loop("overlapped")
    with pytest.raises(ValueError, match="device_ms"):
        streams.decode_loop("sync", device_ms=-1)


def test_figures():
    tl = _tl()
    fig = splots.gantt(tl, "t")
    assert len(fig.data) == 3  # prepare, step, copy
    fig = splots.gantt_pair({"sync": tl, "async": tl.to_records()})
    assert len(fig.data) == 6
    assert all(t.textposition == "none" for t in fig.data)        # no labels piled into each other
    rows = [{"mode": m, "batch": b, "host_step_gap_fraction": 0.1, "tokens_per_s": 100.0 * b, "model": "s"}
            for m in ("sync", "async") for b in (1, 4)]
    fig = splots.idle_and_throughput(rows, x="batch", group="model")
    assert len(fig.data) == 4 and "step brackets" in fig.layout.annotations[0].text
    fig = splots.idle_and_throughput([dict(r, gpu_idle_fraction=0.2) for r in rows], x="batch", group="model")
    assert "profiler" in fig.layout.annotations[0].text and fig.data[0].y[0] == 0.2


@pytest.mark.gpu
def test_gpu_concurrency_and_races():
    from course_kit.streams import gpu
    c = gpu.concurrency_demo(n_streams=4, kind="spin", kernel_ms=2.0)
    assert c["speedup"] > 2.0, c["speedup"]  # 4 one-thread kernels overlap on separate streams
    legacy = gpu.legacy_default_stream_demo(kernel_ms=2.0)
    tl = legacy["non-blocking streams (PyTorch's)"]["timeline"]
    a, b = tl.on("stream A")[0], tl.on("stream B")[0]
    assert b.start_s < a.end_s                  # non-blocking: B started while A still ran
    if legacy["blocking_available"]:
        tl = legacy["blocking streams (cudaStreamCreate)"]["timeline"]
        a, b = tl.on("stream A")[0], tl.on("stream B")[0]
        assert b.start_s >= a.end_s - 1e-5      # blocking: the default-stream op serialised them
        assert legacy["blocking streams (cudaStreamCreate)"]["ms"] > 1.6 * legacy[
            "non-blocking streams (PyTorch's)"]["ms"]
    w = gpu.missing_wait_demo()
    assert not w["racy (no wait)"]["correct"]
    assert w["fixed (wait_event)"]["correct"] and w["fixed (wait_stream)"]["correct"]
    r = gpu.missing_record_stream_demo()
    assert r["racy (no record_stream)"]["memory_reused"]
    assert not r["racy (no record_stream)"]["correct"]
    assert r["fixed (record_stream)"]["correct"]
    assert not r["fixed (record_stream)"]["memory_reused"]


@pytest.mark.gpu
def test_gpu_copy_overlap():
    from course_kit.streams import gpu
    o = gpu.copy_overlap_demo(mbytes=128)
    v = o["variants"]
    assert all(x["correct"] for x in v.values())
    pinned = v["copy stream: pinned, non_blocking"]
    assert pinned["speedup_vs_serial"] > 1.3, pinned
    assert pinned["host_blocked_ms"] < 0.5 * o["copy_ms"]


def test_gantt_legend_names_and_single_point_sweeps():
    """Finding: the race chart's legend read "spin," (the first word of "spin, then x = 1"), and the
    H200 record's one-case sweep drew sync and async as the same dot."""
    from course_kit.plots.streams import _kind
    assert [_kind(n) for n in ("work 0", "spin A", "step 12", "spin, then x = 1", "y = 2 * x", "H2D copy", "")] == \
        ["work", "spin", "step", "spin, then x = 1", "y = 2 * x", "H2D copy", "work"]
    t = streams.Timeline()
    t.add("producer", "spin, then x = 1", 0.0, 1.0)
    t.add("consumer", "y = 2 * x", 0.2, 0.3)
    assert sorted(tr.name for tr in splots.gantt(t).data) == ["spin, then x = 1", "y = 2 * x"]
    rows = [{"mode": m, "batch": 16, "gpu_idle_fraction": i, "tokens_per_s": v, "model": "llama-1b"}
            for m, i, v in (("sync", 0.60, 7691.0), ("async", 0.52, 8362.0))]
    fig = splots.idle_and_throughput(rows, x="batch", group="model")
    symbols = {tr.name: tr.marker.symbol for tr in fig.data}
    assert len(set(symbols.values())) == 2
    assert all("text" in tr.mode and list(tr.text) == [tr.name.split(",")[0]] for tr in fig.data)

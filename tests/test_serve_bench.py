"""`course-kit bench serving` (issue 24): the load arithmetic, the streaming client, and the whole
benchmark end to end at smoke size (real servers in child processes, on 127.0.0.1 only)."""
import json
import math

import numpy as np
import pytest

from course_kit.batching import loadgen
from course_kit.engine import Engine
from course_kit.batching.server import BackgroundServer
from course_kit.batching.client import LoadClient, _on_event, request_body

from test_engine import tiny_model
from course_kit import benchmarks


# ---------------------------------------------------------------------------- loadgen (pure)
def test_schedule_is_poisson_at_the_rate_with_trace_lengths():
    lengths = loadgen.trace_lengths("chat_bursty")
    assert len(lengths) == 64 and all(p >= 1 and o >= 1 for p, o in lengths)
    plan = loadgen.schedule(20000, 50.0, lengths, seed=3)
    gaps = np.diff([0.0] + [r.send_at for r in plan])
    assert abs(gaps.mean() - 1 / 50) < 0.02 * (1 / 50)          # exponential gaps, mean 1/rate
    assert abs(gaps.std() - 1 / 50) < 0.03 * (1 / 50)           # ... and std 1/rate (Poisson)
    assert set((r.prompt_len, r.output_len) for r in plan) <= set(lengths)
    assert loadgen.schedule(5, 50.0, lengths, seed=3) == loadgen.schedule(5, 50.0, lengths, seed=3)
    assert all(r.send_at == 0.0 for r in loadgen.schedule(4, math.inf, lengths))
    for bad in (dict(n=0, rate=1.0), dict(n=3, rate=0.0), dict(n=3, rate=-2.0)):
        with pytest.raises(ValueError):
            loadgen.schedule(lengths=lengths, **bad)
    assert loadgen.requests_for(100.0, 2.0, 10, 150) == 150 and loadgen.requests_for(1.0, 2.0, 10, 150) == 10
    assert loadgen.requests_for(30.0, 2.0, 10, 150) == 60


def test_percentile_matches_numpy_and_ignores_nan():
    vals = list(np.random.default_rng(0).exponential(size=101))
    for q in (0, 50, 99, 100):
        assert loadgen.percentile(vals + [float("nan")], q) == pytest.approx(np.percentile(vals, q))
    assert math.isnan(loadgen.percentile([], 50))
    with pytest.raises(ValueError):
        loadgen.percentile(vals, 101)


def test_summarize_rate_by_hand():
    T = loadgen.ClientTiming
    timings = [T(0.0, 3, 3, 0.5, 1.5), T(1.0, 2, 2, 1.2, 1.4), T(2.0, 4, 2, 2.1, 2.2, error="cut")]
    s = loadgen.summarize_rate(timings, 1.0)
    assert s["requests"] == 3 and s["completed"] == 2 and s["errors"] == 1 and s["first_error"] == "cut"
    assert s["ttft_p50_s"] == pytest.approx(0.35)               # TTFTs 0.5 and 0.2 (the failed one left out)
    assert s["tpot_p50_s"] == pytest.approx((0.5 + 0.2) / 2)     # (1.5-0.5)/2 and (1.4-1.2)/1
    assert s["output_tokens"] == 7 and s["duration_s"] == pytest.approx(2.2)
    assert s["throughput_tok_s"] == pytest.approx(7 / 2.2)


def test_crossing_interpolates_and_says_when_it_never_crosses():
    assert loadgen.crossing([1, 2, 4], [0.2, 0.6, 1.4], 1.0) == pytest.approx(3.0)
    assert loadgen.crossing([1, 2, 4], [0.2, 1.0, 3.0], 1.0) == pytest.approx(2.0)
    assert loadgen.crossing([1, 2, 4], [0.1, 0.2, 0.3], 1.0) is None
    assert loadgen.crossing([1, 2], [1.5, 3.0], 1.0) == 1.0              # already above at the lowest rate
    assert loadgen.crossing([1, 2, 3], [0.5, float("nan"), 1.5], 1.0) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        loadgen.crossing([2, 1], [0.1, 0.2], 1.0)


def test_explain_knee_wording_follows_the_numbers():
    near = loadgen.explain_knee(95.0, 120.0, 100.0)
    assert near["cause"] == "throughput" and "95%" in near["sentence"] and "faster than they finish" in near["sentence"]
    assert "close to the rate" in near["sentence"]
    past = loadgen.explain_knee(120.0, 125.0, 100.0)
    assert past["cause"] == "throughput" and "past the rate" in past["sentence"]
    bursts = loadgen.explain_knee(60.0, 120.0, 100.0)
    assert bursts["cause"] == "bursts" and "bursts" in bursts["sentence"]
    low = loadgen.explain_knee(10.0, 120.0, 100.0)
    assert low["cause"] == "per-request latency" and "not what sets it" in low["sentence"]
    never_low = loadgen.explain_knee(None, 80.0, 100.0)
    assert never_low["cause"] == "not reached" and "never outran it" in never_low["sentence"]
    never_high = loadgen.explain_knee(None, 150.0, 100.0)
    assert "too short" in never_high["sentence"]


# ---------------------------------------------------------------------------- the client
def test_openai_stream_parsing_on_chunks_transformers_serve_sends():
    # chunks as `transformers serve` 5.x sends them (captured from a run on the tiny model)
    chunk = b'{"id":"x","choices":[{"index":0,"text":" t200"}],"created":1,"model":"m","object":"text_completion"}'
    final = (b'{"id":"x","choices":[{"finish_reason":"length","index":0,"text":""}],"created":1,"model":"m",'
             b'"object":"text_completion","usage":{"completion_tokens":3,"prompt_tokens":3,"total_tokens":6}}')
    t = loadgen.ClientTiming(0.0, 3)
    assert [_on_event(chunk, "openai", t, x) for x in (0.1, 0.2, 0.4)] == [False] * 3
    assert _on_event(final, "openai", t, 0.5) and t.ok and t.tokens == 3
    assert t.ttft == pytest.approx(0.1) and t.tpot == pytest.approx(0.15)
    short = loadgen.ClientTiming(0.0, 3)
    _on_event(chunk, "openai", short, 0.1)
    _on_event(final, "openai", short, 0.2)
    assert not short.ok and "usage says 3" in short.error
    err = loadgen.ClientTiming(0.0, 3)
    assert _on_event(b'{"error": "CB worker died"}', "openai", err, 0.1) and "died" in err.error
    body = json.loads(request_body("openai", [5, 17], 4))
    assert body["prompt"] == "t5 t17" and body["max_tokens"] == 4 and body["stream"]


def test_load_client_against_the_course_server():
    engine = Engine(tiny_model(), policy="continuous", max_num_seqs=4, max_num_batched_tokens=64, block_size=4)
    lengths = [(5, 7), (12, 3), (2, 9)]
    plan = loadgen.schedule(9, 200.0, lengths, seed=1)
    items = [(r.send_at, request_body("course", list(range(3, 3 + r.prompt_len)), r.output_len), r.output_len)
             for r in plan]
    with BackgroundServer(engine) as srv:
        with LoadClient(srv.port, "course") as client:
            timings = client.run(items, timeout_s=60)
        bad = client.run([(0.0, b'{"prompt": []}', 3)], timeout_s=30)[0]
    assert all(t.ok for t in timings), [t.error for t in timings]
    assert [t.tokens for t in timings] == [r.output_len for r in plan]
    assert all(t.send_at <= t.send_at + t.ttft <= t.last for t in timings)
    assert bad.error.startswith("HTTP 400") and "prompt is empty" in bad.error
    assert engine.blocks.num_used_blocks == 0
    with pytest.raises(ValueError, match="only sends to this machine"):
        LoadClient(80, "course", host="10.0.0.1")


# ---------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def smoke_record():
    return benchmarks.run_topic("serving", {"size": "smoke", "peer": False})


def test_bench_serving_end_to_end_at_smoke_size(smoke_record):
    rec = smoke_record
    json.dumps(rec, allow_nan=False)
    assert set(rec) >= {"params", "results", "summary", "environment"}
    course = [r for r in rec["results"] if r["server"] == "course"]
    probe = [r for r in course if r["kind"] == "saturation probe"]
    sweep = [r for r in course if r["kind"] == "poisson"]
    assert len(probe) == 1 and len(sweep) >= 1
    assert [r["rate_rps"] for r in sweep] == sorted(r["rate_rps"] for r in sweep)
    for r in probe + sweep:
        assert r["completed"] == r["requests"] and r["errors"] == 0, r     # every request, every token
        assert r["ttft_p50_s"] <= r["ttft_p99_s"] and r["tpot_p50_s"] <= r["tpot_p99_s"]
        assert r["ttft_p50_s"] > 0 and r["tpot_p50_s"] > 0 and r["throughput_tok_s"] > 0
    s = rec["summary"]
    srv = s["servers"]["course"]
    assert srv["capacity_rps"] > 0 and s["offline_ceiling_tok_s"] > 0
    assert srv["knee_rps"] is None or sweep[0]["rate_rps"] <= srv["knee_rps"] <= sweep[-1]["rate_rps"]
    assert srv["explain"]["sentence"] and s["knee_rps"] == srv["knee_rps"]
    assert "skipped" in s["servers"]["transformers serve"]
    # the server's greedy tokens are the offline engine's (fp32 on CPU: the same work)
    assert s["token_agreement_with_offline_engine"]["course"] == 1.0


def test_the_figure_draws_the_record(smoke_record):
    from course_kit.plots import serving as splots
    fig = splots.latency_vs_load(smoke_record)
    names = {t.name for t in fig.data}
    assert {"course p50", "course p99"} <= names
    n = len(loadgen.sweep_rows(smoke_record)["course"])
    assert all(len(t.x) == n for t in fig.data if t.name.startswith("course p"))


def test_a_peer_that_cannot_start_is_recorded_with_its_own_error(tmp_path):
    """The real `transformers serve`, pointed at a folder with no model: its own error is kept."""
    from course_kit.benchmarks import serving
    from course_kit.batching.server import free_port
    port = free_port()
    (tmp_path / "empty").mkdir()
    p = {**serving._defaults("smoke", False), "startup_timeout_s": 90.0}
    out = serving._serve_and_sweep("transformers serve", serving.peer_argv(tmp_path / "empty", "cpu", "float32", port),
                                   port, "openai", tmp_path, [(3, 2)], 256, p,
                                   env={"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1"})
    assert "skipped" in out and out["log_tail"]
    _, said, rest = out["skipped"].partition("exited with code ")
    reason = rest.partition(": ")[2]
    assert said and reason and reason[:100] in out["log_tail"], out


def _summary(course_cap, peer_cap, course_knee, peer_knee, served, ceiling, peer_skipped=None, tpots=None):
    course = {"capacity_rps": course_cap, "knee_rps": course_knee, "top_rate_rps": 1.25 * course_cap,
              "saturated_tok_s": served}
    peer = ({"skipped": peer_skipped} if peer_skipped else
            {"capacity_rps": peer_cap, "knee_rps": peer_knee, "top_rate_rps": 1.25 * peer_cap})
    results = [{"server": name, "kind": "poisson", "rate_rps": rate, "tpot_p50_s": tpot}
               for name, rate, tpot in (tpots or [])]
    return {"results": results, "summary": {"threshold_s": 1.0, "offline_ceiling_tok_s": ceiling,
                                            "servers": {"course": course, "transformers serve": peer}}}


def test_describe_wording_follows_the_numbers_both_ways():
    ahead = loadgen.describe(_summary(400.0, 40.0, 420.0, 30.0, 6000.0, 20000.0))
    assert "10.00x more than the peer" in ahead and "14.00x more load than the peer" in ahead
    assert "30% of the 20,000" in ahead and "serving layer (HTTP" in ahead
    behind = loadgen.describe(_summary(20.0, 40.0, 15.0, 45.0, 9500.0, 10000.0))
    assert "2.00x fewer than the peer" in behind and "3.00x less load than the peer" in behind
    assert "costs little" in behind
    noisy = loadgen.describe(_summary(20.0, 40.0, None, None, 15000.0, 10000.0))
    assert "noisy" in noisy and "load than the peer" not in noisy and "stayed under 1 s" in noisy
    same = loadgen.describe(_summary(40.0, 40.5, 30.0, 30.2, 9000.0, 10000.0))
    assert "about as many as" in same and "about the same load as" in same
    skipped = loadgen.describe(_summary(20.0, None, None, None, 900.0, 1000.0,
                                        peer_skipped="RuntimeError: transformers serve exited with code 1: boom"))
    assert "did not run here: RuntimeError" in skipped and "boom" in skipped
    assert "did not run" in loadgen.describe({"summary": {"servers": {"course": {"skipped": "no GPU"}}}})
    tpot = [("course", 20.0, 0.002), ("course", 10.0, 0.004), ("transformers serve", 5.0, 0.1),
            ("transformers serve", 9.0, 0.3)]
    per_token = loadgen.describe(_summary(40.0, 8.0, None, None, 9000.0, 10000.0, tpots=tpot))
    assert "4 ms" in per_token and "100 ms" in per_token and "25.00x faster than the peer" in per_token
    tpot = [("course", 10.0, 0.05), ("transformers serve", 5.0, 0.01)]
    assert "5.00x slower than the peer" in loadgen.describe(_summary(40.0, 8.0, None, None, 9e3, 1e4, tpots=tpot))

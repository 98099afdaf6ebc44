"""bench engine at smoke size: every configuration timed against its own bandwidth limit, and a
profiled window broken down into shares that add up to one."""
import pytest

from course_kit import benchmarks


def test_bench_engine_runs_each_configuration_and_breaks_a_window_down():
    rec = benchmarks.run_topic("engine", {"size": "smoke"})
    rows, s = rec["results"], rec["summary"]
    assert [(r["slots"], r["workload"]) for r in rows] == [(4, "full"), (2, "full"), (4, "half as long")]
    for r in rows:
        assert r["limit"]["limit_tok_s"] > 0 and r["fraction_of_limit"] == pytest.approx(
            r["tokens_per_s"] / r["limit"]["limit_tok_s"])
        assert r["limit"]["steps"] == r["steps"] and r["median_kv_tokens_per_step"] > 0
    shares = s["breakdown"]["shares"]
    assert sum(shares.values()) == pytest.approx(1.0) and s["breakdown"]["steps"] == 3
    assert s["best_slots"] in (2, 4) and "fraction_of_limit" in s["meets"]

"""`course-kit bench batching` end to end at CPU size: every policy checked against HF, both loop
modes timed, and the headline ratio taken from one mode for both policies."""
import math

import pytest

from course_kit.benchmarks.batching import policy_runs
from course_kit.engine import metrics
from course_kit import benchmarks


@pytest.fixture(scope="module")
def record():
    return benchmarks.run_topic("batching", {"size": "cpu", "device": "cpu", "n_requests": 6, "peer_requests": 2,
                                        "check_requests": 1})


def test_every_policy_matches_hf_and_nothing_leaks(record):
    # run_engine itself asserts full-length outputs and no leaked block after every run
    assert record["summary"]["correct_fp32"] == {"static": True, "dynamic": True, "continuous": True}


def test_headline_compares_both_policies_in_one_loop_mode(record):
    sm = record["summary"]
    pairs = policy_runs(record)
    assert set(pairs) == {"sync", "async"} == set(sm["continuous_vs_static_by_mode"])
    mode = sm["continuous_vs_static_mode"]
    # the mode picked is the one where continuous batching is faster
    assert pairs[mode][1]["throughput_tok_s"] == max(c["throughput_tok_s"] for _, c in pairs.values())
    static, continuous = pairs[mode]
    assert static["policy"] == "static" and continuous["policy"] == "continuous"
    assert static["output_tokens"] == continuous["output_tokens"]
    assert sm["continuous_vs_static"] == pytest.approx(continuous["throughput_tok_s"] / static["throughput_tok_s"])
    # fewer steps / step cost is the same ratio, read from steps and durations
    for loop, (st, co) in pairs.items():
        gain = metrics.policy_gain(st, co)
        assert gain == pytest.approx(sm["continuous_vs_static_parts"][loop])
        assert gain["throughput_ratio"] == pytest.approx(sm["continuous_vs_static_by_mode"][loop])
        assert gain["fewer_steps"] > 1        # padding and waiting removed: fewer model steps


def test_old_records_hold_the_sync_loop_only():
    old = {"results": [{"name": "static", "throughput_tok_s": 1.0}, {"name": "continuous", "throughput_tok_s": 2.0},
                       {"name": "continuous async (64 requests, 64 slots)", "throughput_tok_s": 3.0}]}
    pairs = policy_runs(old)
    assert list(pairs) == ["sync"] and not math.isnan(pairs["sync"][1]["throughput_tok_s"])

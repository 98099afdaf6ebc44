import time

import pytest
import torch

from course_kit import bench
from course_kit import benchmarks


def test_timeit_measures_what_runs_and_rotates_inputs():
    seen = []
    timing = bench.timeit(lambda x: (seen.append(x), time.sleep(0.002)), warmup=2, repeat=6,
                          inputs=[(1,), (2,), (3,)], device="cpu")
    assert seen == [1, 2, 3, 1, 2, 3, 1, 2]          # warm-up calls, then timed calls, rotating
    assert len(timing.times_s) == 6
    assert 0.002 <= timing.median_s < 0.05
    assert timing.p10_s <= timing.median_s <= timing.p90_s


def test_timeit_rejects_bad_counts():
    with pytest.raises(ValueError, match="repeat"):
        bench.timeit(lambda: None, repeat=0)


def test_oom_becomes_a_skip_naming_the_memory():
    def boom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    result = bench.guard_oom(boom, needs_bytes=80 * 2**30, what="the 70B model")
    assert isinstance(result, bench.Skipped)
    assert "80.0 GiB" in result.reason and "70B" in result.reason
    assert bench.guard_oom(lambda: 42) == 42


def test_other_errors_are_not_swallowed():
    with pytest.raises(ZeroDivisionError):
        bench.guard_oom(lambda: 1 / 0)


def test_environment_stamp():
    env = bench.environment()
    for key in ("gpu", "capability", "driver", "torch", "triton", "transformers", "date"):
        assert key in env
    assert env["torch"] == torch.__version__


def test_roofline_topic_is_registered_and_runs():
    assert "roofline" in benchmarks.topics()
    record = benchmarks.run_topic("roofline", {"copy_mib": 4, "matmul_n": 64, "repeat": 3})
    assert record["summary"]["copy_gbs"] > 0
    assert record["summary"]["matmul_tflops"]["fp32"] > 0
    assert record["environment"]["torch"] == torch.__version__
    with pytest.raises(ValueError, match="unknown topic"):
        benchmarks.run_topic("no_such_topic")


def test_format_table():
    text = bench.format_table([{"name": "a", "x": 1.23456}, {"name": "bb", "x": 2}])
    assert "name" in text.splitlines()[0] and "1.235" in text


def test_unsynchronised_time_is_a_host_clock():
    assert bench.unsynchronised_time(lambda: time.sleep(0.001), repeat=3) >= 0.001


def test_record_params_include_what_the_topic_used():
    record = benchmarks.run_topic("roofline", {"copy_mib": 2, "matmul_n": 32, "repeat": 2})
    assert record["params"]["matmul_n"] == 32 and record["params"]["repeat"] == 2

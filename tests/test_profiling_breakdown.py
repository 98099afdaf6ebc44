"""Where a profiled window of engine steps went (profiling.breakdown): shares that add up to one."""
import pytest

from course_kit.profiling import breakdown as B


def _x(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def engine_trace():
    """A 100 µs window, two steps. Step 0 (0..40): a product, a 4 µs gap, decode attention, the
    argmax; step 1 (50..90): a prefill chunk's varlen attention overlapping a copy on another
    stream, then an Inductor-fused norm."""
    launches = [_x("cuda_runtime", "cudaLaunchKernel", t, 1, correlation=c) for c, t in
                enumerate([1, 2, 3, 51, 52, 53], 1)]
    return {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        _x("user_annotation", "window", 0, 100),
        _x("user_annotation", "step 0", 0, 5), _x("user_annotation", "step 1", 50, 5), *launches,
        _x("kernel", "nvjet_sm90_tst_64x8_TNT", 10, 10, correlation=1, stream=7),
        _x("kernel", "_paged_decode_kernel", 24, 10, correlation=2, stream=7),
        _x("kernel", "reduce_kernel<ArgMaxOps<float>>", 34, 6, correlation=3, stream=7),
        _x("kernel", "_paged_varlen_kernel", 60, 20, correlation=4, stream=7),
        _x("gpu_memcpy", "Memcpy HtoD", 70, 20, correlation=5, stream=9),
        _x("kernel", "triton_red_fused_rms_norm_0", 90, 5, correlation=6, stream=7),
    ]}


def test_the_shares_add_up_to_the_window_and_land_where_the_time_went():
    out = B.breakdown(engine_trace())
    s = out["shares"]
    assert out["window_us"] == 100 and out["steps"] == 2
    assert sum(s.values()) == pytest.approx(1.0)
    assert s["matrix products"] == pytest.approx(0.10)
    assert s["attention, paged decode"] == pytest.approx(0.10)
    assert s["sampling"] == pytest.approx(0.06)
    assert s["other kernels"] == pytest.approx(0.05)
    # 60..90 busy (30 µs) shared by varlen (20 µs of kernel) and the copy (20 µs): 15 each
    assert s["attention, prefill"] == pytest.approx(0.15) and s["copies"] == pytest.approx(0.15)
    assert s["idle within steps (launch gaps)"] == pytest.approx(0.04)       # 20..24 in step 0
    assert s["idle between steps (host)"] == pytest.approx(1 - 0.10 - 0.10 - 0.06 - 0.05 - 0.30 - 0.04)


def test_kernel_kinds_by_name():
    assert B.kind_of("_merge_splits_kernel") == "attention, paged decode"
    assert B.kind_of("void cutlass::Kernel<sm90_gemm>") == "matrix products"
    assert B.kind_of("triton_poi_fused_silu_mul_0") == B.OTHER
    assert B.kind_of("Memset (Device)", "memset") == "copies"

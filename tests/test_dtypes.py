"""course_kit.dtypes against torch's own casts, torch.finfo, the published IEEE 754 / OCP fp8
tables and an exact rational round-to-nearest-even reference."""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from course_kit import dtypes
from course_kit.dtypes import ops

FLOATS = ["fp32", "tf32", "bf16", "fp16", "fp8_e4m3fn", "fp8_e5m2"]
TORCH_FLOATS = ["fp32", "bf16", "fp16", "fp8_e4m3fn", "fp8_e5m2"]

# Published limits: IEEE 754-2008 binary32/binary16, bfloat16 (Google/Intel), NVIDIA tf32,
# OCP 8-bit Floating Point Specification (OFP8) rev 1.0, table 1 (E4M3 and E5M2).
PUBLISHED = {
    "fp32": dict(max=3.4028234663852886e38, normal=2.0 ** -126, sub=2.0 ** -149, eps=2.0 ** -23),
    "tf32": dict(max=(2 - 2 ** -10) * 2.0 ** 127, normal=2.0 ** -126, sub=2.0 ** -136,
                 eps=2.0 ** -10),
    "bf16": dict(max=3.3895313892515355e38, normal=2.0 ** -126, sub=2.0 ** -133, eps=2.0 ** -7),
    "fp16": dict(max=65504.0, normal=2.0 ** -14, sub=2.0 ** -24, eps=2.0 ** -10),
    "fp8_e4m3fn": dict(max=448.0, normal=2.0 ** -6, sub=2.0 ** -9, eps=2.0 ** -3),
    "fp8_e5m2": dict(max=57344.0, normal=2.0 ** -14, sub=2.0 ** -16, eps=2.0 ** -2),
}


@pytest.mark.parametrize("name", FLOATS)
def test_limits_match_published_tables(name):
    f = dtypes.get_format(name)
    p = PUBLISHED[name]
    assert (f.max, f.smallest_normal, f.smallest_subnormal, f.eps) == \
        (p["max"], p["normal"], p["sub"], p["eps"])


@pytest.mark.parametrize("name", TORCH_FLOATS)
def test_limits_match_torch_finfo(name):
    f = dtypes.get_format(name)
    fi = torch.finfo(f.torch_dtype)
    assert (f.max, f.min, f.smallest_normal, f.eps, f.bits) == \
        (fi.max, fi.min, fi.smallest_normal, fi.eps, fi.bits)


def test_integer_ranges():
    assert (dtypes.FORMATS["int8"].min, dtypes.FORMATS["int8"].max) == \
        (torch.iinfo(torch.int8).min, torch.iinfo(torch.int8).max)
    assert (dtypes.FORMATS["int4"].min, dtypes.FORMATS["int4"].max) == (-8, 7)
    assert dtypes.FORMATS["fp8_e4m3fn"].has_inf is False


def test_unknown_format_names_the_choices():
    with pytest.raises(ValueError, match=r"'fp7'.*fp32.*int4"):
        dtypes.get_format("fp7")
    with pytest.raises(ValueError, match="fp7"):
        dtypes.classify(1.0, "fp7")


# ---------------------------------------------------------------------------------------------
# An independent oracle: exact round-to-nearest-even from the table (bits and bias) alone.
# ---------------------------------------------------------------------------------------------
def rne(x: float, name: str):
    """Exact RNE of x (float) into the format with an unbounded exponent above; returns the
    Fraction, or "overflow" when the rounded magnitude exceeds max."""
    f = dtypes.get_format(name)
    if x == 0:
        return Fraction(0)
    a = Fraction(abs(x))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, 1 - f.bias)                         # below the normal range: subnormal spacing
    ulp = Fraction(2) ** (e - f.mantissa_bits)
    v = round(a / ulp) * ulp                       # Fraction rounding is half to even
    if v > Fraction(f.max):
        return "overflow"
    return v if x > 0 else -v


def edge_values(name: str) -> list[float]:
    f = dtypes.get_format(name)
    mx, half_ulp = f.max, f.ulp_at_max / 2
    sub, normal, eps = f.smallest_subnormal, f.smallest_normal, f.eps
    vals = [mx, mx + half_ulp, mx + half_ulp * 1.5, mx + half_ulp * 0.5, mx * 4, sub, sub / 2,
            sub * 0.75, sub * 0.25, sub * 1.5, sub * 2.5, normal, normal - sub, normal - sub / 2,
            1.0, 1 + eps / 2, 1 + 1.5 * eps, 1 + eps / 4, 3.0, 0.1, 1 / 3, 0.0]
    return [v for v in vals if math.isfinite(v)] + [-v for v in vals if math.isfinite(v)]


def _f32(values):
    # float32-representable inputs: torch casts float64 -> float32 -> fp8/bf16, so values that
    # are exact in float32 avoid double rounding in the comparison with the exact oracle.
    out = [float(v) for v in torch.tensor(values, dtype=torch.float64).to(torch.float32)]
    return [v for v in out if math.isfinite(v)]


@pytest.mark.parametrize("name", FLOATS)
def test_rounding_matches_exact_rne_oracle(name):
    g = torch.Generator().manual_seed(0)
    f = dtypes.get_format(name)
    rand = (torch.randn(400, generator=g, dtype=torch.float64)
            * torch.exp2(torch.randint(-40, 40, (400,), generator=g).double())).tolist()
    values = _f32(edge_values(name) + rand) if name != "fp32" else edge_values(name)
    for x in values:
        r = dtypes.classify(x, name)
        want = rne(x, name)
        if want == "overflow":
            if f.has_inf:
                assert r.stored == math.copysign(math.inf, x) and r.outcome == "overflow to inf"
            else:   # e4m3fn: saturation (since pytorch#178817, torch 2.13) or NaN (torch 2.11 and before)
                assert r.outcome in ("saturated", "NaN")
                assert r.stored == math.copysign(f.max, x) or math.isnan(r.stored)
        else:
            assert Fraction(r.stored) == want, (name, x, r)


@pytest.mark.parametrize("name", TORCH_FLOATS)
def test_stored_value_and_bits_equal_torch_cast(name):
    f = dtypes.get_format(name)
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(2000, generator=g) * 10.0 ** torch.randint(-12, 12, (2000,),
                                                                         generator=g),
                   torch.tensor(edge_values(name) if name != "fp32" else [1.0],
                                dtype=torch.float32),
                   torch.tensor([math.inf, -math.inf, math.nan, 470.0, 1e30, -1e30])])
    y = x.to(f.torch_dtype)                       # the oracle: torch's own cast from fp32
    ours = dtypes.round_to(x, name)
    theirs = y.to(torch.float64)
    assert torch.equal(ours.isnan(), theirs.isnan())
    assert torch.equal(ours[~ours.isnan()], theirs[~theirs.isnan()])
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[f.bits // 8]
    want_bits = y.view(view).to(torch.int64) & ((1 << f.bits) - 1)
    assert torch.equal(dtypes.to_bits(x, name), want_bits)


def test_e4m3fn_beyond_448_is_what_torch_does():
    """Determined by running torch: the outcome mirrors torch's own cast on this version."""
    for x in [449.0, 464.0, 465.0, 480.0, 500.0, 1e4, 1e30, math.inf, -500.0, -math.inf]:
        torch_val = float(torch.tensor([x], dtype=torch.float32).to(torch.float8_e4m3fn).float())
        r = dtypes.classify(x, "fp8_e4m3fn")
        assert r.stored == torch_val or (math.isnan(r.stored) and math.isnan(torch_val))
        if abs(x) <= 464:              # ties to even at the top: 464 -> 448 (mantissa 110 even)
            assert r.stored == math.copysign(448.0, x) and r.outcome == "rounded"
        elif math.isnan(torch_val):
            assert r.outcome == "NaN"
        else:
            assert torch_val == math.copysign(448.0, x) and r.outcome == "saturated"
    assert math.isnan(dtypes.classify(math.nan, "fp8_e4m3fn").stored)
    assert dtypes.decompose(math.nan, "fp8_e4m3fn").bits[1:] == "1111111"


@pytest.mark.parametrize("name,x,outcome", [
    ("fp16", 65504.0, "exact"), ("fp16", 65519.0, "rounded"), ("fp16", 65520.0, "overflow to inf"),
    ("fp16", 2.0 ** -24, "underflow to subnormal"), ("fp16", 2.0 ** -25, "flushed to zero"),
    ("fp16", 1.5 * 2.0 ** -25, "underflow to subnormal"), ("fp16", 1 + 2.0 ** -11, "rounded"),
    ("bf16", 1e39, "overflow to inf"), ("bf16", 1e-40, "underflow to subnormal"),
    ("bf16", 1e-46, "flushed to zero"), ("fp8_e5m2", 61440.0, "overflow to inf"),
    ("fp8_e5m2", 61439.0, "rounded"), ("fp8_e4m3fn", 2.0 ** -10, "flushed to zero"),
    ("fp8_e4m3fn", 3 * 2.0 ** -11, "underflow to subnormal"), ("fp32", 1e40, "overflow to inf"),
    ("fp32", math.inf, "exact"), ("fp8_e5m2", -math.inf, "exact"), ("fp16", math.nan, "NaN"),
    ("tf32", 1 + 2.0 ** -11, "rounded"), ("tf32", 3.402e38, "overflow to inf"), ("tf32", 3.4e38, "rounded"),
    ("int8", 127.4, "rounded"), ("int8", 127.5, "saturated"), ("int8", -128.5, "rounded"),
    ("int8", 0.4, "flushed to zero"), ("int4", 7.5, "saturated"), ("int4", -8.0, "exact"),
    ("int8", 2.5, "rounded"), ("int8", -1e40, "saturated"),
])
def test_outcome_table(name, x, outcome):
    assert dtypes.classify(x, name).outcome == outcome


def test_ties_to_even():
    assert dtypes.classify(1 + 2.0 ** -8, "bf16").stored == 1.0                  # tie -> even
    assert dtypes.classify(1 + 3 * 2.0 ** -8, "bf16").stored == 1 + 2.0 ** -6    # tie -> even
    assert dtypes.classify(1 + 2.0 ** -11, "tf32").stored == 1.0
    assert dtypes.classify(1 + 3 * 2.0 ** -11, "tf32").stored == 1 + 2.0 ** -9
    assert dtypes.classify(2.5, "int8").stored == 2.0 and dtypes.classify(3.5, "int8").stored == 4


@pytest.mark.parametrize("bits,lo,hi", [(8, -128, 127), (4, -8, 7)])
def test_integers_match_fake_quantize(bits, lo, hi):
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.randn(500, generator=g) * 60, torch.arange(-140, 140) + 0.5])
    want = torch.fake_quantize_per_tensor_affine(x, 1.0, 0, lo, hi).double()
    assert torch.equal(dtypes.round_to(x, f"int{bits}"), want)


def test_relative_error_and_decompose():
    r = dtypes.classify(0.1, "bf16")
    assert r.rel_error == pytest.approx(abs(r.stored - 0.1) / 0.1)
    assert dtypes.decompose(1.0, "fp32").bits == "0" + "01111111" + "0" * 23
    f = dtypes.decompose(-2.0, "bf16")
    assert (f.sign, f.exponent, f.mantissa) == ("1", "10000000", "0000000")
    assert dtypes.decompose(448.0, "fp8_e4m3fn").bits == "01111110"
    assert dtypes.decompose(-1.0, "int8").bits == "11111111"
    assert dtypes.decompose(1.0, "tf32").bits == "0" + "01111111" + "0" * 10
    with pytest.raises(ValueError, match="NaN"):
        dtypes.classify(math.nan, "int8")


# ---------------------------------------------------------------------------------------------
# Quantisation
# ---------------------------------------------------------------------------------------------
def _weights():
    g = torch.Generator().manual_seed(3)
    # rows with very different scales: per-channel scales should help
    return torch.randn(16, 64, generator=g) * torch.logspace(-2, 1, 16).unsqueeze(1)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_per_tensor_matches_fake_quantize(bits):
    x = _weights()
    qmin, qmax = dtypes.qrange(bits)
    for sym in (True, False):
        r = dtypes.quantize(x, bits, symmetric=sym)
        want = torch.fake_quantize_per_tensor_affine(x, float(r.scale), int(r.zero_point),
                                                     qmin, qmax)
        torch.testing.assert_close(r.dequant, want, rtol=0, atol=1e-6 * float(r.scale))
        assert int(r.q.min()) >= qmin and int(r.q.max()) <= qmax


@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_per_channel_matches_fake_quantize(bits):
    x = _weights()
    qmin, qmax = dtypes.qrange(bits)
    for sym in (True, False):
        r = dtypes.quantize(x, bits, symmetric=sym, axis=0)
        want = torch.fake_quantize_per_channel_affine(x, r.scale, r.zero_point.to(torch.int32),
                                                      0, qmin, qmax)
        torch.testing.assert_close(r.dequant, want, rtol=0, atol=1e-6 * float(r.scale.max()))


def test_quantisation_errors_order():
    x = _weights()
    e = {(b, ax): dtypes.quantize(x, b, axis=ax).rel_error for b in (8, 4) for ax in (None, 0)}
    assert e[(8, 0)] < e[(8, None)] and e[(4, 0)] < e[(4, None)]
    assert e[(8, None)] < e[(4, None)]
    # symmetric int8 error bound: half a step per value
    r = dtypes.quantize(x, 8)
    assert r.max_abs_error <= float(r.scale) / 2 * (1 + 1e-6)
    # zero is stored exactly, also asymmetric
    z = torch.tensor([0.0, 0.3, 1.7, 2.0])
    assert float(dtypes.quantize(z, 4, symmetric=False).dequant[0]) == 0.0


def test_quantize_bad_input():
    with pytest.raises(ValueError, match="bits must be 4 or 8"):
        dtypes.quantize(torch.ones(3), bits=3)
    with pytest.raises(ValueError, match="axis 2"):
        dtypes.quantize(torch.ones(3, 3), axis=2)
    with pytest.raises(ValueError, match="inf or NaN"):
        dtypes.quantize(torch.tensor([1.0, math.nan]))


# ---------------------------------------------------------------------------------------------
# Operations in low precision
# ---------------------------------------------------------------------------------------------
def test_fp16_overflows_where_bf16_does_not():
    assert ops.evaluate("exp", 12.0, "fp16").outcome == "overflow to inf"
    assert ops.evaluate("exp", 12.0, "bf16").outcome in ("ok", "lost precision")
    assert math.isfinite(ops.evaluate("exp", 12.0, "bf16").value)
    assert ops.evaluate("square", 300.0, "fp16").outcome == "overflow to inf"
    assert ops.evaluate("square", 300.0, "bf16").rel_error < 0.01
    assert ops.evaluate("softmax", 30.0, "fp16", n=16).outcome == "NaN"
    assert ops.evaluate("softmax", 30.0, "fp32", n=16).outcome == "ok"


def test_bf16_loses_precision_that_fp16_keeps():
    # 256 + 1 = 257 needs 9 significant bits; bf16 has 8, so the running sum stops at 256
    assert ops.evaluate("sum", 1.0, "bf16", n=1000).value == 256.0
    assert ops.evaluate("sum", 1.0, "fp16", n=1000).value == 1000.0
    assert ops.evaluate("sum", 1.0, "bf16", n=1000).outcome == "lost precision"
    # the float64 reference
    assert ops.evaluate("exp", 3.0, "fp32").reference == pytest.approx(math.exp(3.0), rel=1e-15)


def test_op_curves_and_bad_input():
    grid, errs = ops.curve("exp", "fp16")
    overflowed = [g for g, e in zip(grid, errs) if math.isinf(e)]
    assert min(overflowed) == pytest.approx(11.5)        # first grid point past log(65504)
    ks, errs = ops.curve("sum", "bf16", x=1.0, n=300)
    assert errs[255] == 0 and errs[299] > 0
    with pytest.raises(ValueError, match="unknown operation 'cube'"):
        ops.evaluate("cube", 1.0, "fp16")
    with pytest.raises(ValueError, match="fp8_e4m3fn"):
        ops.evaluate("exp", 1.0, "fp8_e4m3fn")
    with pytest.raises(ValueError, match="n must be"):
        ops.evaluate("sum", 1.0, "fp16", n=0)


# ---------------------------------------------------------------------------------------------
# The matmul-by-dtype benchmark
# ---------------------------------------------------------------------------------------------
def test_bench_dtypes_cpu_smoke():
    from course_kit.benchmarks import dtypes as bd
    out = bd.run({"size": "smoke", "device": "cpu", "n": 64, "repeat": 2,
                  "variants": ["fp32", "bf16", "int8", "fp8"]})
    rows = {r["variant"]: r for r in out["results"]}
    assert set(rows) == {"fp32", "bf16", "int8", "fp8"}
    for key in ("fp32", "bf16", "int8"):
        assert rows[key]["tflops"] > 0 and rows[key]["rel_error_vs_fp64"] <= bd.TOLERANCE[key]
    assert out["summary"]["bf16_over_fp32"] == pytest.approx(
        rows["bf16"]["tflops"] / rows["fp32"]["tflops"])


def test_bench_check_catches_a_wrong_kernel(monkeypatch):
    from course_kit.benchmarks import dtypes as bd
    broken = bd.Variant("bf16", "bf16", lambda a, b: (a @ b) * 1.05)
    monkeypatch.setitem(bd.VARIANTS, "bf16", broken)
    with pytest.raises(AssertionError, match="relative error"):
        bd.check_variant("bf16", "cpu", n=64)


@pytest.mark.gpu
def test_gpu_every_matmul_variant_is_correct():
    from course_kit import device
    from course_kit.benchmarks import dtypes as bd
    for key in bd.VARIANTS:
        reason = bd._supported(key, "cuda")
        if reason is None:
            assert bd.check_variant(key, "cuda", n=1024) <= bd.TOLERANCE[key]
    if device.capabilities().fp8:
        assert bd._supported("fp8_fast", "cuda") is None


@pytest.mark.gpu
def test_gpu_cast_equals_cpu_cast():
    """The explorer rounds on the CPU; CUDA's casts must agree inside every format's range.
    Beyond fp8 e4m3fn's max, torch versions differ (NaN or saturation): reported, not failed."""
    import warnings
    for name in TORCH_FLOATS:
        f = dtypes.get_format(name)
        x = torch.tensor(_f32(edge_values(name)) if name != "fp32" else [1.0, 3.0, 0.1])
        inside = x.abs() <= f.max
        cpu = x.to(f.torch_dtype).double()
        gpu = x.cuda().to(f.torch_dtype).double().cpu()
        assert torch.equal(cpu[inside], gpu[inside]), name
        out = x[~inside]
        if out.numel():
            c, g = cpu[~inside], gpu[~inside]
            same = (c == g) | (c.isnan() & g.isnan())
            if not bool(same.all()):
                warnings.warn(f"{name}: CUDA and CPU casts differ beyond max for "
                              f"{out[~same].tolist()}: cpu {c[~same].tolist()} "
                              f"cuda {g[~same].tolist()}")


@pytest.mark.gpu
def test_gpu_e4m3_overflow_mode_is_the_cpu_one():
    """fp8_overflow reads the behaviour beyond 448 from a CPU cast (notebook 01 says which torch does
    what). On the H200, record whether CUDA's cast does the same: the notebook's sentence is about
    PyTorch's cast in general, so a difference must fail here and be worded there."""
    from course_kit.dtypes import fp8_overflow
    x = torch.tensor([448.0, 464.0, 465.0, 480.0, 1e4, -1e4, math.inf, -math.inf])
    cpu = fp8_overflow.torch_e4m3(x)
    gpu = x.cuda().to(torch.float8_e4m3fn).float().cpu()
    assert torch.equal(cpu.isnan(), gpu.isnan()) and torch.equal(cpu.nan_to_num(), gpu.nan_to_num()), (
        f"torch {torch.__version__}: CPU {cpu.tolist()} against CUDA {gpu.tolist()}")

"""Notebooks 00-03's exercises: the instructor's solutions (taken from the notebook sources) pass, near
misses fail with a one-line message that never shows the expected value, and a wrong type or dtype
is named. One case goes through the out-of-process judge, as grading does.

00.decode_batch, 01.overflow_point, 02.rescue_scale, 03.recompiles: predict -> measure -> explain.
01.fp8_round, 02.unscale_clip: implement what the notebook did not show (oracles: torch's fp8 cast,
torch's GradScaler + clip_grad_norm_). 01.predict_overflow, 01.memory, 03.fullgraph: as before.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from grading_fixtures import fails as _fails, judge_verdicts, solution_namespace as _solution
import torch

from course_kit import grading, nbbuild
from course_kit.dtypes import fp8_overflow
from course_kit.grading.checks import nb01, nb02, nb03, registry

HIDDEN = Path(nbbuild.PROJECT) / "instructor" / "hidden_checks"
registry.load_hidden(HIDDEN, {"01", "02"})


# ---- 00.decode_batch ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sol00():
    return _solution("00_start_here.py", "00.decode_batch",
                     "from course_kit import device, roofline\n")


def test_00_solution_passes_and_near_misses_fail(sol00):
    grading.check("00.decode_batch", sol00["PREDICTED_BATCH"], sol00["BATCH"], sol00["FP8"])
    b = sol00["BATCH"]
    assert b == registry.key("00.decode_batch")["batch"] and b != round(989.5e3 / 4800)   # not the ridge itself
    _fails("00.decode_batch", 0, b - 1, "B", says="still memory-bound", hides=(b,))   # one batch too small
    _fails("00.decode_batch", 0, b + 1, "B", says="not the smallest", hides=(b,))
    _fails("00.decode_batch", 0, b, "A", says="FP8")
    msg = _fails("00.decode_batch", 0, b + 1, "E", says="not the smallest")     # every wrong field at once
    assert "FP8: expected one of" in msg
    _fails("00.decode_batch", 0, float(b), "B", says="expected an int, found a value of type float")
    _fails("00.decode_batch", None, b, "B", says="PREDICTED_BATCH")          # the prediction is required


# ---- 01.fp8_round -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fp8():
    return _solution("01_dtypes_and_overflow.py", "01.fp8_round",
                     "import math\nimport torch\nfrom course_kit.dtypes import fp8_overflow\n")["round_to_e4m3"]


# The two behaviours of torch's e4m3fn cast beyond 448 (dtypes/fp8_overflow.py): the exercise, its
# check and the hidden check must be right on both, whichever torch runs the tests.
BEHAVIOURS = {"saturating": fp8_overflow.saturating_e4m3, "non-saturating": fp8_overflow.non_saturating_e4m3}


@pytest.fixture(params=sorted(BEHAVIOURS))
def behaviour(request, monkeypatch):
    """Make the course (oracle and fp8_overflow.saturates) see one behaviour of torch's cast."""
    monkeypatch.setattr(fp8_overflow, "torch_e4m3", BEHAVIOURS[request.param])
    return request.param


def test_fp8_behaviours_are_what_they_say():
    x = torch.tensor([448.0, 464.0, 464.00003, 465.0, 1e4, -1e4, math.inf, -math.inf, math.nan, 1.0625])
    sat, non = fp8_overflow.saturating_e4m3(x), fp8_overflow.non_saturating_e4m3(x)
    assert sat[:8].tolist() == [448.0, 448.0, 448.0, 448.0, 448.0, -448.0, 448.0, -448.0]
    assert non[:2].tolist() == [448.0, 448.0] and bool(non[2:9].isnan().all())
    assert sat[8].isnan() and sat[9] == non[9] == 1.0            # NaN stays NaN; ties to even below
    # the running torch is one of the two, bit for bit
    mine = fp8_overflow.torch_e4m3(x)
    other = sat if fp8_overflow.saturates() else non
    assert torch.equal(mine.isnan(), other.isnan()) and torch.equal(mine.nan_to_num(), other.nan_to_num())


def test_fp8_overflow_mode_reads_the_cast(behaviour):
    assert fp8_overflow.overflow_mode() == ("saturate" if behaviour == "saturating" else "nan")


def _half_up(x):                       # rounds ties away from zero: the classic near miss
    a = x.abs().to(torch.float64).clamp(max=1e4)
    _, e = torch.frexp(a)
    step = torch.exp2((e - 1).clamp(min=-6).to(torch.float64) - 3)
    q = (torch.floor(a / step + 0.5) * step).clamp(max=448.0)
    return torch.where(torch.isnan(x), x, torch.where(torch.signbit(x), -q, q).to(torch.float32))


def test_01_fp8_round_solution_passes_public_and_hidden(fp8, behaviour):
    grading.check("01.fp8_round", fp8)
    grading.check("01.fp8_round_hidden", fp8)


@pytest.mark.parametrize("name", ["half_up", "one_ulp", "no_subnormals", "other_top", "lost_zero_sign"])
def test_01_fp8_round_near_misses_fail(fp8, behaviour, name):
    def one_ulp(x):                     # one value one e4m3 step off
        y = fp8(x).clone()
        y[1] = 1.25 if y[1] == 1.125 else 1.125
        return y

    def no_subnormals(x):               # flushes everything below the smallest normal
        y = fp8(x)
        return torch.where(y.abs() < 2.0 ** -6, torch.zeros_like(y), y)

    def other_top(x):                   # the other torch's behaviour beyond 464, hard-coded
        other = BEHAVIOURS["non-saturating" if behaviour == "saturating" else "saturating"]
        return torch.where(x.abs() > 464, other(x), fp8(x))

    def lost_zero_sign(x):
        return fp8(x).abs() * torch.sign(x).where(x != 0, torch.ones_like(x))

    near = {"half_up": _half_up, "one_ulp": one_ulp, "no_subnormals": no_subnormals,
            "other_top": other_top, "lost_zero_sign": lost_zero_sign}[name]
    _fails("01.fp8_round", near, says="values")
    _fails("01.fp8_round_hidden", near) if name in ("half_up", "no_subnormals", "other_top") else None


def test_01_fp8_round_hard_coded_saturation_fails_on_the_old_torch(monkeypatch):
    """The old solution (clamp to 448 whatever torch does) is exactly what issue 41 found wrong."""
    def clamps_always(x):
        a = x.abs().to(torch.float64).clamp(max=1e4)
        _, e = torch.frexp(a)
        step = torch.exp2((e - 1).clamp(min=-6).to(torch.float64) - 3)
        q = (torch.round(a / step) * step).clamp(max=448.0)
        return torch.where(torch.isnan(x), x, torch.where(torch.signbit(x), -q, q).to(torch.float32))
    monkeypatch.setattr(fp8_overflow, "torch_e4m3", fp8_overflow.saturating_e4m3)
    grading.check("01.fp8_round", clamps_always)
    monkeypatch.setattr(fp8_overflow, "torch_e4m3", fp8_overflow.non_saturating_e4m3)
    _fails("01.fp8_round", clamps_always, says="values")


def test_01_fp8_round_names_the_dtype_and_refuses_torch_fp8(fp8):
    msg = _fails("01.fp8_round", lambda x: fp8(x).to(torch.float64), says="dtype is wrong")
    assert "torch.float64" in msg

    def uses_torch(x):
        return x.to(torch.float8_e4m3fn).float()
    _fails("01.fp8_round", uses_torch, says="float8")


# ---- 01.predict_overflow ------------------------------------------------------------------------

def test_01_predict_overflow():
    from course_kit import dtypes
    sol = _solution("01_dtypes_and_overflow.py", "01.predict_overflow")["predictions"]
    grading.check("01.predict_overflow", sol)
    assert sol == {c: dtypes.classify(*c).outcome for c in nb01.OVERFLOW_CASES}
    near = dict(sol)
    near[(3e-8, "fp16")] = "flushed to zero"                          # one element
    msg = _fails("01.predict_overflow", near, says="1 of 12")
    assert "underflow to subnormal" not in msg
    _fails("01.predict_overflow", {**sol, (8.0, "int4"): "clamped"}, says="is not one of")


def test_01_predict_overflow_asks_nothing_the_notebook_shows():
    """No case is among the values of the edge-case table, the explorer's read-back or the e4m3fn list."""
    src = (nbbuild.SOURCES / "01_dtypes_and_overflow.py").read_text().split("## Exercises")[0]
    shown = {1.0, 0.1, 1 + 2 ** -8, 300.0, 464.0, 500.0, 65520.0, 1e5, 1e39, 1e-6, 1e-8, 1e-40,
             448.0, 465.0, 480.0, 1e4, -1e4, 7e4}
    assert "probe = [1.0, 0.1, 1 + 2 ** -8, 300.0, 464.0, 500.0, 65520.0, 1e5, 1e39, 1e-6, 1e-8, 1e-40]" in src
    assert not [c for c in nb01.OVERFLOW_CASES if c[0] in shown]


# ---- 01.overflow_point --------------------------------------------------------------------------

def test_01_overflow_point():
    sol = _solution("01_dtypes_and_overflow.py", "01.overflow_point", "import math\nimport torch\n")
    args = (sol["PREDICTION"], sol["X_AFTER"], sol["X_BEFORE"], sol["CULPRIT"])
    grading.check("01.overflow_point", *args)
    assert (sol["X_AFTER"], sol["X_BEFORE"]) == (32.0, 90.5)           # 64 x^2 and 8 x^2 pass 65520
    below = 31.984375                                                  # one fp16 ulp below 32
    _fails("01.overflow_point", args[0], below, args[2], "B", says="still finite", hides=(32,))
    _fails("01.overflow_point", args[0], 64.0, args[2], "B", says="a smaller fp16 x")
    _fails("01.overflow_point", args[0], args[1], 90.5 * 1.01, "B", says="not a positive finite fp16 value")
    _fails("01.overflow_point", args[0], args[1], args[2], "AB", says="CULPRIT: expected one of")
    _fails("01.overflow_point", None, args[1], args[2], "B", says="PREDICTION")


# ---- 01.memory ----------------------------------------------------------------------------------

def test_01_memory_in_gib():
    sol = _solution("01_dtypes_and_overflow.py", "01.memory")
    answers = [sol["n_params"], sol["weights_gib"], sol["adam_gib"], sol["kv_gib"]]
    grading.check("01.memory", *answers)
    assert sol["n_params"] == registry.key("01.memory")["n_params"] == 7_615_616_512   # Qwen2.5-7B's published count
    assert abs(sol["kv_gib"] - 7.0) < 1e-9                              # 7 GiB exactly, not 7.516 GB
    no_bias = answers[0] - 28 * (3584 + 2 * 4 * 128)
    _fails("01.memory", no_bias, *[a * no_bias / answers[0] for a in answers[1:3]], answers[3],
           says="every bias", hides=(f"{answers[0]:,}", str(answers[0])))
    for i in range(4):
        near = list(answers)
        near[i] = near[i] + 1 if i == 0 else near[i] * 1.01            # one parameter, or 1%
        _fails("01.memory", *near, hides=(f"{answers[i]:.3f}",) + ((f"{answers[i]:,}", str(answers[i])) if i == 0 else ()))
    gb = [answers[0]] + [a * 2 ** 30 / 1e9 for a in answers[1:]]      # GB instead of GiB
    _fails("01.memory", *gb, says="weights_gib", hides=(f"{answers[1]:.4g}",))


# ---- 02.rescue_scale ----------------------------------------------------------------------------

def test_02_rescue_scale():
    sol = _solution("02_amp_and_gradscaler.py", "02.rescue_scale",
                    "import torch\nfrom course_kit import amp\nfrom course_kit.models import tiny_gpt\n")
    k = sol["LOG2_SCALE"]
    grading.check("02.rescue_scale", sol["PREDICTED_LOG2"], k, sol["DOUBLED"])
    assert k == registry.key("02.rescue_scale")["log2"] and 0 < k < 20
    _fails("02.rescue_scale", 0, k - 1, "C", says="still zero or subnormal", hides=(f"2**{k}",))
    _fails("02.rescue_scale", 0, k + 1, "C", says="not the smallest", hides=(f"2**{k},",))
    _fails("02.rescue_scale", 0, k, "B", says="DOUBLED")
    _fails("02.rescue_scale", 0, float(k), "C", says="expected an int")


# ---- 02.unscale_clip ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clip():
    return _solution("02_amp_and_gradscaler.py", "02.unscale_clip", "import torch\n")["unscale_and_clip"]


def test_02_unscale_clip_solution_passes(clip):
    grading.check("02.unscale_clip", clip)
    grading.check("02.unscale_clip_hidden", clip)


def test_02_unscale_clip_near_misses(clip):
    def norm(gs):
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs]))

    def clip_before_unscale(grads, scale, max_norm):      # the classic mistake: clips the scaled norm
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            return None
        c = torch.clamp(max_norm / (norm(grads) + 1e-6), max=1.0)
        return [g * c / scale for g in grads]

    def no_clamp(grads, scale, max_norm):                  # scales small gradients up
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            return None
        gs = [g / scale for g in grads]
        return [g * (max_norm / (norm(gs) + 1e-6)) for g in gs]

    def no_epsilon(grads, scale, max_norm):                # off by the 1e-6 of clip_grad_norm_
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            return None
        gs = [g / scale for g in grads]
        return [g * torch.clamp(max_norm / norm(gs), max=1.0) for g in gs]

    def per_tensor(grads, scale, max_norm):                # clips each gradient by its own norm
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            return None
        gs = [g / scale for g in grads]
        return [g * torch.clamp(max_norm / (norm([g]) + 1e-6), max=1.0) for g in gs]

    def never_skips(grads, scale, max_norm):
        return clip([torch.nan_to_num(g, posinf=0.0) for g in grads], scale, max_norm)

    def one_percent(grads, scale, max_norm):
        out = clip(grads, scale, max_norm)
        return None if out is None else [g * 1.01 for g in out]

    _fails("02.unscale_clip", clip_before_unscale, says="values are wrong")
    _fails("02.unscale_clip", no_clamp, says="already within max_norm")
    _fails("02.unscale_clip", no_epsilon, says="values are wrong")
    _fails("02.unscale_clip", per_tensor, says="values are wrong")
    _fails("02.unscale_clip", never_skips, says="must be skipped")
    _fails("02.unscale_clip", one_percent, says="values are wrong")
    for near in (clip_before_unscale, no_clamp, per_tensor, never_skips, one_percent):
        _fails("02.unscale_clip_hidden", near)
    msg = _fails("02.unscale_clip", lambda g, s, m: [t.double() for t in clip(g, s, m)] if clip(g, s, m) else None,
                 says="dtype is wrong")
    assert "torch.float64" in msg


def test_02_unscale_clip_oracle_is_torch():
    """The oracle itself: torch's GradScaler skips a step with inf, and clip_grad_norm_ leaves a small
    gradient alone."""
    g = [torch.tensor([3.0, 4.0]) * 1024]
    assert torch.equal(nb02.torch_unscale_clip(g, 1024.0, 10.0)[0], torch.tensor([3.0, 4.0]))
    assert torch.allclose(nb02.torch_unscale_clip(g, 1024.0, 1.0)[0], torch.tensor([0.6, 0.8]), rtol=1e-5)
    assert nb02.torch_unscale_clip([torch.tensor([math.inf])], 2.0, 1.0) is None


# ---- 03.recompiles and 03.fullgraph -------------------------------------------------------------

def test_03_recompiles():
    src = (nbbuild.SOURCES / "03_torch_compile_modes.py").read_text()
    import inspect
    body = inspect.getsource(nb03.two_graphs).split('"""', 2)[2]       # the notebook's function, unchanged
    assert body.strip() in src and repr(nb03.SHAPES) in src
    sol = _solution("03_torch_compile_modes.py", "03.recompiles",
                    "import torch\nfrom course_kit import compile_modes as cm\n"
                    "from course_kit.grading.checks.nb03 import SHAPES, two_graphs\n")
    per_call, static = sol["PER_CALL"], sol["STATIC_TOTAL"]
    grading.check("03.recompiles", sol["PREDICTED"], per_call, static, sol["WHY"])
    assert per_call[4] > 0 and sum(per_call) < static                  # the recompile the exercise asks about
    near = list(per_call)
    near[4] = 0                                                         # one element
    msg = _fails("03.recompiles", sol["PREDICTED"], near, static, "A", says="call 5")
    assert str(per_call) not in msg
    _fails("03.recompiles", sol["PREDICTED"], per_call, static + 1, "A", says="STATIC_TOTAL", hides=(static,))
    _fails("03.recompiles", sol["PREDICTED"], per_call, static, "E", says="WHY: expected one of")
    _fails("03.recompiles", sol["PREDICTED"], per_call[:-1], static, "A", says="expected 6 numbers")


def test_03_fullgraph():
    fixed = _solution("03_torch_compile_modes.py", "03.fullgraph", "import torch\n")["fixed"]
    grading.check("03.fullgraph", fixed)
    _fails("03.fullgraph", lambda x, w: fixed(x, w) * 1.01, says="values are wrong")
    _fails("03.fullgraph", nb03.reference, says="fullgraph")


# ---- hints, and the judge -------------------------------------------------------------------------

IDS = ["00.decode_batch", "01.fp8_round", "01.predict_overflow", "01.overflow_point", "01.memory",
       "02.rescue_scale", "02.unscale_clip", "03.fullgraph", "03.recompiles"]


def test_every_exercise_of_00_03_has_its_own_hint_and_is_in_a_notebook(capsys):
    hints = set()
    for i in IDS:
        grading.hint(i)
        out = capsys.readouterr().out
        assert out.startswith(f"Hint for {i}: ") and "no hint" not in out
        hints.add(out.split(": ", 1)[1])
    assert len(hints) == len(IDS)
    ids = {i for s in ("00_start_here", "01_dtypes_and_overflow", "02_amp_and_gradscaler", "03_torch_compile_modes")
           for c in nbbuild.build(nbbuild.SOURCES / f"{s}.py")["cells"]
           if (i := (c["metadata"].get("course_kit") or {}).get("exercise"))}
    assert ids == set(IDS)
    assert {i for i in registry.SPECS if i[:2] in ("00", "01", "02", "03") and "hidden" not in i} >= set(IDS)


def test_fp8_round_goes_through_the_out_of_process_judge(fp8, tmp_path, monkeypatch):
    """As grading does: the judge prepares the cases, the notebook side records the answer as data,
    and the judge (another process, where no learner code runs) gives the verdict."""
    verdicts = judge_verdicts("01.fp8_round", dict((("solution", fp8), ("half_up", _half_up))), tmp_path, monkeypatch)
    assert verdicts["solution"]["status"] == "passed", verdicts
    assert verdicts["half_up"]["status"] == "failed" and "edge cases" in verdicts["half_up"]["message"]

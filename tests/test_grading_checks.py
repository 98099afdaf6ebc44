"""Every checker: the instructor's answer passes, and a near miss fails (off by a little: 1%, one
ulp where exactness matters, one element), with a short message that never shows the expected value.

Answers are written here, independently of the notebooks, and run through `grading.check` exactly
as a learner's notebook does (answer -> data -> checker).
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from course_kit import grading
from course_kit.grading.checks import registry

HIDDEN = Path(__file__).resolve().parents[1] / "instructor" / "hidden_checks"
registry.load_hidden(HIDDEN)


def _fails(exercise_id, *values, says=None):
    with pytest.raises(grading.CheckFailed) as info:
        grading.check(exercise_id, *values)
    msg = info.value.message
    if says:
        assert says in msg, msg
    assert "\n" not in msg and len(msg) < 400
    return msg


def _passes(exercise_id, *values):
    grading.check(exercise_id, *values)


# ---- answers ------------------------------------------------------------------------------------

def attainable(i, bw, peak):
    return min(peak, i * bw / 1e3)


def round_to_bf16(x):
    bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    rounded = torch.where(torch.isnan(x), bits | 0x00400000, rounded)
    return torch.where(rounded >= 2 ** 31, rounded - 2 ** 32, rounded).to(torch.int32).view(torch.float32)


def one_ulp_off(x):
    y = round_to_bf16(x).clone()
    i = int(torch.isfinite(y).nonzero()[3])
    y[i] = torch.nextafter(y[i], torch.tensor(float("inf")))
    return y


def predictions():
    from course_kit import dtypes
    from course_kit.grading.checks.nb01 import OVERFLOW_CASES
    return {c: dtypes.classify(*c).outcome for c in OVERFLOW_CASES}


def memory_answers():
    L, h, heads, kv, inter, vocab = 32, 4096, 32, 8, 14336, 128256
    d = h // heads
    n = L * (2 * h * h + 2 * h * kv * d + 3 * h * inter + 2 * h) + 2 * vocab * h + h
    return [n, n * 2 / 1e9, n * 16 / 1e9, 2 * L * kv * d * 8192 * 4 * 2 / 1e9]


def scaler_update(scale, tracker, found_inf, growth, backoff, interval):
    import numpy as np
    with np.errstate(over="ignore"):
        if found_inf:
            return float(np.float32(scale * backoff)), 0
        tracker += 1
        if tracker == interval:
            grown = float(np.float32(scale * growth))
            return (grown if np.isfinite(grown) else scale), 0
        return scale, tracker


def fixed(x, w):
    h = torch.relu(x @ w)
    m = h.mean()
    return torch.where(m > 1.0, h / m, h) @ w.T


class Exportable(torch.nn.Module):
    def forward(self, x):
        peak = x.abs().amax()
        return torch.cond(peak > 1.0, lambda t, p: t / p, lambda t, p: t * 2, (x, peak))


class ExportableNearMiss(torch.nn.Module):   # a peak of exactly 1 takes the wrong branch
    def forward(self, x):
        peak = x.abs().amax()
        return torch.where(peak >= 1.0, x / peak, x * 2)


def ratios(rows, scale=1.0):
    peer = next(r["throughput_tok_s"] for r in rows if r["name"] == "HF generate")
    return {r["name"]: r["throughput_tok_s"] / peer * scale for r in rows if "throughput_tok_s" in r}


# ---- tests --------------------------------------------------------------------------------------

def test_00_attainable():
    _passes("00.attainable", attainable)
    _fails("00.attainable", lambda i, b, p: attainable(i, b, p) * 1.01, says="not within")
    _fails("00.attainable", lambda i, b, p: i * b / 1e3)          # forgets the peak


def test_01_bf16_round_and_hidden():
    _passes("01.bf16_round", round_to_bf16)
    _passes("01.bf16_round_hidden", round_to_bf16)
    _fails("01.bf16_round", one_ulp_off, says="values are wrong")
    _fails("01.bf16_round_hidden", one_ulp_off)
    msg = _fails("01.bf16_round", lambda x: round_to_bf16(x).view(torch.int32), says="dtype is wrong")
    assert "torch.int32" in msg
    _fails("01.bf16_round", lambda x: x.to(torch.bfloat16).float(), says="uses torch.bfloat16")


def test_01_predict_overflow():
    p = predictions()
    _passes("01.predict_overflow", p)
    p[(300.0, "int8")] = "rounded"                                  # one element
    msg = _fails("01.predict_overflow", p, says="1 of 12")
    assert "expected" not in msg
    assert "saturated" not in msg


def test_01_memory():
    answers = memory_answers()
    _passes("01.memory", *answers)
    for i in range(4):
        near = list(answers)
        near[i] = near[i] + 1 if i == 0 else near[i] * 1.01        # one parameter, or 1%
        msg = _fails("01.memory", *near)
        assert f"{answers[i]:.4g}" not in msg


def test_02_scaler_update():
    _passes("02.scaler_update", scaler_update)

    def one_ulp(*args):
        s, t = scaler_update(*args)
        return (math.nextafter(s, math.inf) if args[2] else s), t   # one ulp off on a backoff
    _fails("02.scaler_update", one_ulp, says="new scale is wrong")


def test_03_fullgraph():
    _passes("03.fullgraph", fixed)
    _fails("03.fullgraph", lambda x, w: fixed(x, w) * 1.01, says="values are wrong")
    from course_kit.grading.checks.nb03 import reference
    _fails("03.fullgraph", reference, says="fullgraph")


def test_04_exportable_and_hidden():
    _passes("04.exportable", Exportable)
    _passes("04.exportable_hidden", Exportable)
    _fails("04.exportable_hidden", ExportableNearMiss)
    from course_kit.capture import ClipOrScale
    _fails("04.exportable", ClipOrScale, says="export")


# 04.silent_trap and the exercises of 05 (05.choose_buckets, 05.bucket_waste), 06 (06.prefix_admit,
# 06.first_preempt) and 07 (07.async_bound, 07.overlap_predict) are tested in
# tests/test_exercises_nb04_07.py, from the notebooks' own solutions.


# 08's checkers (08.merge_states, 08.causal_traffic) are tested in tests/test_exercises_nb08.py,
# through the notebook's own Triton launcher.


def test_99_selftest_exercises():
    _passes("99.add", lambda a, b: a + b)
    _fails("99.add", lambda a, b: a + b + (a == 10))                # one case off by one
    _passes("99.square", [0, 1, 4, 9, 16])
    _fails("99.square", [0, 1, 4, 9, 17])
    _passes("99.half", lambda x: x * 0.5)
    _fails("99.half", lambda x: x * 0.505)
    _fails("99.half", lambda x: (x * 0.5).double(), says="dtype is wrong")


def test_10_ratios():
    _passes("10.ratios", ratios)
    _fails("10.ratios", lambda rows: ratios(rows, 1.01))


@pytest.mark.slow
def test_09_row_parallel():
    import linecache
    ns = {}
    source = ("import torch\nimport torch.distributed as dist\n"
         "def row_parallel_forward(x, w, bias=None):\n    y = x @ w.t()\n    dist.all_reduce(y)\n"
         "    return y if bias is None else y + bias\n"
         "def twice(x, w, bias=None):\n    y = x @ w.t()\n    y = y + bias if bias is not None else y\n"
         "    dist.all_reduce(y)\n    return y\n")
    linecache.cache["<test 09 answers>"] = (len(source), None, source.splitlines(True), "<test 09 answers>")
    exec(compile(source, "<test 09 answers>", "exec"), ns)
    _passes("09.row_parallel", ns["row_parallel_forward"])
    _fails("09.row_parallel", ns["twice"], says="counted twice")


def test_every_public_exercise_has_a_hint_and_a_test_here():
    registry.load_public()
    public = {i for i, s in registry.SPECS.items() if not s.checker.__module__.startswith("_course_kit_hidden")}
    assert all(registry.SPECS[i].hint for i in public), [i for i in public if not registry.SPECS[i].hint]
    tested = {i for i in public if i.replace(".", "_")[:2] in Path(__file__).read_text()}
    assert tested == public


def test_hint_prints_the_exercise_hint(capsys):
    grading.hint("08.causal_traffic")
    assert "tile_counts" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown exercise"):
        grading.hint("08.nope")


def test_failure_renders_without_traceback():
    with pytest.raises(grading.CheckFailed) as info:
        grading.check("00.attainable", lambda i, b, p: 0.0)
    lines = info.value._render_traceback_()
    assert len(lines) == 2 and "00.attainable" in lines[0] and "hint" in lines[1]


def test_full_feedback_shows_the_expected_value_and_short_does_not():
    from course_kit.grading.checks import codec, probing, verdict
    spec = registry.get("00.attainable")
    plan = {"cases": spec.cases(), "instantiate": False, "probe": None}
    answer = codec.roundtrip(probing.probe(plan, (lambda i, b, p: 2 * attainable(i, b, p),)))
    short = verdict.outcome(spec, answer, level="short")
    full = verdict.outcome(spec, answer, level="full")
    assert short[0] == full[0] == "failed"
    assert "expected" not in short[1] and "(expected 1.2)" in full[1], (short, full)

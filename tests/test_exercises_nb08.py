"""Notebook 08's exercises: the instructor's solutions pass, near misses fail with a short message
that never shows the expected value.

08.merge_states runs the notebook's own launcher and solution (taken from its source) through
Triton's interpreter on the CPU; near misses are Triton helpers too, plus plain functions for the
cases a kernel cannot produce (one element off, the wrong dtype). One case goes through the
out-of-process judge, as grading does.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from grading_fixtures import fails as _fails, judge_verdicts
import torch

from course_kit import grading, nbbuild
from course_kit.grading.checks import nb08

SOURCE = nbbuild.SOURCES / "08_flash_attention.py"

# Near misses of the helper, written as a learner would (base 2, tl operations only).
NEAR_MISSES = '''

@triton.jit
def merge_l_one_percent_high(m1, l1, acc1, m2, l2, acc2):
    m = tl.maximum(m1, m2)
    m_ref = tl.where(m == float("-inf"), 0.0, m)
    w1 = tl.math.exp2(m1 - m_ref)
    w2 = tl.math.exp2(m2 - m_ref)
    return m, (l1 * w1 + l2 * w2) * 1.01, acc1 * w1[:, None] + acc2 * w2[:, None]


@triton.jit
def merge_acc_not_rescaled(m1, l1, acc1, m2, l2, acc2):
    m = tl.maximum(m1, m2)
    m_ref = tl.where(m == float("-inf"), 0.0, m)
    w1 = tl.math.exp2(m1 - m_ref)
    w2 = tl.math.exp2(m2 - m_ref)
    return m, l1 * w1 + l2 * w2, acc1 + acc2


@triton.jit
def merge_nan_when_both_empty(m1, l1, acc1, m2, l2, acc2):
    m = tl.maximum(m1, m2)
    w1 = tl.math.exp2(m1 - m)
    w2 = tl.math.exp2(m2 - m)
    return m, l1 * w1 + l2 * w2, acc1 * w1[:, None] + acc2 * w2[:, None]


@triton.jit
def merge_base_e(m1, l1, acc1, m2, l2, acc2):
    m = tl.maximum(m1, m2)
    m_ref = tl.where(m == float("-inf"), 0.0, m)
    w1 = tl.exp(m1 - m_ref)
    w2 = tl.exp(m2 - m_ref)
    return m, l1 * w1 + l2 * w2, acc1 * w1[:, None] + acc2 * w2[:, None]


@triton.jit
def merge_without_max(m1, l1, acc1, m2, l2, acc2):
    w1 = tl.math.exp2(m1)
    w2 = tl.math.exp2(m2)
    m = tl.maximum(m1, m2)
    scale = tl.math.exp2(-m)
    return m, (l1 * w1 + l2 * w2) * scale, (acc1 * w1[:, None] + acc2 * w2[:, None]) * scale[:, None]
'''


def _cell(nb: dict, predicate) -> str:
    found = [c for c in nb["cells"] if c["cell_type"] == "code" and predicate(c)]
    assert len(found) == 1, f"expected one such cell, found {len(found)}"
    return "".join(found[0]["source"])


@pytest.fixture(scope="module")
def merges(tmp_path_factory):
    """The notebook's launcher and solved helper, plus the near misses, as an importable module
    (Triton reads a kernel's source from its file)."""
    pytest.importorskip("triton")
    from course_kit.attention import availability
    ok, why = availability.triton_status()     # sets TRITON_INTERPRET=1 without CUDA, as the notebook does
    if not ok:
        pytest.skip(why)
    solved = nbbuild.build(SOURCE, solved=True)
    launcher = _cell(solved, lambda c: "def merge_kernel(" in "".join(c["source"]))
    solution = _cell(solved, lambda c: (c["metadata"].get("course_kit") or {}).get("exercise") == "08.merge_states"
                     and c["metadata"]["course_kit"]["role"] == "solution")
    head = f"import torch\nok_triton, why_triton, DEVICE = True, '', {'cuda' if torch.cuda.is_available() else 'cpu'!r}\n"
    path = tmp_path_factory.mktemp("nb08") / "nb08_merge_cells.py"
    path.write_text(head + launcher + "\n\n" + solution + "\n" + NEAR_MISSES)
    spec = importlib.util.spec_from_file_location("nb08_merge_cells", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ---- 08.merge_states ----------------------------------------------------------------------------

def test_merge_solution_passes_through_the_notebooks_launcher(merges):
    grading.check("08.merge_states", merges.merge_with(merges.merge_states))
    # rows per program different from the cases' row counts: the launcher's masks hold
    grading.check("08.merge_states", merges.merge_with(merges.merge_states, rows_per_program=4))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy's, in the interpreter, on the NaNs and overflows
@pytest.mark.parametrize("name, says", [
    ("merge_l_one_percent_high", "l on random parts"),
    ("merge_acc_not_rescaled", "acc on random parts"),
    ("merge_nan_when_both_empty", "l on both parts empty on some rows (padding rows: the merge must stay empty, "
                                  "with no NaN): 2 of 8 values are NaN"),
    ("merge_base_e", "l on random parts"),
    ("merge_without_max", "scores near 200"),
])
def test_merge_near_misses_fail_on_the_kind_of_input(merges, name, says):
    msg = _fails("08.merge_states", merges.merge_with(getattr(merges, name)), says=says)
    assert "expected" not in msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_hidden_merge_check_passes_the_solution_and_fails_near_misses(merges):
    from course_kit.grading.checks import registry
    registry.load_hidden(Path(nbbuild.PROJECT) / "instructor" / "hidden_checks")
    grading.check("08.merge_states_hidden", merges.merge_with(merges.merge_states))
    _fails("08.merge_states_hidden", merges.merge_with(merges.merge_acc_not_rescaled), says="acc on a head dim of 128")
    _fails("08.merge_states_hidden", merges.merge_with(merges.merge_without_max), says="far below zero")
    _fails("08.merge_states_hidden", merges.merge_with(merges.merge_l_one_percent_high), says="l on a head dim")


def test_merge_one_element_off_fails_and_does_not_show_the_value():
    def one_off(*states):
        m, l, acc = nb08.merge_reference(*states)
        acc = acc.clone()
        i = int(acc.abs().argmax())
        acc.view(-1)[i] *= 1.01
        return m, l, acc
    msg = _fails("08.merge_states", one_off, says="1 of 512 values are wrong")
    want = nb08.merge_reference(*nb08._merge_cases()[0])[2].view(-1)
    value = want[int(want.abs().argmax())].item()
    assert f"{value:.3g}" not in msg and f"{value:.6g}" not in msg


def test_merge_dtype_and_type_are_named():
    _fails("08.merge_states", lambda *s: tuple(t.double() for t in nb08.merge_reference(*s)),
           says="dtype is wrong: found torch.float64, expected torch.float32")
    _fails("08.merge_states", lambda *s: tuple(t.round().to(torch.int32) for t in nb08.merge_reference(*s)),
           says="torch.int32")
    _fails("08.merge_states", lambda *s: nb08.merge_reference(*s)[2], says="expected a tuple (m, l, acc)")


def test_merge_stub_reports_the_learners_not_implemented(merges, tmp_path):
    stub = ("import triton\nimport triton.language as tl\n\n@triton.jit\ndef merge_states(m1, l1, acc1, m2, l2, acc2):\n"
            "    raise NotImplementedError('Exercise 08.merge_states: write it')\n")
    path = tmp_path / "nb08_stub.py"
    path.write_text(stub)
    spec = importlib.util.spec_from_file_location("nb08_stub", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if torch.cuda.is_available():
        pytest.skip("compiled Triton reports a stub as a compilation error")
    _fails("08.merge_states", merges.merge_with(module.merge_states), says="your code raised NotImplementedError")


def test_merge_goes_through_the_out_of_process_judge(merges, tmp_path, monkeypatch):
    """As grading does: the judge prepares the cases, the notebook side records the answer as data,
    and the judge (another process, where no learner code runs) gives the verdict."""
    verdicts = judge_verdicts("08.merge_states", {name: merges.merge_with(getattr(merges, name))
                                                  for name in ("merge_states", "merge_acc_not_rescaled")},
                              tmp_path, monkeypatch)
    assert verdicts["merge_states"]["status"] == "passed", verdicts
    assert verdicts["merge_acc_not_rescaled"]["status"] == "failed"
    assert "acc on random parts" in verdicts["merge_acc_not_rescaled"]["message"]


# ---- 08.causal_traffic --------------------------------------------------------------------------

def _answers():
    from course_kit.attention import io_complexity, tiles
    counts = tiles.tile_counts(tiles.tile_grid(1950, 128, 64, causal=True))
    ratios = [io_complexity.standard_accesses(s, 128, causal=True)
              / io_complexity.kernel_accesses(s, 128, 128, 64, causal=True) for s in (2048, 4096, 8192, 16384)]
    # the limit measured, not derived: the ratio at a large S is within 0.5% of it
    big = 1 << 17
    limit = io_complexity.standard_accesses(big, 128, True) / io_complexity.kernel_accesses(big, 128, 128, 64, True)
    return {"prediction": {"tiles": 300, "doubling": "A"}, "tiles": counts["no mask"] + counts["masked"],
            "ratios": ratios, "limit": limit, "cause": "C"}


def _traffic(**changes):
    a = {**_answers(), **changes}
    return a["prediction"], a["tiles"], a["ratios"], a["limit"], a["cause"]


def test_traffic_solution_passes_whatever_the_prediction():
    grading.check("08.causal_traffic", *_traffic())
    grading.check("08.causal_traffic", *_traffic(prediction={"tiles": 271, "doubling": "b"}))
    grading.check("08.causal_traffic", *_traffic(limit=6.0))


def test_traffic_answers_are_the_notebooks_solution():
    solved = nbbuild.build(SOURCE, solved=True)
    source = _cell(solved, lambda c: (c["metadata"].get("course_kit") or {}).get("exercise") == "08.causal_traffic"
                   and c["metadata"]["course_kit"]["role"] == "solution")
    ns: dict = {}
    exec(source, ns)
    grading.check("08.causal_traffic", ns["PREDICTION"], ns["TILES"], ns["RATIOS"], ns["LIMIT"], ns["CAUSE"])


def test_traffic_near_misses_fail_without_the_expected_value():
    a = _answers()
    msg = _fails("08.causal_traffic", *_traffic(tiles=a["tiles"] + 1), says="tiles computed at S = 1950 is wrong")
    assert str(a["tiles"]) not in msg.replace(f"found {a['tiles'] + 1}", "")
    # the common slip: 2(i + 1) key blocks for every query block, the ragged end forgotten
    _fails("08.causal_traffic", *_traffic(tiles=272), says="tiles computed")
    ratios = list(a["ratios"])
    ratios[2] *= 1.01
    msg = _fails("08.causal_traffic", *_traffic(ratios=ratios), says="at S = 8192")
    assert f"{a['ratios'][2]:.6g}" not in msg
    inverted = [1 / r for r in a["ratios"]]
    _fails("08.causal_traffic", *_traffic(ratios=inverted), says="at S = 2048")
    msg = _fails("08.causal_traffic", *_traffic(limit=6.0 * 1.01), says="limit")
    assert "6.06" in msg and "expected" not in msg


def test_traffic_types_and_a_missing_prediction_are_named():
    _fails("08.causal_traffic", *_traffic(prediction=None), says="PREDICTION must be recorded")
    _fails("08.causal_traffic", *_traffic(prediction={"tiles": 271}), says="PREDICTION must be recorded")
    _fails("08.causal_traffic", *_traffic(prediction={"tiles": "271", "doubling": "B"}), says="must be an int")
    _fails("08.causal_traffic", *_traffic(prediction={"tiles": 271, "doubling": "E"}), says="one of the letters 'A'")
    _fails("08.causal_traffic", *_traffic(tiles=271.0), says="expected an int, found a value of type float")
    _fails("08.causal_traffic", *_traffic(tiles=torch.tensor(271)), says="expected an int, found a tensor")
    _fails("08.causal_traffic", *_traffic(ratios=_answers()["ratios"][:3]), says="a list of 4 numbers")
    _fails("08.causal_traffic", *_traffic(ratios=torch.tensor(_answers()["ratios"])), says="a list of 4 numbers")
    _fails("08.causal_traffic", *_traffic(limit="6"), says="expected a number, found a value of type str")
    _fails("08.causal_traffic", *_traffic(cause=3), says="CAUSE: expected one of")


def test_hints_are_written_for_these_exercises(capsys):
    grading.hint("08.merge_states")
    assert "2^(m_i - m)" in capsys.readouterr().out
    grading.hint("08.causal_traffic")
    assert "tile_counts" in capsys.readouterr().out

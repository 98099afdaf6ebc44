"""Notebook 09's exercises (and 10's): the instructor's solutions, taken from the notebooks' sources,
pass; near misses fail with a short message that never shows the expected value; one case goes
through the out-of-process judge, as grading does.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from grading_fixtures import fails as _fails, judge_verdicts, shows as _shows, solution_namespace
import torch

from course_kit import grading, nbbuild
from course_kit.grading.checks import nb09, registry
from course_kit.parallel import schedules

registry.load_hidden(Path(nbbuild.PROJECT) / "instructor" / "hidden_checks", {"09", "10"})


# ---- 09.column_backward -------------------------------------------------------------------------

def _solution(stem: str, exercise_id: str) -> dict:
    return solution_namespace(stem, exercise_id, namespace={"torch": torch, "schedules": schedules})


@pytest.fixture(scope="module")
def backward():
    return _solution("09", "09.column_backward")["column_parallel_backward"]


def _variant(backward, **change):
    """The solution with one mistake."""
    def fn(x, ws, gs):
        gx, gw, gb = backward(x, ws, gs)
        if change.get("no_all_reduce"):
            gx = gs[0] @ ws[0]                                  # rank 0's partial only
        if change.get("mean"):
            gx = gx / len(ws)
        if change.get("one_percent"):
            gw = [gw[0] * 1.01] + gw[1:]
        if change.get("one_element"):
            gb = [b.clone() for b in gb]
            gb[-1].view(-1)[-1] += 1e-2
        if change.get("int_dtype"):
            gx = gx.round().to(torch.int64)
        if change.get("even_split"):                           # re-cut the whole grad_out in equal parts
            full = torch.cat(gs, -1)
            size = full.shape[-1] // len(ws)
            parts = [full[..., r * size:(r + 1) * size] for r in range(len(ws))]
            x2 = x.reshape(-1, x.shape[-1])
            gw = [p.reshape(-1, p.shape[-1]).t() @ x2 for p in parts]
        if change.get("no_token_sum"):
            gb = [g.reshape(-1, g.shape[-1])[0] for g in gs]
        return gx, gw, gb
    return fn


def test_09_column_backward_solution_passes_with_its_hidden_check(backward):
    grading.check("09.column_backward", backward)
    grading.check("09.column_backward_hidden", backward)


def test_09_column_oracle_is_autograd_on_the_sharded_layer_too():
    """The oracle (the unsharded linear) equals autograd through the sharded layers, rank by rank."""
    for x, ws, gs in nb09.column_cases():
        want_x, want_w, _ = nb09.column_oracle(x, ws, gs)
        xs = x.clone().requires_grad_(True)
        shards = [w.clone().requires_grad_(True) for w in ws]
        torch.autograd.backward([torch.nn.functional.linear(xs, w) for w in shards], list(gs))
        torch.testing.assert_close(xs.grad, want_x)
        for w, want in zip(shards, want_w):
            torch.testing.assert_close(w.grad, want)


@pytest.mark.parametrize("change, says", [
    ("no_all_reduce", "partial product"), ("mean", "mean of the ranks"), ("one_percent", "grad_weight shard"),
    ("one_element", "1 of"), ("int_dtype", "torch.int64"), ("even_split", "grad_weight shard"),
    ("no_token_sum", "grad_bias shard"),
])
def test_09_column_backward_near_misses_fail(backward, change, says):
    msg = _fails("09.column_backward", _variant(backward, **{change: True}), says=says)
    assert "expected value" not in msg and "(expected" not in msg


def test_09_column_backward_messages_name_the_input_and_hide_the_answer(backward):
    msg = _fails("09.column_backward", _variant(backward, one_percent=True))
    x, ws, gs = next(c for c in nb09.column_cases() if len(c[1]) > 1)
    assert "ranks" in msg and "shape" in msg
    want = nb09.column_oracle(x, ws, gs)[1][0]
    assert not _shows(msg, float(want.flatten()[0]))
    _fails("09.column_backward", lambda x, ws, gs: x, says="expected a tuple")


def test_09_column_backward_hidden_catches_a_public_only_answer(backward):
    """An answer that hard-codes the public rank counts passes the public check, not the hidden one."""
    public = {len(c[1]) for c in nb09.column_cases()}

    def cheat(x, ws, gs):
        if len(ws) in public:
            return backward(x, ws, gs)
        return _variant(backward, no_all_reduce=True)(x, ws, gs)
    grading.check("09.column_backward", cheat)
    _fails("09.column_backward_hidden", cheat, says="8 ranks")


def test_09_column_backward_goes_through_the_out_of_process_judge(backward, tmp_path, monkeypatch):
    verdicts = judge_verdicts("09.column_backward", dict((("solution", backward), ("no_all_reduce", _variant(backward, no_all_reduce=True)))), tmp_path, monkeypatch)
    assert verdicts["solution"]["status"] == "passed", verdicts
    assert verdicts["no_all_reduce"]["status"] == "failed"
    assert "all-reduce" in verdicts["no_all_reduce"]["message"]


def test_09_column_backward_is_not_shown_above_the_exercise():
    text = (nbbuild.SOURCES / "09_parallelism.py").read_text()
    above = text[:text.index("## Exercise 09.column_backward")]
    assert "show_source(tensor.ColumnParallelLinear" not in above and "show_source(comm._CopyToTP" not in above
    assert "show_source(tensor.RowParallelLinear" in above    # the lesson's code; the exercise is its transpose


# ---- 09.interleaved_bubble ----------------------------------------------------------------------

def _bubble_peak():
    """The key's values (test_answer_keys.py measures them with the schedule simulation)."""
    key = registry.key("09.interleaved_bubble")
    return key["bubble"], key["peak"]


def test_09_interleaved_bubble_solution_passes():
    ns = _solution("09", "09.interleaved_bubble")
    grading.check("09.interleaved_bubble", ns["PREDICTED_BUBBLE"], ns["BUBBLE"], ns["PEAK_RANK0"], ns["WHY"])
    bubble, peak = _bubble_peak()
    for predicted in (0.0, 0.5, 3):              # the prediction is recorded, not graded
        grading.check("09.interleaved_bubble", predicted, bubble, peak, "a")
    grading.check("09.interleaved_bubble", 0.1, bubble, peak, " A ")


def test_09_interleaved_bubble_is_measured_on_values_not_shown_above():
    text = (nbbuild.SOURCES / "09_parallelism.py").read_text()
    above = text[:text.index("## Exercise 09.interleaved_bubble")]
    p, m, v = nb09.BUBBLE_P, nb09.BUBBLE_M, nb09.BUBBLE_V
    assert f"p_, m_, v_ = {p}, {m}, {v}" in text and f"`p = {p}` stages, `m = {m}` micro-batches" in text
    shown = re.findall(r"PipelineSchedules\(p=(\d+), m=(\d+)|explain_simulation\(\"\w+\", (\d+), (\d+)", above)
    assert shown and all((int(a or c), int(b or d)) != (p, m) for a, b, c, d in shown)
    # the measurement differs from plain 1F1B's in both answers, so neither is the lesson's number
    plain = schedules.simulate("1f1b", p, m)
    bubble, peak = _bubble_peak()
    assert bubble < schedules.bubble_of(plain) and peak > schedules.peak_in_flight(plain, 0)


def test_09_interleaved_bubble_near_misses_fail():
    bubble, peak = _bubble_peak()
    plain = schedules.simulate("1f1b", nb09.BUBBLE_P, nb09.BUBBLE_M)
    msg = _fails("09.interleaved_bubble", 0.2, bubble * 1.01, peak, "a", says="BUBBLE")
    assert not _shows(msg, bubble)
    _fails("09.interleaved_bubble", 0.2, schedules.bubble_of(plain), peak, "a", says="BUBBLE")
    _fails("09.interleaved_bubble", 0.2, bubble * 100, peak, "a", says="percentage")
    msg = _fails("09.interleaved_bubble", 0.2, bubble, schedules.peak_in_flight(plain, 0), "a", says="PEAK_RANK0")
    assert not _shows(msg, peak)
    _fails("09.interleaved_bubble", 0.2, bubble, peak + 0.5, "a", says="PEAK_RANK0")
    _fails("09.interleaved_bubble", 0.2, bubble, peak, "e", says="one of the letters")
    _fails("09.interleaved_bubble", None, bubble, peak, "a", says="PREDICTED_BUBBLE")
    _fails("09.interleaved_bubble", 0.2, torch.tensor(bubble), peak, "a", says="expected a finite number")


def test_09_interleaved_choices_match_the_notebook():
    text = " ".join((nbbuild.SOURCES / "09_parallelism.py").read_text().replace("#", " ").split())
    for letter, why in nb09.WHY_CHOICES.items():
        assert f'`"{letter}"`: {why}' in text, letter


@pytest.mark.parametrize("exercise_id, words", [
    ("09.column_backward", "copy_to_tp_region"), ("09.interleaved_bubble", "peak_in_flight"),
])
def test_09_hints_are_written_for_these_exercises(capsys, exercise_id, words):
    grading.hint(exercise_id)
    assert words in capsys.readouterr().out


# ---- 10.first_rung ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rung():
    from course_kit.grading.checks import nb10
    return nb10, _solution("10", "10.first_rung")


def test_10_first_rung_solution_passes(rung):
    nb10, ns = rung
    grading.check("10.first_rung", ns["PREDICTED_ENGINE_STEPS"], ns["HF_FORWARDS"], ns["ENGINE_STEPS"], ns["WHY"])
    assert ns["ENGINE_STEPS"] == registry.key("10.first_rung")["engine_steps"]   # counted by the solution's engine run
    for predicted in (0, 1000):                  # the prediction is recorded, not graded
        grading.check("10.first_rung", predicted, ns["HF_FORWARDS"], ns["ENGINE_STEPS"], "a")


def test_10_hf_forwards_is_counted_on_hf_generate(rung):
    """The checker's count of HF generate's forward passes equals a forward hook's count (the
    notebook's solution counts with a hook), and the engine needs fewer on this workload."""
    nb10, ns = rung
    key = registry.key("10.first_rung")
    assert ns["HF_FORWARDS"] == key["hf_forwards"]
    assert key["engine_steps"] < key["hf_forwards"]


def test_10_first_rung_workload_matches_the_notebook(rung):
    nb10, _ = rung
    text = (nbbuild.SOURCES / "10_capstone.py").read_text()
    w = nb10.RUNG_WORKLOAD
    assert f"PROMPT_LENS, NEW_TOKENS = {w['prompt_lens']}, {w['new_tokens']}" in text
    o = w["options"]
    assert (f'RUNG_OPTS = dict(policy="{o["policy"]}", max_num_seqs={o["max_num_seqs"]}, '
            f'max_num_batched_tokens={o["max_num_batched_tokens"]})') in text
    assert f"hf_generate_static(rung_hf, RUNG_PROMPTS, NEW_TOKENS, {w['batch']})" in text
    flat = " ".join(text.replace("#", " ").split())
    for letter, why in nb10.RUNG_CHOICES.items():
        assert f'`"{letter}"`: {why}' in flat, letter


def test_10_first_rung_near_misses_fail(rung):
    nb10, ns = rung
    hf, eng = ns["HF_FORWARDS"], ns["ENGINE_STEPS"]
    msg = _fails("10.first_rung", 40, hf + 1, eng, "a", says="HF_FORWARDS")
    assert str(hf) not in msg.replace(str(hf + 1), "")
    _fails("10.first_rung", 40, hf - 1, eng, "a", says="HF_FORWARDS")
    _fails("10.first_rung", 40, sum(nb10.RUNG_WORKLOAD["new_tokens"]), eng, "a", says="HF_FORWARDS")
    msg = _fails("10.first_rung", 40, hf, eng + 1, "a", says="ENGINE_STEPS")
    assert str(eng) not in msg.replace(str(eng + 1), "")
    _fails("10.first_rung", 40, hf, eng - 1, "a", says="ENGINE_STEPS")
    _fails("10.first_rung", 40, hf, float(eng), "a", says="expected an int")
    _fails("10.first_rung", 40, hf, eng, 1, says="one of the letters")
    _fails("10.first_rung", None, hf, eng, "a", says="PREDICTED_ENGINE_STEPS")


def test_10_hint_is_written_for_the_exercise(capsys):
    grading.hint("10.first_rung")
    assert "register_forward_hook" in capsys.readouterr().out

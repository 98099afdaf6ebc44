"""Notebook 02 as the H200 recording of 2026-12-02 showed it (data/reference/h200/notebooks/02_*.ipynb):
the numbers of that executed copy are the oracles here.

- §7's "On an H200" section printed nothing without an fp8_train record; §7's speed verdict
  (fp8 6.11x slower than bf16) stood unexplained;
- §4 and §7 trained bf16 with the same settings on different token streams and stated different
  loss statistics (last loss 1.638 against a mean of the last 5, 0.478);
- §4's headline guessed no cause for 4.62x against the record's 6.74x although the notebook knows
  the record's model is 337M parameters and its own 29.7M;
- §4 repeated §2's paragraph about the logit gradients word for word."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from course_kit import amp, notebook
from course_kit.amp import explain as X, fp8_train
from course_kit.amp.train import RunResult

ROOT = Path(__file__).resolve().parents[1]
SRC = (ROOT / "notebooks" / "src" / "02_amp_and_gradscaler.py").read_text()
AMP_REC = json.loads((ROOT / "data/reference/h200/amp.json").read_text())
SCALED_MM = "torch._scaled_mm on the fp8 tensor cores (sm_89+)"
H200_STEP_S = {"bf16": 0.0171, "fp8": 0.1044}     # the executed copy's cell 44


def _cell(marker: str) -> str:
    """The notebook source's cell that contains `marker`."""
    cells = SRC.split("# %%")
    hits = [c for c in cells if marker in c]
    assert len(hits) == 1, f"{marker!r} is in {len(hits)} cells"
    return hits[0]


# ------------------------------------------------------------------ finding 1: the missing fp8 record

def test_the_fp8_record_section_says_in_one_line_what_is_missing_on_every_device():
    assert "`course-kit bench fp8_train`" in fp8_train.MISSING_RECORD
    assert "No `fp8_train` record exists yet" in fp8_train.MISSING_RECORD
    cell = _cell('fp8_ref = notebook.record("fp8_train", quiet=True)')
    # the old cell set fig = None and said nothing where the record was missing (a GPU shows no banner)
    none_branch = cell.split("if fp8_ref is None:")[1].split("else:")[0]
    assert "md(fp8_train.MISSING_RECORD)" in none_branch
    assert "DEVICE" not in none_branch           # on every device, not on a CPU alone


def test_the_h200_speed_verdict_is_not_left_unexplained():
    old = fp8_train.explain_speed(H200_STEP_S, SCALED_MM)   # what cell 44 printed: the verdict and nothing after it
    assert "6.11x slower than bf16" in old and "does not show where" in old
    timed = fp8_train.explain_speed(H200_STEP_S, SCALED_MM, ranges_timed=True)
    assert "range statistics" in timed and "`course-kit bench fp8_train` times fp8 without them" in timed
    # one linear of each shape timed alone: faster fp8 matmuls, slower fp8 linears, casts outweighing the matmuls
    rows = [{"name": n, "tokens": 16384, "in": i, "out": o, "matmul_bf16_s": 60e-6, "matmul_fp8_s": 40e-6,
             "linear_bf16_s": 250e-6, "linear_fp8_s": 700e-6, "cast_overhead_s": 580e-6}
            for n, i, o in (("qkv", 512, 1536), ("proj", 512, 512), ("fc", 512, 2048), ("out", 2048, 512))]
    cast = fp8_train.explain_speed(H200_STEP_S, SCALED_MM, ranges_timed=True, layer_rows=rows)
    assert "the fp8 matmul ran 1.50x faster than bf16's" in cast and "2.80x slower than bf16's" in cast
    assert "In 4 of 4 shapes" in cast and "580 µs against 120 µs" in cast
    assert "too small for fp8's faster matmuls to repay its scaling" in cast
    # the same verdict, but fp8's matmul alone was not faster: that is named, the casts are not blamed
    slow_mm = [dict(r, matmul_fp8_s=90e-6, cast_overhead_s=100e-6) for r in rows]
    mm = fp8_train.explain_speed(H200_STEP_S, SCALED_MM, layer_rows=slow_mm)
    assert "fp8 matmul alone was not faster" in mm and "too small" not in mm
    # linears not slower alone: the step's gap lies elsewhere, and no cause is named
    quick = [dict(r, linear_fp8_s=200e-6, cast_overhead_s=50e-6) for r in rows]
    elsewhere = fp8_train.explain_speed(H200_STEP_S, SCALED_MM, layer_rows=quick)
    assert "lies outside the linears; this run does not show where" in elsewhere and "too small" not in elsewhere
    # fp8 faster: the verdict alone, nothing to explain
    fast = fp8_train.explain_speed({"bf16": 0.02, "fp8": 0.01}, SCALED_MM, ranges_timed=True, layer_rows=rows)
    assert "2.00x faster" in fast and "range statistics" not in fast and "Timed alone" not in fast


def test_notebook_times_the_layers_live_only_where_fp8_ran_on_tensor_cores_and_was_slower():
    cell = _cell("fp8_times = {")
    assert 'has_record=notebook.record("fp8_train", quiet=True) is not None' in cell
    emulated = "emulated: no CUDA GPU here"
    assert "the H200 record below has the real one" in fp8_train.explain_speed(H200_STEP_S, emulated)
    none = fp8_train.explain_speed(H200_STEP_S, emulated, has_record=False)
    assert "record below" not in none and "no fp8_train record exists yet" in none
    assert "fp8_bench.layer_times(fp8_cfg, BATCH, DEVICE)" in cell and 'startswith("torch._scaled_mm")' in cell
    assert "ranges_timed=fp8_cmp.ranges_timed" in cell and "layer_rows=fp8_layer_rows" in cell
    assert fp8_train.Fp8Comparison({}, ranges_timed=True).ranges_timed


# ------------------------------------------------- finding 2: the same data, the same loss statistic

def test_fp8_and_amp_train_draw_the_same_batches():
    a = amp.train_data("smoke", 4, 3, seed=0)
    b = fp8_train.make_data("smoke", 4, 3, 0)
    assert len(a) == len(b) == 3 and all(torch.equal(x, y) for x, y in zip(a, b))
    # amp.train with no data draws exactly these
    default = amp.train("fp32", preset="smoke", steps=3, batch=4, track_grads=False)
    given = amp.train("fp32", preset="smoke", steps=3, batch=4, track_grads=False, data=a)
    assert default.losses == given.losses


def test_sections_4_and_7_train_on_one_set_of_batches():
    # the old section 2 drew a stream of 50 x seq_len tokens; fp8_train.make_data one of 20 x seq_len
    assert "50 * cfg.seq_len, seed=0), BATCH" not in SRC
    assert "data = amp.train_data(PRESET, BATCH, STEPS, seed=0, device=DEVICE)" in SRC
    assert "fp8_data = data if (FP8_PRESET, FP8_STEPS) == (PRESET, STEPS)" in SRC


def test_one_final_loss_statistic():
    losses = [9.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.5]
    r = RunResult("bf16", "cpu", losses=losses)
    assert r.final_loss() == amp.final_loss(losses) == pytest.approx(0.9)
    assert fp8_train.Fp8Comparison({"bf16": r}).final_loss("bf16") == r.final_loss()
    text = X.explain_final_losses({"fp32": losses, "bf16": [2.0, 1.0]})
    assert text == "Final loss (mean of the last 5 steps): fp32 0.900, bf16 1.500."
    # section 4 no longer states each run's last loss
    assert "r.losses[-1]" not in SRC and "explain_final_losses" in _cell("zero = {m: sum(r.zero_grads)")
    with pytest.raises(ValueError, match="no losses"):
        amp.final_loss([])


def test_the_bf16_peer_says_whether_it_repeats_section_4():
    s4 = {"preset": "small_gpu", "steps": 100, "batch": 32, "lr": 3e-4, "final_loss": 0.480}
    same = fp8_train.explain_bf16_peer(s4, dict(s4, final_loss=0.478), True, "cuda")
    assert "repeats section 4's bf16 run" in same and "0.478 here against 0.480 in section 4" in same
    assert "run-to-run variation" in same
    assert "identical" in fp8_train.explain_bf16_peer(s4, s4, True, "cpu")
    assert "variation" not in fp8_train.explain_bf16_peer(s4, dict(s4, final_loss=0.5), True, "cpu")
    # the recording's case: the same settings on other batches, and a CPU's smaller model
    other = fp8_train.explain_bf16_peer(dict(s4, final_loss=1.638), dict(s4, final_loss=0.478), False, "cuda")
    assert "is not section 4's: other batches" in other and "repeats" not in other
    cpu = fp8_train.explain_bf16_peer(dict(s4, preset="cpu", steps=12), dict(s4, preset="smoke", steps=30),
                                      False, "cpu")
    assert "the model preset smoke here, cpu there" in cpu and "steps 30 here, 12 there" in cpu
    with pytest.raises(ValueError, match="final_loss"):
        fp8_train.explain_bf16_peer({"preset": "x"}, s4, True, "cpu")


# ------------------------------------------------------ finding 3: the headline's known reason

def test_the_headline_names_the_known_size_difference():
    s = AMP_REC["summary"]
    live = {"n_params": 29_676_544, "batch": 32, "seq_len": 512}       # the executed copy's small_gpu model
    why = X.workload_difference(live, s)
    assert why == ("the record's model has 337M parameters and batches of 8 x 1,024 tokens, "
                   "this run's 29.7M parameters and batches of 32 x 512 tokens")
    h = notebook.headline("bf16 step over strict fp32", 4.62, s["bf16_speedup_vs_fp32"], "x", 2, why=why)
    assert h.text == f"4.62 x in this run (the record: 6.74, 31% lower; {why})"
    assert X.workload_difference(dict(live, n_params=s["n_params"]), s).startswith("the record's model has batches")
    assert X.workload_difference({"n_params": s["n_params"], "batch": 8, "seq_len": 1024}, s) == ""
    with pytest.raises(ValueError, match="seq_len"):
        X.workload_difference({"n_params": 1, "batch": 1}, s)
    cell = _cell("same_gpu_summary =")
    assert "why=amp_why" in cell and "cfg.n_params()" in cell


# ------------------------------------------------------------- finding 4: said once

def test_section_4_does_not_repeat_section_2s_paragraph():
    losses = [9.11, 9.10, 9.12]
    text = amp.explain_noscale_losses(losses, 8192)
    assert text == "Without a scaler the loss went from 9.11 to 9.12 (did not fall; a uniform guess scores ln(8,192) = 9.01)."
    full = amp.explain_logit_grads(16384, 8192, 0.999, losses)
    assert text in full and "a step averages the loss" in full
    assert "a step averages" not in text
    section4 = _cell("zero = {m: sum(r.zero_grads)")
    assert "explain_logit_grads" not in section4 and "explain_noscale_losses" in section4
    assert SRC.count("amp.explain_logit_grads(") == 2        # section 2 (this run) and section 5 (the record)


def test_the_cpu_timing_noise_sentence_names_both_sides():
    """The smoke run printed 'the gap between those two (1.55x slower than) is this run's timing noise'."""
    text = X.explain_step_speed({"fp32": 0.0053, "tf32": 0.0082, "bf16": 0.0099}, "cpu", "CPU")
    assert "(`tf32` 1.55x slower than strict fp32) is this run's timing noise" in text
    assert "slower than) is" not in text

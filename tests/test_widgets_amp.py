"""Notebook 02's widgets, headless: moving a control changes the figure and the numbers."""
from __future__ import annotations

import time

import pytest
import torch

from course_kit import amp
from course_kit.widgets.amp import LossScaleExplorer, ScalerStepper


def _hists():
    g = torch.Generator().manual_seed(0)
    mags = torch.exp2(torch.randint(-34, -6, (5000,), generator=g).double()) * 1.5
    return {"logits": amp.log2_hist(mags), "block 0 output": amp.log2_hist(mags * 2.0**10)}


def test_loss_scale_explorer_scale_format_and_gradient():
    e = LossScaleExplorer(_hists(), fmt="fp16", log2_scale=0)
    under0, text0, bars0 = e.view["underflow"], e.text.value, e.figure.data[0].x
    assert under0 > 0.2 and "flushed to zero" in text0
    t0 = time.perf_counter()
    e.scale.value = 16
    assert time.perf_counter() - t0 < 0.5
    assert e.view["underflow"] < under0 and e.text.value != text0 and e.figure.data[0].x != bars0
    assert e.view == amp.zones(_hists()["logits"], "fp16", 16)
    e.format.value = "fp8_e4m3fn"
    assert e.view["format"] == "fp8_e4m3fn" and e.view["underflow"] > amp.zones(_hists()["logits"], "fp16", 16)["underflow"]
    e.which.value = "block 0 output"
    assert "block 0 output" in e.text.value


def test_loss_scale_explorer_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        LossScaleExplorer({})
    with pytest.raises(ValueError, match="unknown format"):
        LossScaleExplorer(_hists(), fmt="int8")
    with pytest.raises(ValueError, match="outside"):
        LossScaleExplorer(_hists(), log2_scale=99)


def test_scaler_stepper_buttons():
    s = ScalerStepper(init_scale=2.0**16, growth_interval=3)
    s.buttons["inf"].click()
    assert s.pair.scales["course"][-1] == 2.0**15 and "backed off" in s.text.value
    assert "same scale" in s.text.value
    for _ in range(3):
        s.buttons["clean"].click()
    assert s.pair.scales["torch"][-1] == 2.0**16 and "grew" in s.text.value
    assert len(s.figure.data[0].y) == 5
    s.buttons["reset"].click()
    assert s.pair.events == [] and s.pair.scales["course"] == [2.0**16]


def test_loss_curves_give_every_mode_its_own_panel():
    from course_kit.plots.amp import loss_curves
    runs = [{"name": m, "losses": [4.0, 3.0, 2.0]} for m in ("fp32", "tf32", "bf16", "fp16_scaler", "fp16_noscale")]
    fig = loss_curves(runs)
    own = [t for t in fig.data if t.name in {r["name"] for r in runs} and t.line.color != "#bbbbbb"]
    assert len(own) == 5 and len({t.xaxis for t in own}) == 5     # identical curves, five panels
    assert [a.text for a in fig.layout.annotations][4] == "fp16_noscale: last 2.000"

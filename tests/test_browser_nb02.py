"""Notebook 02's widgets in a real JupyterLab with headless Chromium (tests/browser_support.py).

Moves the loss-scale explorer's scale slider (keyboard on the focused handle) and switches its format,
then presses the scaler stepper's "step with inf" button, asserting from the DOM that the numbers and
the plotly figures change.
"""
from __future__ import annotations

import pytest

from browser_support import ARTIFACTS, figure_state, notebook_page, settle, wait_for

pytestmark = pytest.mark.browser

NAME = "02_amp_and_gradscaler.ipynb"


page = notebook_page(NAME, through="ScalerStepper(")   # the cells down to the second widget, none below

EXPLORER = ".ck-loss-scale"
STEPPER = ".ck-scaler-stepper"


def test_loss_scale_explorer(page):
    pg = page
    box = pg.locator(EXPLORER).first
    box.scroll_into_view_if_needed()
    pg.wait_for_selector(f"{EXPLORER} .js-plotly-plot .main-svg")
    text = lambda: pg.inner_text(f"{EXPLORER} .ck-scale-text")
    fig = lambda: figure_state(pg, EXPLORER)
    wait_for(text, lambda t: "multiplied by 2^0:" in t, "the explorer should show its text at scale 2^0")
    wait_for(fig, lambda f: bool(f["data"]), "the explorer should render a plotly figure")
    fig0 = settle(pg, fig)
    text0 = text()
    handle = pg.locator(f"{EXPLORER} .noUi-handle").first
    handle.focus()
    for _ in range(8):
        pg.keyboard.press("ArrowRight")
    wait_for(text, lambda t: t != text0 and "2^0:" not in t, "the text should follow the scale slider")
    wait_for(fig, lambda f: f["data"] != fig0["data"] and f["texts"] != fig0["texts"],
             "the histogram should move with the scale")
    fig1, text1 = settle(pg, fig), text()
    pg.select_option(f"{EXPLORER} select >> nth=1", label="fp8_e4m3fn")
    wait_for(text, lambda t: "fp8_e4m3fn" in t and t != text1, "the text should name the new format")
    wait_for(fig, lambda f: f["texts"] != fig1["texts"], "the figure should show the new format's zones")
    box.screenshot(path=str(ARTIFACTS / "nb02_loss_scale_explorer.png"))


def test_scaler_stepper(page):
    pg = page
    box = pg.locator(STEPPER).first
    box.scroll_into_view_if_needed()
    pg.wait_for_selector(f"{STEPPER} .js-plotly-plot .main-svg")
    text = lambda: pg.inner_text(f"{STEPPER} .ck-stepper-text")
    fig = lambda: figure_state(pg, STEPPER)
    wait_for(text, lambda t: "no step yet" in t, "the stepper should start with no step")
    fig0 = settle(pg, fig)
    pg.click(f"{STEPPER} .ck-step-inf")
    wait_for(text, lambda t: "backed off from 65536 to 32768" in t and "the same scale" in t,
             "an inf step should back the scale off, equally in both scalers")
    wait_for(fig, lambda f: f["data"] != fig0["data"], "the scale history should gain a step")
    box.screenshot(path=str(ARTIFACTS / "nb02_scaler_stepper.png"))

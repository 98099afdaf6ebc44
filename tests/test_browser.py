"""Notebook 01's widgets in a real JupyterLab, driven by headless Chromium through Playwright (tests/browser_support.py).

Starts JupyterLab from the project's environment on a free localhost port with a token, opens a
copy of notebooks/01_dtypes_and_overflow.ipynb (so the committed notebook is never autosaved with
outputs), runs all cells, then drags the overflow explorer's slider and changes its format
selector, and changes the memory estimator's model and weight format, asserting from the DOM that
the text and the plotly figure changed. Screenshots go to artifacts/browser/.

Uses Debian's chromium (/usr/bin/chromium, `apt-get install chromium`), never a downloaded
browser; skipped when it or Playwright is absent.
"""
from __future__ import annotations

import pytest

from browser_support import ARTIFACTS, figure_state as _figure_state, notebook_page, settle as _settle, \
    wait_for as _wait_for

pytestmark = pytest.mark.browser

page = notebook_page("01_dtypes_and_overflow.ipynb")


EXPLORER = ".ck-overflow-explorer"
ESTIMATOR = ".ck-memory-estimator"


def test_overflow_explorer_slider_and_format(page):
    pg = page
    box = pg.locator(EXPLORER).first
    box.scroll_into_view_if_needed()
    pg.wait_for_selector(f"{EXPLORER} .js-plotly-plot .main-svg")
    table = lambda: pg.inner_text(f"{EXPLORER} .ck-explorer-table")
    fig = lambda: _figure_state(pg, EXPLORER)
    readout = lambda: pg.inner_text(f"{EXPLORER} .widget-readout")
    # wait for the rendered state (text, figure and slider readout), then let it settle
    _wait_for(table, lambda t: "fp32" in t, "the explorer should render its table")
    _wait_for(fig, lambda f: bool(f["data"]), "the explorer should render a plotly figure")
    _wait_for(readout, lambda r: r.strip() != "", "the explorer's slider should show its value")
    fig0 = _settle(pg, fig)
    table0, readout0 = table(), readout()

    # drag the slider's handle, like a learner would
    handle = pg.locator(f"{EXPLORER} .noUi-handle").first
    for _ in range(3):
        handle.hover()                        # scrolls it into view where the mouse can reach it
        hb = handle.bounding_box()
        cx, cy = hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2
        pg.mouse.move(cx, cy)
        pg.mouse.down()
        pg.mouse.move(cx - 100, cy, steps=10)   # to the left: smaller magnitudes
        pg.mouse.up()
        try:
            _wait_for(readout, lambda r: r != readout0, "", timeout_s=5)
            break
        except AssertionError:
            continue
    assert readout() != readout0, "dragging the handle did not move the slider"
    _wait_for(table, lambda t: t != table0, "the explorer's table should change with the slider")
    _wait_for(fig, lambda f: f["data"] != fig0["data"] and f["texts"] != fig0["texts"],
              "the explorer's figure should change with the slider")
    fig1 = _settle(pg, fig)

    # pick another format: the bits shown in the figure and the highlighted row change
    assert not any("fp16 bit pattern" in t for t in fig1["texts"])
    pg.select_option(f"{EXPLORER} select", label="fp16")
    _wait_for(fig, lambda f: any("fp16 bit pattern" in t for t in f["texts"])
              and f["data"] != fig1["data"], "the figure should show fp16's bits")
    _wait_for(lambda: pg.get_attribute(f'{EXPLORER} tr[data-format="fp16"]', "style") or "",
              lambda st: "background" in st, "the fp16 row should be highlighted")
    box.screenshot(path=str(ARTIFACTS / "nb01_overflow_explorer.png"))


def test_memory_estimator(page):
    pg = page
    box = pg.locator(ESTIMATOR).first
    box.scroll_into_view_if_needed()
    pg.wait_for_selector(f"{ESTIMATOR} .js-plotly-plot .main-svg")
    text = lambda: pg.inner_text(f"{ESTIMATOR} .ck-memory-text")
    fig = lambda: _figure_state(pg, ESTIMATOR)
    # wait for the rendered state, never read it once: the widget's text arrives after its frame
    _wait_for(text, lambda t: "Llama-2-70B" in t, "the estimator's text should name the 70B model")
    _wait_for(fig, lambda f: bool(f["data"]), "the estimator should render a plotly figure")
    fig0 = _settle(pg, fig)
    text0 = text()
    selects = pg.locator(f"{ESTIMATOR} select")
    selects.nth(0).select_option(label="7b: Llama-2-7B")
    _wait_for(text, lambda t: "Llama-2-7B" in t, "the estimator's text should name the 7B model")
    _wait_for(fig, lambda f: f["data"] != fig0["data"] and f["texts"] != fig0["texts"],
              "the estimator's figure should change with the model")
    fig1, text1 = _settle(pg, fig), text()
    selects.nth(1).select_option(label="int4")          # the weights' dtype
    _wait_for(text, lambda t: t != text1, "the estimator's text should change with the dtype")
    _wait_for(fig, lambda f: f["data"] != fig1["data"],
              "the estimator's figure should change with the dtype")
    box.screenshot(path=str(ARTIFACTS / "nb01_memory_estimator.png"))
    pg.screenshot(path=str(ARTIFACTS / "nb01_page.png"))


def test_learner_on_01_predict_overflow(page):
    """Last in this file: it edits the exercise cells (tests/browser_learner.py)."""
    from browser_learner import learner_on_01
    learner_on_01(page)

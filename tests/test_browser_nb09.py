"""Notebook 09's pipeline-schedule widget in a real JupyterLab with headless Chromium
(tests/browser_support.py): Run All (it stops at the learner's unsolved exercise, after the
widget), then pick the interleaved schedule and then GPipe, asserting from the DOM that the
readout's bubble and the Gantt chart follow."""
from __future__ import annotations

import re

import pytest

from browser_support import ARTIFACTS, figure_state, notebook_page, settle, wait_for

pytestmark = pytest.mark.browser

NAME = "09_parallelism.ipynb"
BOX = ".ck-pipeline-schedules"


page = notebook_page(NAME)   # Run All: it stops at the learner's first unsolved exercise, after the widget


def _idle(text: str) -> float:
    m = re.search(r"idle ([0-9.]+)%", text)
    return float(m.group(1)) if m else -1.0


def test_schedule_choice_redraws_readout_and_gantt(page):
    pg = page
    box = pg.locator(BOX).first
    box.scroll_into_view_if_needed()
    pg.wait_for_selector(f"{BOX} .ck-pipeline-fig .js-plotly-plot .main-svg")
    # textContent, not innerText: JupyterLab skips rendering cells out of view (content-visibility)
    text = lambda: (pg.locator(f"{BOX} .ck-pipeline-text").first.text_content() or "").strip()
    fig = lambda: figure_state(pg, f"{BOX} .ck-pipeline-fig")
    wait_for(text, lambda t: t.startswith("1F1B, p=4, m=8") and _idle(t) == 27.3,
             "1F1B with p=4, m=8 idles (4-1)/(8+4-1) = 27.3%")
    wait_for(fig, lambda f: bool(f["data"]), "the Gantt chart should render")
    fig0, text0 = settle(pg, fig), text()

    pg.locator(f"{BOX} button:has-text('interleaved 1F1B')").first.click()
    wait_for(text, lambda t: t != text0 and "interleaved 1F1B (v=2)" in t and _idle(t) == 15.8,
             "interleaved with v=2 idles (4-1)/(2*8+4-1) = 15.8%")
    wait_for(fig, lambda f: f["data"] != fig0["data"], "the Gantt chart should redraw for interleaving")
    fig1, text1 = settle(pg, fig), text()

    pg.locator(f"{BOX} button:has-text('GPipe')").first.click()
    wait_for(text, lambda t: t != text1 and t.startswith("GPipe") and "more activations" in t,
             "GPipe holds more activations than 1F1B")
    wait_for(fig, lambda f: f["data"] != fig1["data"], "the Gantt chart should redraw for GPipe")
    box.screenshot(path=str(ARTIFACTS / "nb09_pipeline_schedules.png"))


def test_outputs_fit_the_notebook_column(page):
    """Last in this file: it resizes the window and opens the file browser (browser_support.LAYOUTS)."""
    from browser_support import assert_fits, check_layouts
    assert_fits(check_layouts(page), NAME)

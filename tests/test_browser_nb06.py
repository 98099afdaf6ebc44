"""Notebook 06's live-engine widget in a real JupyterLab, driven by headless Chromium (browser_support).

Runs the notebook's cells down to the widget (the learner's build stops "run all" at its first
exercise stub, which comes later), then acts as a learner: picks the static policy, presses Run,
and waits for the numbers and the figure to change to the static run's. Screenshots go to
artifacts/browser/. Skipped without Chromium or Playwright.
"""
from __future__ import annotations

import time

import pytest

from browser_support import ARTIFACTS, figure_state, notebook_page, settle, wait_for

pytestmark = pytest.mark.browser

NAME = "06_batching.ipynb"
BOX = ".ck-live-engine"


page = notebook_page(NAME, through="LiveEngine(")   # the cells down to the widget, none below


def test_live_engine_run_with_another_policy_changes_numbers_and_figure(page):
    pg = page
    box = pg.locator(BOX).first
    box.scroll_into_view_if_needed()
    readout = lambda: pg.inner_text(f"{BOX} .ck-live-readout")
    fig = lambda: figure_state(pg, BOX)
    wait_for(readout, lambda t: "continuous" in t and "TTFT p50" in t, "the widget should show its first run")
    wait_for(fig, lambda f: bool(f["data"]) and any("continuous: requests over" in t for t in f["texts"]),
             "the widget should draw the first run's Gantt")
    fig0, text0 = settle(pg, fig), readout()

    pg.locator(f"{BOX} .widget-toggle-buttons button", has_text="static").click()
    time.sleep(1.0)
    assert readout() == text0, "choosing a policy alone should not rerun the engine"
    pg.locator(f"{BOX} button", has_text="Run").click()
    wait_for(readout, lambda t: t != text0 and "static" in t and "TTFT p50" in t,
             "pressing Run should show the static run's numbers", timeout_s=90)
    wait_for(fig, lambda f: f["data"] != fig0["data"] and any("static: requests over" in t for t in f["texts"]),
             "pressing Run should redraw the figure for the static run", timeout_s=90)
    box.screenshot(path=str(ARTIFACTS / "nb06_live_engine.png"))


def test_outputs_fit_the_notebook_column(page):
    from browser_support import assert_fits, check_layouts
    assert_fits(check_layouts(page), "06_batching.ipynb")


def test_learner_on_06_first_preempt(page):
    """After the layout check (it runs the cells below the widget, down to the first exercise, and edits
    the exercise cells: tests/browser_learner.py)."""
    from browser_learner import learner_on_06
    learner_on_06(page)

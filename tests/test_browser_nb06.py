"""Notebook 06's live-engine widget in a real JupyterLab, driven by headless Chromium (browser_support).

Runs the notebook's cells down to the widget (the learner's build stops "run all" at its first
exercise stub, which comes later), then acts as a learner: picks the static policy, presses Run,
and waits for the numbers and the figure to change to the static run's. Screenshots go to
artifacts/browser/. Skipped without Chromium or Playwright.
"""
from __future__ import annotations

import time

import pytest

from browser_support import ARTIFACTS, ROOT, figure_state, jupyterlab, opened_notebook, settle, wait_for

pytestmark = pytest.mark.browser

NAME = "06_batching.ipynb"
BOX = ".ck-live-engine"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    with jupyterlab(ROOT / "notebooks" / NAME, tmp_path_factory.mktemp("lab")) as lab:
        with opened_notebook(lab, NAME, run_all=False) as pg:
            # make the cell after the widget's active, then run every cell above it
            last = pg.evaluate(
                "() => { const nb = window.jupyterapp.shell.currentWidget.content;"
                " const i = nb.widgets.findIndex(c => c.model.sharedModel.getSource().includes('LiveEngine('));"
                " nb.activeCellIndex = i + 1; return i; }")
            assert last > 0, "the notebook has no LiveEngine cell"
            pg.evaluate("window.jupyterapp.commands.execute('notebook:run-all-above')")
            deadline = time.time() + 240
            while time.time() < deadline:
                state = pg.evaluate(
                    "(last) => { const w = window.jupyterapp.shell.currentWidget;"
                    " const cells = w.content.widgets.slice(0, last + 1).filter(c => c.model.type === 'code');"
                    " const errors = cells.filter(c => c.model.outputs.toJSON()"
                    "   .some(o => o.output_type === 'error')).length;"
                    " return {left: cells.filter(c => c.model.executionCount === null).length, errors,"
                    "  idle: w.sessionContext.session.kernel.status === 'idle'}; }", last)
                if state["errors"]:
                    pytest.fail(f"cells above the widget raised in JupyterLab: {state}")
                if state["left"] == 0 and state["idle"]:
                    break
                time.sleep(1.0)
            else:
                pytest.fail(f"the cells above the widget did not run within 240 s: {state}")
            yield pg


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

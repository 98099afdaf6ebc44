"""Notebook 08's tiles widget in a real JupyterLab with headless Chromium (tests/browser_support.py).

Runs the learner's notebook (Run All stops at the first unsolved exercise, after the widget), then
acts as a learner: unticks "causal", picks another BLOCK_N, and steps the online-softmax row with
the keyboard, asserting from the DOM that the tile grid, the traffic numbers, the row figure and
its running max / sum text change each time.
"""
from __future__ import annotations

import re

import pytest

from browser_support import ARTIFACTS, figure_state, notebook_page, settle, wait_for

pytestmark = pytest.mark.browser

NAME = "08_flash_attention.ipynb"
BOX = ".ck-tiles-explorer"


page = notebook_page(NAME)   # Run All: it stops at the learner's first unsolved exercise, after the widget


def _skipped(text: str) -> int:
    m = re.search(r"(\d+)\s+skipped", text)
    return int(m.group(1)) if m else -1


def test_tiles_causal_and_block_size(page):
    pg = page
    box = pg.locator(BOX).first
    box.scroll_into_view_if_needed()
    pg.wait_for_selector(f"{BOX} .ck-tiles-fig .js-plotly-plot .main-svg")
    text = lambda: pg.inner_text(f"{BOX} .ck-tiles-text")
    tiles = lambda: figure_state(pg, f"{BOX} .ck-tiles-fig")
    traffic = lambda: figure_state(pg, f"{BOX} .ck-traffic-fig")
    wait_for(text, lambda t: _skipped(t) == 56, "S=1000, 128x64 causal should skip 56 tiles")
    wait_for(tiles, lambda f: bool(f["data"]), "the tile grid should render")
    wait_for(traffic, lambda f: bool(f["data"]), "the traffic bars should render")
    tiles0, traffic0, text0 = settle(pg, tiles), traffic(), text()

    pg.locator(f"{BOX} input[type=checkbox]").first.click()          # causal off
    wait_for(text, lambda t: _skipped(t) == 0 and t != text0, "without the mask no tile is skipped")
    wait_for(tiles, lambda f: f["data"] != tiles0["data"], "the tile grid should change with causal")
    wait_for(traffic, lambda f: f["data"] != traffic0["data"], "the traffic should change with causal")
    tiles1, text1 = settle(pg, tiles), text()

    pg.select_option(f"{BOX} select >> nth=1", label="128")          # BLOCK_N 64 -> 128
    wait_for(text, lambda t: t != text1 and "<b>" not in t, "the numbers should follow BLOCK_N")
    wait_for(tiles, lambda f: f["data"] != tiles1["data"] and any("128x128" in s for s in f["texts"]),
             "the grid should redraw for 128x128 tiles")
    box.screenshot(path=str(ARTIFACTS / "nb08_tiles_explorer.png"))


def test_row_stepper(page):
    pg = page
    box = pg.locator(BOX).first
    row_text = lambda: pg.inner_text(f"{BOX} .ck-row-text")
    row_fig = lambda: figure_state(pg, f"{BOX} .ck-row-fig")
    pg.locator(f"{BOX} .ck-row-fig").scroll_into_view_if_needed()
    wait_for(row_text, lambda t: "block 1 of" in t, "the row starts at its first key block")
    wait_for(row_fig, lambda f: bool(f["data"]), "the row figure should render")
    fig0, text0 = settle(pg, row_fig), row_text()
    handle = pg.locator(f"{BOX} .noUi-handle").nth(2)                 # S, query row, key block
    handle.focus()
    for _ in range(3):
        pg.keyboard.press("ArrowRight")
    wait_for(row_text, lambda t: "block 4 of" in t and t != text0, "the text should follow the key-block slider")
    wait_for(row_fig, lambda f: f["data"] != fig0["data"] and f["texts"] != fig0["texts"],
             "the row figure should show more keys folded")
    m = re.search(r"running max m = ([-\d.]+), running sum l = ([-\d.]+)", row_text())
    assert m, row_text()
    box.screenshot(path=str(ARTIFACTS / "nb08_row_stepper.png"))


def test_outputs_fit_the_notebook_column(page):
    """Last in this file: it resizes the window and opens the file browser (browser_support.LAYOUTS)."""
    from browser_support import assert_fits, check_layouts
    assert_fits(check_layouts(page), NAME)

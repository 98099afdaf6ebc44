"""Notebook 01's widgets in a real JupyterLab, driven by headless Chromium through Playwright.

Starts JupyterLab from the project's environment on a free localhost port with a token, opens a
copy of notebooks/01_dtypes_and_overflow.ipynb (so the committed notebook is never autosaved with
outputs), runs all cells, then drags the overflow explorer's slider and changes its format
selector, and changes the memory estimator's model and weight format, asserting from the DOM that
the text and the plotly figure changed. Screenshots go to artifacts/browser/.

Uses Debian's chromium (/usr/bin/chromium, `apt-get install chromium`), never a downloaded
browser; skipped when it or Playwright is absent.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_dtypes_and_overflow.ipynb"
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM = os.environ.get("COURSE_KIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
RUN_ALL_TIMEOUT_S = 150


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _jupyter() -> list[str]:
    venv = ROOT / ".venv" / "bin" / "jupyter"
    return [str(venv)] if venv.exists() else [sys.executable, "-m", "jupyter"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    work = tmp_path_factory.mktemp("lab")
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    # no "get Jupyter news?" pop-up over the screenshots
    settings = work / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "COURSE_KIT_SMOKE": "1", "JUPYTER_CONFIG_DIR": str(work / ".config"),
           "JUPYTERLAB_WORKSPACES_DIR": str(work / ".workspaces")}
    log = open(work / "lab.log", "w")
    proc = subprocess.Popen(
        _jupyter() + ["lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                      f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
                      "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
                      f"--LabApp.user_settings_dir={work / '.settings'}",
                      "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                log.flush()
                pytest.fail("JupyterLab did not start:\n" + (work / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
        yield {"base": base, "token": token, "work": work}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def page(lab):
    from playwright.sync_api import sync_playwright
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(30_000)
        url = f"{lab['base']}/lab/tree/{NOTEBOOK.name}?token={lab['token']}&reset"
        pg.goto(url)
        pg.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        # a kernel must be attached and idle before "run all"
        pg.wait_for_function(
            "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " const k = w && w.sessionContext && w.sessionContext.session &&"
            " w.sessionContext.session.kernel; return k && k.status === 'idle'; }",
            timeout=90_000)
        pg.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        _wait_all_cells_ran(pg)
        yield pg
        browser.close()


def _wait_all_cells_ran(pg) -> None:
    """Every code cell has an execution count and none raised."""
    deadline = time.time() + RUN_ALL_TIMEOUT_S
    state = {}
    while time.time() < deadline:
        state = pg.evaluate(
            "() => { const nb = window.jupyterapp.shell.currentWidget.content;"
            " const cells = nb.widgets.filter(c => c.model.type === 'code');"
            " const counts = cells.map(c => c.model.executionCount);"
            " const errors = cells.filter(c => c.model.outputs.toJSON()"
            "   .some(o => o.output_type === 'error')).map(c => c.model.sharedModel.getSource().slice(0, 80));"
            " const idle = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle';"
            " return {n: cells.length, done: counts.filter(x => x !== null).length, errors, idle}; }")
        if state["errors"]:
            pytest.fail(f"cells raised in JupyterLab: {state['errors']}")
        if state["done"] == state["n"] and state["idle"]:
            return
        time.sleep(1.0)
    pg.screenshot(path=str(ARTIFACTS / "nb01_timeout.png"), full_page=True)
    pytest.fail(f"not all cells ran within {RUN_ALL_TIMEOUT_S} s: {json.dumps(state)}")


def _figure_state(pg, root: str) -> dict:
    """What the plotly figure in a widget shows: its trace data and its title/annotation texts."""
    return pg.evaluate(
        "(root) => { const g = document.querySelector(root + ' .js-plotly-plot');"
        " if (!g || !g.data) return null;"
        " return {data: JSON.stringify(g.data.map(t => [t.name, t.x, t.y, t.text])),"
        "  texts: Array.from(g.querySelectorAll('.annotation-text, .gtitle')).map(e => e.textContent)}; }",
        root)


def _wait_for(fn, pred, what: str, timeout_s: float = 45.0):
    """Poll fn() until pred(value) holds; fail naming what was expected and the last value."""
    deadline = time.time() + timeout_s
    now = fn()
    while time.time() < deadline:
        now = fn()
        if now is not None and pred(now):
            return now
        time.sleep(0.25)
    raise AssertionError(f"{what} (after {timeout_s} s, last seen: {str(now)[:400]})")


def _settle(pg, fn, quiet_s: float = 1.5, timeout_s: float = 45.0):
    """Wait until the kernel is idle and fn() has not changed for quiet_s (updates drained)."""
    deadline = time.time() + timeout_s
    last, since = fn(), time.time()
    while time.time() < deadline:
        time.sleep(0.25)
        now = fn()
        idle = pg.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext"
                           ".session.kernel.status === 'idle'")
        if now != last or not idle:
            last, since = now, time.time()
        elif time.time() - since >= quiet_s:
            return now
    return last


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

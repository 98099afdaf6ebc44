"""Shared pieces of the browser tests: JupyterLab from the project's environment on a free localhost
port with a token, headless Debian Chromium driven by Playwright, and helpers that WAIT for a state
(never read it once: widgets render after their frame appears).

Use in a test module:

    from browser_support import notebook_page, wait_for, settle, figure_state
    page = notebook_page("06_batching.ipynb")        # a module-scoped fixture: the notebook, all cells run

Each module gets its own JupyterLab and a scratch copy of the notebook (the committed notebook is
never autosaved with outputs). Skipped when Chromium or Playwright is absent.
"""
from __future__ import annotations

import contextlib
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

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM = os.environ.get("COURSE_KIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
RUN_ALL_TIMEOUT_S = 300   # 2 loaded CPU cores: the slowest notebook runs to its exercise in about 2 minutes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _jupyter() -> list[str]:
    venv = ROOT / ".venv" / "bin" / "jupyter"
    return [str(venv)] if venv.exists() else [sys.executable, "-m", "jupyter"]


@contextlib.contextmanager
def jupyterlab(notebook: Path, tmp: Path, extra_args: tuple[str, ...] = ()):
    """JupyterLab serving a scratch folder that holds a copy of `notebook`; `extra_args` are more
    command-line options (the reopen test passes what `make lab` configures)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    work = tmp
    shutil.copy(notebook, work / notebook.name)
    # no "get Jupyter news?" pop-up over the screenshots
    settings = work / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    # every cell laid out, in view or not, so that one pass measures them all (wider_than_column)
    tracker = work / ".settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "COURSE_KIT_SMOKE": "1", "JUPYTER_CONFIG_DIR": str(work / ".config"),
           "JUPYTERLAB_WORKSPACES_DIR": str(work / ".workspaces")}
    log = open(work / "lab.log", "w")
    proc = subprocess.Popen(
        _jupyter() + ["lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                      f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
                      "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
                      f"--LabApp.user_settings_dir={work / '.settings'}",
                      "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", *extra_args]
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


@contextlib.contextmanager
def opened_notebook(lab: dict, name: str, run_all: bool = True, viewport: dict | None = None):
    """Headless Chromium on the notebook, a kernel attached and idle, and (by default) Run All, which
    stops at the learner's first unsolved exercise: every cell above it has run. `viewport`: the
    window's size (default 1400 x 1000)."""
    from playwright.sync_api import sync_playwright
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            pg = browser.new_page(viewport=viewport or {"width": 1400, "height": 1000})
            pg.set_default_timeout(30_000)
            pg.goto(f"{lab['base']}/lab/tree/{name}?token={lab['token']}&reset")
            pg.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            # a kernel must be attached and idle before "run all"
            pg.wait_for_function(
                "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                " const k = w && w.sessionContext && w.sessionContext.session &&"
                " w.sessionContext.session.kernel; return k && k.status === 'idle'; }",
                timeout=90_000)
            if run_all:
                pg.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
                wait_ran_to_first_exercise(pg, name)
            yield pg
        finally:
            browser.close()


def run_through(pg, marker: str, timeout_s: float = 240) -> int:
    """Run every cell down to and including the first cell whose source holds `marker` (a widget's
    constructor, say), and none below it; fail if one of them raised. Returns that cell's index."""
    last = pg.evaluate(
        "(m) => { const nb = window.jupyterapp.shell.currentWidget.content;"
        " const i = nb.widgets.findIndex(c => c.model.sharedModel.getSource().includes(m));"
        " nb.activeCellIndex = i + 1; return i; }", marker)
    assert last > 0, f"the notebook has no cell with {marker!r}"
    pg.evaluate("window.jupyterapp.commands.execute('notebook:run-all-above')")
    deadline, state = time.time() + timeout_s, {}
    while time.time() < deadline:
        state = pg.evaluate(
            "(last) => { const w = window.jupyterapp.shell.currentWidget;"
            " const cells = w.content.widgets.slice(0, last + 1).filter(c => c.model.type === 'code');"
            " const errors = cells.filter(c => c.model.outputs.toJSON()"
            "   .some(o => o.output_type === 'error')).length;"
            " return {left: cells.filter(c => c.model.executionCount === null).length, errors,"
            "  idle: w.sessionContext.session.kernel.status === 'idle'}; }", last)
        if state["errors"]:
            pytest.fail(f"cells down to {marker!r} raised in JupyterLab: {state}")
        if state["left"] == 0 and state["idle"]:
            return last
        time.sleep(1.0)
    pytest.fail(f"the cells down to {marker!r} did not run within {timeout_s} s: {state}")


def notebook_page(name: str, through: str | None = None):
    """A module-scoped pytest fixture: `name` (in notebooks/) open in JupyterLab, run to its first
    exercise, or only down to the cell holding `through` when the tests need no more (run_through)."""
    @pytest.fixture(scope="module")
    def page(tmp_path_factory):
        with jupyterlab(ROOT / "notebooks" / name, tmp_path_factory.mktemp("lab")) as lab:
            with opened_notebook(lab, name, run_all=through is None) as pg:
                if through is not None:
                    run_through(pg, through)
                yield pg
    return page


def wait_ran_to_first_exercise(pg, name: str = "notebook") -> dict:
    """Run all stops at the learner's first unsolved exercise (its stub or check raises, as it does
    for a learner). Wait until every cell above it ran and the kernel is idle; fail if a cell that is
    not an exercise raised."""
    deadline = time.time() + RUN_ALL_TIMEOUT_S
    state = {}
    while time.time() < deadline:
        state = pg.evaluate(
            "() => { const nb = window.jupyterapp.shell.currentWidget.content;"
            " const cells = nb.widgets.filter(c => c.model.type === 'code');"
            " const errs = cells.map(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));"
            " const first = errs.indexOf(true);"
            " const upto = first < 0 ? cells.length : first;"
            " const tags = first < 0 ? [] : (cells[first].model.getMetadata('tags') || []);"
            " const idle = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle';"
            " return {n: cells.length, ran: cells.slice(0, upto).every(c => c.model.executionCount !== null),"
            "  idle, stop: first < 0 ? null : cells[first].model.sharedModel.getSource().slice(0, 80),"
            "  exercise: first < 0 || tags.includes('raises-exception')}; }")
        if state["stop"] is not None and not state["exercise"]:
            pytest.fail(f"a cell that is not an exercise raised in JupyterLab: {state['stop']!r}")
        if state["ran"] and state["idle"]:
            return state
        time.sleep(1.0)
    pg.screenshot(path=str(ARTIFACTS / f"{Path(name).stem}_timeout.png"), full_page=True)
    pytest.fail(f"the cells above the first exercise did not run within {RUN_ALL_TIMEOUT_S} s: {json.dumps(state)}")


def figure_state(pg, root: str) -> dict:
    """What the plotly figure in a widget shows: its trace data and its title/annotation texts."""
    return pg.evaluate(
        "(root) => { const g = document.querySelector(root + ' .js-plotly-plot');"
        " if (!g || !g.data) return null;"
        " return {data: JSON.stringify(g.data.map(t => [t.name, t.x, t.y, t.text])),"
        "  texts: Array.from(g.querySelectorAll('.annotation-text, .gtitle')).map(e => e.textContent)}; }",
        root)


def wait_for(fn, pred, what: str, timeout_s: float = 45.0):
    """Poll fn() until pred(value) holds; fail naming what was expected and the last value."""
    deadline = time.time() + timeout_s
    now = fn()
    while time.time() < deadline:
        now = fn()
        if now is not None and pred(now):
            return now
        time.sleep(0.25)
    raise AssertionError(f"{what} (after {timeout_s} s, last seen: {str(now)[:400]})")


def settle(pg, fn, quiet_s: float = 1.5, timeout_s: float = 45.0):
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




COLUMN_PX = 1100   # the notebook column every figure, widget and table must fit (course_kit.plots.tables)
SLACK_PX = 2       # sub-pixel rounding

# Every code cell's outputs, measured in one pass: JupyterLab's default windowing skips the layout of
# cells out of view, so jupyterlab() turns windowing off ("none") and every cell is laid out.
MEASURE = """() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  return nb.widgets.filter(c => c.model.type === 'code').map(cell => {
    const out = [];
    cell.node.querySelectorAll('.jp-OutputArea-output').forEach(o => {
      const box = o.getBoundingClientRect();
      if (box.width === 0) return;
      let right = box.right, who = '';
      o.querySelectorAll('*').forEach(e => {
        if (e.closest('pre')) return;                       // code listings may scroll
        const r = e.getBoundingClientRect();
        if (r.width > 0 && r.height > 0 && r.right > right) {
          right = r.right; who = e.tagName.toLowerCase() + '.' + (e.className && e.className.baseVal !== undefined
            ? e.className.baseVal : e.className);
        }
      });
      const scrolls = [o, ...o.querySelectorAll('*')].filter(e => !e.closest('pre') && e.tagName !== 'PRE'
        && e.scrollWidth > e.clientWidth + 2 && getComputedStyle(e).overflowX !== 'visible'
        && e.clientWidth > 0);
      out.push({width: box.width, over: right - box.right, who: String(who).slice(0, 80),
                scrolls: scrolls.map(e => e.tagName.toLowerCase() + '.' + String(e.className).slice(0, 40)
                                           + ' ' + e.scrollWidth + '>' + e.clientWidth).slice(0, 3)});
    });
    return {source: cell.model.sharedModel.getSource().split('\\n')[0].slice(0, 70), outputs: out,
            declared: cell.model.outputs.length, drawn: cell.node.querySelectorAll('.jp-OutputArea-output').length};
  });
}"""


def wider_than_column(pg) -> tuple[list[str], float]:
    """Every code cell's outputs measured (all cells are laid out: windowing is off): (what reaches
    past its output area or scrolls sideways, one line per offender; the widest output area). Source
    listings (`pre`) may scroll, as code does."""
    bad, widest_area = [], 0.0
    cells = pg.evaluate(MEASURE)
    # a cell whose outputs were drawn but measured nothing was not laid out: the check would pass blind
    blind = [i + 1 for i, c in enumerate(cells) if c["drawn"] and not c["outputs"]]
    assert len(blind) <= len(cells) // 10, f"code cells {blind} were not laid out (windowing on?)"
    for i, got in enumerate(cells):
        for o in got["outputs"]:
            widest_area = max(widest_area, o["width"])
            if o["over"] > SLACK_PX or o["scrolls"]:
                bad.append(f"code cell {i + 1} ({got['source']!r}): {o['over']:.0f} px past the column"
                           f" ({o['who']}); scrolling: {o['scrolls']}")
    return bad, widest_area


# (window, sidebars): a 1,400 px window with JupyterLab's file browser open, as a learner first sees
# it (issue 42 found the overflow there), then, in the same session, a 1,200 px window with the
# sidebars closed. One Run All per notebook serves both.
LAYOUTS = (("1400-sidebar", {"width": 1400, "height": 1000}, False),
           ("1200-closed", {"width": 1200, "height": 1000}, True))




def check_layouts(pg) -> dict[str, tuple[list[str], float]]:
    """wider_than_column in each of LAYOUTS, on one page that has already run its cells."""
    found = {}
    for layout, viewport, collapse in LAYOUTS:
        pg.set_viewport_size(viewport)
        if collapse:
            pg.evaluate("window.jupyterapp.shell.collapseLeft(); window.jupyterapp.shell.collapseRight()")
        else:
            pg.evaluate("window.jupyterapp.commands.execute('filebrowser:activate')")
        pg.wait_for_timeout(1000)              # plotly and the widgets follow the new width
        found[layout] = wider_than_column(pg)
    return found


def assert_fits(found: dict[str, tuple[list[str], float]], name: str) -> None:
    for layout, (bad, widest) in found.items():
        assert widest <= COLUMN_PX + 40, f"{name}, {layout}: the output column was {widest:.0f} px, not ~{COLUMN_PX}"
        assert not bad, f"{name}, {layout}: outputs wider than the notebook column:\n" + "\n".join(bad)

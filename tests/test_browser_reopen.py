"""Widgets survive a reopened notebook (issue 42 item 4), in JupyterLab configured as `make lab`
configures it (widget state saved; course_kit.lab's pre-save hook): run a notebook with a course-style
widget (controls and a plotly figure in an Output) and a widget whose model is gone (closed), save,
shut its kernel down, open it again in a new page. The first widget is drawn from its saved state, the
second shows the one-line "re-run this cell" note, and nothing says "model not found"."""
from __future__ import annotations

import json
import time
import urllib.request

import pytest

from browser_support import ARTIFACTS, jupyterlab, opened_notebook, wait_for
from course_kit import lab

pytestmark = pytest.mark.browser

CELLS = [
    "import ipywidgets as W\nimport plotly.graph_objects as go\nfrom IPython.display import display\n"
    "from course_kit.widgets import show\n"
    "out = W.Output()\nwith out:\n    display(go.Figure(go.Bar(x=['a', 'b'], y=[1, 2])))\n"
    "show(W.VBox([W.IntSlider(value=7, description='kept'), out]))",
    "gone = W.IntSlider(description='gone')\nshow(gone)\ngone.close()",
]


def _notebook() -> dict:
    return {"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": src, "execution_count": None,
                       "outputs": []} for i, src in enumerate(CELLS)],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def _api(lab_info: dict, path: str, method: str = "GET"):
    req = urllib.request.Request(f"{lab_info['base']}/api/{path}?token={lab_info['token']}", method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


def _outputs_text(pg) -> list[str]:
    return pg.evaluate("() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell .jp-OutputArea'))"
                       ".map(e => e.innerText)")


def test_a_saved_notebook_reopens_without_model_not_found(tmp_path):
    src = tmp_path / "src" / "reopen.ipynb"
    src.parent.mkdir()
    src.write_text(json.dumps(_notebook()))
    work = tmp_path / "lab"
    work.mkdir()
    settings = lab.write_settings(folder=work / ".app-settings").parents[1]
    args = (f"--LabApp.app_settings_dir={settings}", "--ContentsManager.pre_save_hook=course_kit.lab.pre_save")
    with jupyterlab(src, work, args) as info:
        with opened_notebook(info, "reopen.ipynb", run_all=False) as pg:
            pg.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            wait_for(lambda: pg.evaluate("() => document.querySelectorAll('.jp-Notebook .widget-slider').length"),
                     lambda n: n >= 1, "the live slider should render")
            wait_for(lambda: pg.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"),
                     lambda s: s == "idle", "the kernel should finish")
            time.sleep(1.0)
            pg.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
            wait_for(lambda: json.loads((work / "reopen.ipynb").read_text())["cells"][1]["outputs"],
                     lambda outs: bool(outs), "the notebook should be saved with its outputs")
        saved = json.loads((work / "reopen.ipynb").read_text())
        assert lab.saved_models(saved), "make lab's settings should save the widget state"
        kept, gone = (c["outputs"][0]["data"] for c in saved["cells"])
        assert lab.WIDGET_VIEW in kept and lab.WIDGET_VIEW not in gone and "".join(gone["text/plain"]) == lab.RERUN_NOTE
        for session in _api(info, "sessions"):
            _api(info, f"sessions/{session['id']}", "DELETE")   # the kernel is gone, as after closing the lab
        with opened_notebook(info, "reopen.ipynb", run_all=False) as pg:
            texts = wait_for(lambda: (pg.evaluate("() => document.querySelectorAll('.jp-Notebook .widget-slider').length"),
                                      _outputs_text(pg)),
                             lambda t: t[0] >= 1 and any(lab.RERUN_NOTE in x for x in t[1]),
                             "the saved widget should be drawn again and the lost one show the note")
            time.sleep(2.0)                                      # anything late would show up now
            shown = _outputs_text(pg)
            pg.screenshot(path=str(ARTIFACTS / "reopen.png"), full_page=True)
            assert not any("model not found" in t for t in shown), shown
            assert not any("Error displaying widget" in t for t in shown), shown
            assert texts[0] >= 1

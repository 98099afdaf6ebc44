"""Executed copies carry each plotly figure as a PNG, stay small, and keep no frozen progress bars."""
import base64
import json
import os

import pytest

from course_kit import bench, cli
from course_kit.plots import static

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _figure(points: int) -> dict:
    import plotly.graph_objects as go
    return json.loads(go.Figure(go.Scatter(y=[(i * 37) % 101 for i in range(points)])).to_json())


def _executed(*outputs) -> dict:
    return {"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": "x", "execution_count": i,
                       "outputs": [o]} for i, o in enumerate(outputs)],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _fig_output(fig: dict) -> dict:
    return {"output_type": "display_data", "metadata": {},
            "data": {static.PLOTLY_MIME: fig, "text/html": "<div>fig</div>", "text/plain": "Figure"}}


TQDM_WIDGET = {"output_type": "display_data", "metadata": {},
               "data": {static.WIDGET_MIME: {"model_id": "abc", "version_major": 2, "version_minor": 0},
                        "text/plain": "static:   0%|          | 0/148756 [00:00<?, ?it/s]"}}
TQDM_TEXT = {"output_type": "stream", "name": "stderr", "text": "prefill:  0%|          | 0/10 [00:00<?, ?it/s]"}
PRINTED = {"output_type": "stream", "name": "stdout", "text": "throughput 100% of the budget | 3 requests\n"}


@pytest.fixture
def fake_png(monkeypatch):
    """A renderer that is fast and always there (kaleido's own test is below)."""
    monkeypatch.setattr(static, "to_png", lambda fig, *a, **k: PNG_MAGIC + b"x" * 100)


def test_kaleido_renders_a_figure_offline():
    pytest.importorskip("kaleido")
    png = static.to_png(_figure(20))
    assert png is not None and png.startswith(PNG_MAGIC) and len(png) > 2000


def test_every_figure_gets_a_png_and_large_ones_keep_only_it(fake_png):
    small, large = _figure(10), _figure(30000)
    nb = _executed(_fig_output(small), _fig_output(large), TQDM_WIDGET, TQDM_TEXT, PRINTED)
    stats = static.finish_executed(nb, figure_max=len(json.dumps(small)) + 1000)
    outs = [o for c in nb["cells"] for o in c["outputs"]]
    assert stats["images"] == 2 and stats["dropped"] == 1 and stats["progress_bars"] == 2
    assert base64.b64decode(outs[0]["data"]["image/png"]).startswith(PNG_MAGIC)
    assert static.PLOTLY_MIME in outs[0]["data"]                  # small: still interactive
    assert static.PLOTLY_MIME not in outs[1]["data"] and "text/html" not in outs[1]["data"]
    assert "image/png" in outs[1]["data"]
    assert outs[2] == PRINTED                                     # a printed '%' and '|' is not a bar
    assert len(outs) == 3


def test_the_budget_drops_the_largest_interactive_figures_first(fake_png):
    figs = [_figure(n) for n in (3000, 200, 1500)]
    import copy
    nb = _executed(*[_fig_output(f) for f in figs])
    whole = static.finish_executed(copy.deepcopy(nb), budget=10**9, figure_max=10**9)["bytes"]
    budget = whole - len(json.dumps(figs[0])) // 2       # dropping the largest is enough
    stats = static.finish_executed(nb, budget=budget, figure_max=10**9)
    kept = [static.PLOTLY_MIME in c["outputs"][0]["data"] for c in nb["cells"]]
    assert kept == [False, True, True] and stats["dropped"] == 1 and stats["bytes"] <= budget


def test_without_a_renderer_nothing_is_dropped(monkeypatch):
    monkeypatch.setattr(static, "to_png", lambda *a, **k: None)
    nb = _executed(_fig_output(_figure(30000)))
    stats = static.finish_executed(nb, budget=10, figure_max=10)
    assert stats["images"] == 0 and stats["dropped"] == 0
    assert static.PLOTLY_MIME in nb["cells"][0]["outputs"][0]["data"]


def test_progress_bars_are_off_in_executed_copies(monkeypatch):
    monkeypatch.setenv("COURSE_KIT_STATIC_FIGURES", "1")
    assert bench.progress(range(3)).disable
    assert bench.progress(range(3), disable=False).disable   # a notebook's long cell asks for one: not here
    monkeypatch.delenv("COURSE_KIT_STATIC_FIGURES")
    assert not bench.progress(range(3), file=open(os.devnull, "w")).disable


def test_record_runs_papermill_with_static_figures_and_adds_the_pngs(tmp_path, monkeypatch, fake_png):
    import papermill
    seen = {}

    def execute(src, out, **kw):
        seen["env"] = os.environ.get("COURSE_KIT_STATIC_FIGURES")
        with open(out, "w") as f:
            json.dump(_executed(_fig_output(_figure(10)), TQDM_WIDGET), f)
    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.delenv("COURSE_KIT_STATIC_FIGURES", raising=False)
    assert cli.main(["record", "00", "--out", str(tmp_path)]) == 0
    assert seen["env"] == "1" and "COURSE_KIT_STATIC_FIGURES" not in os.environ
    nb = json.loads((tmp_path / "00_start_here.ipynb").read_text())
    outs = [o for c in nb["cells"] for o in c["outputs"]]
    assert len(outs) == 1 and "image/png" in outs[0]["data"]
    log = (tmp_path / "record.log").read_text()
    assert "00_start_here.ipynb" in log and "1 figures as PNG" in log


def test_finish_only_adds_pngs_to_copies_made_where_no_renderer_was(tmp_path, monkeypatch, capsys):
    """A GPU machine without kaleido records the JSON; `--finish-only` adds the PNGs elsewhere."""
    monkeypatch.setattr(static, "to_png", lambda *a, **k: None)
    path = tmp_path / "00_start_here.ipynb"
    path.write_text(json.dumps(_executed(_fig_output(_figure(10)))))
    assert cli.main(["record", "00", "--out", str(tmp_path), "--finish-only"]) == 0
    assert "1 figures without a PNG" in capsys.readouterr().out
    monkeypatch.setattr(static, "to_png", lambda fig, *a, **k: PNG_MAGIC + b"x")
    assert cli.main(["record", "00", "--out", str(tmp_path), "--finish-only"]) == 0
    assert "1 figures as PNG" in capsys.readouterr().out
    assert "image/png" in json.loads(path.read_text())["cells"][0]["outputs"][0]["data"]


def _banner(text):
    return {"cell_type": "markdown", "metadata": {"tags": [static.PAPERMILL_BANNER_TAG]}, "source": text}


def _raising(tags):
    return {"cell_type": "code", "metadata": {"tags": tags}, "source": "x",
            "outputs": [{"output_type": "error", "ename": "NotImplementedError", "evalue": "", "traceback": []}]}


def test_papermills_banners_go_only_when_every_error_is_an_unsolved_exercise():
    # the H200 copies of 2026-12-02 said "encountered an exception here and stopped" above an
    # exercise stub, although every cell after it ran
    learner = {"cells": [_banner("An Exception was encountered"), {"cell_type": "markdown", "source": "x"},
                         _banner("stopped:"), _raising(["raises-exception"])]}
    assert static.drop_exercise_banners(learner) == 2
    assert [c["cell_type"] for c in learner["cells"]] == ["markdown", "code"]
    broken = {"cells": [_banner("An Exception was encountered"), _raising(["raises-exception"]),
                        _banner("stopped:"), _raising([])]}
    assert static.drop_exercise_banners(broken) == 0 and len(broken["cells"]) == 4   # a real failure keeps them
    assert static.finish_executed({"cells": [_banner("x"), _raising(["raises-exception"])]})["papermill_banners"] == 1

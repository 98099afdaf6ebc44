"""A widget survives a reopened notebook (course_kit.lab) and executed copies show a widget's image
only with the image (widgets.show, plots.static; issue 41 item 10)."""
import json

import pytest

from course_kit import lab, widgets
from course_kit.plots import static

VIEW = lab.WIDGET_VIEW


def _nb(model_ids, saved=()):
    cells = [{"cell_type": "code", "metadata": {}, "source": "show(w)", "execution_count": 1,
              "outputs": [{"output_type": "display_data", "metadata": {},
                           "data": {VIEW: {"model_id": m, "version_major": 2, "version_minor": 0}, "text/plain": "VBox(...)"}}]}
             for m in model_ids]
    meta = {"widgets": {lab.WIDGET_STATE: {"state": {m: {"model_name": "VBoxModel"} for m in saved},
                                           "version_major": 2, "version_minor": 0}}} if saved else {}
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def test_a_widget_without_saved_state_is_saved_as_the_rerun_note():
    nb = _nb(["alive", "gone"], saved=["alive"])
    lab.pre_save(model={"type": "notebook", "content": nb}, path="work/00.ipynb", contents_manager=None)
    alive, gone = (c["outputs"][0]["data"] for c in nb["cells"])
    assert VIEW in alive                                       # its state is saved: JupyterLab draws it again
    assert VIEW not in gone and gone["text/plain"] == lab.RERUN_NOTE
    assert "re-run this cell" in lab.RERUN_NOTE and "\n" not in lab.RERUN_NOTE
    assert lab.drop_dead_widgets(_nb(["x"])) == 1 and lab.drop_dead_widgets(nb) == 0
    lab.pre_save(model={"type": "file", "content": "text"}, path="a.txt")   # not a notebook: untouched


def test_settings_turn_on_widget_state_saving(tmp_path):
    path = lab.write_settings(tmp_path)
    assert path == tmp_path / "share/jupyter/lab/settings/overrides.d/course_kit.json"
    assert json.loads(path.read_text()) == {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}


def test_make_lab_writes_the_settings_and_installs_the_hook():
    from pathlib import Path
    make = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert "-m course_kit.lab $(VENV)" in make
    assert "--ContentsManager.pre_save_hook=course_kit.lab.pre_save" in make


class _Shown:
    def __init__(self, monkeypatch):
        self.outputs = []
        import IPython.display as d
        monkeypatch.setattr(d, "display", lambda obj, raw=False, metadata=None: self.outputs.append((obj, metadata)))


def test_a_widget_is_shown_with_the_rerun_note_as_its_text(monkeypatch):
    import ipywidgets as W
    shown = _Shown(monkeypatch)
    monkeypatch.delenv("COURSE_KIT_STATIC_FIGURES", raising=False)
    widgets.show(W.IntSlider(), figure=None)
    (bundle, _), = shown.outputs
    assert VIEW in bundle and bundle["text/plain"] == lab.RERUN_NOTE


def _figure():
    import plotly.graph_objects as go
    return go.Figure(go.Bar(x=["a", "b"], y=[1, 2]))


def test_recording_with_a_renderer_shows_the_image_and_its_caption(monkeypatch):
    import ipywidgets as W
    monkeypatch.setenv("COURSE_KIT_STATIC_FIGURES", "1")
    monkeypatch.setattr(static, "to_png", lambda fig, *a, **k: b"\x89PNG\r\n\x1a\n" + b"x" * 10)
    shown = _Shown(monkeypatch)
    widgets.show(W.IntSlider(), _figure(), "the explorer")
    kinds = [type(o).__name__ if not isinstance(o, dict) else "bundle" for o, _ in shown.outputs]
    assert kinds == ["bundle", "Image", "Markdown"]
    assert "initial view of the explorer" in shown.outputs[2][0].data


def test_recording_without_a_renderer_says_nothing_until_the_finishing_pass(monkeypatch):
    import ipywidgets as W
    monkeypatch.setenv("COURSE_KIT_STATIC_FIGURES", "1")
    monkeypatch.setattr(static, "to_png", lambda fig, *a, **k: None)
    shown = _Shown(monkeypatch)
    widgets.show(W.IntSlider(), _figure(), "the explorer")
    assert len(shown.outputs) == 2                     # the widget, and a pending figure: no caption
    pending, meta = shown.outputs[1]
    assert pending["text/plain"] == "" and meta["course_kit"]["widget_static"]["pending"]
    assert not any("initial view" in json.dumps(o, default=str) for o, _ in shown.outputs)

    def executed():
        return {"cells": [{"cell_type": "code", "metadata": {}, "source": "", "execution_count": 1, "outputs": [
            {"output_type": "display_data", "metadata": meta, "data": pending}]}], "metadata": {}}
    nb = executed()                                    # the finishing pass cannot render either: removed
    stats = static.finish_executed(nb)
    assert nb["cells"][0]["outputs"] == [] and stats["widget_images_removed"] == 1
    monkeypatch.setattr(static, "to_png", lambda fig, *a, **k: b"\x89PNG\r\n\x1a\n" + b"x" * 10)
    nb = executed()                                    # it can: the image, then its caption
    stats = static.finish_executed(nb)
    image, caption = nb["cells"][0]["outputs"]
    assert "image/png" in image["data"] and static.PLOTLY_MIME not in image["data"] and stats["widget_images"] == 1
    assert "initial view of the explorer" in caption["data"]["text/markdown"]


def test_the_finishing_pass_turns_stateless_widgets_into_the_note():
    nb = _nb(["gone"])
    stats = static.finish_executed(nb)
    assert stats["dead_widgets"] == 1 and nb["cells"][0]["outputs"][0]["data"]["text/plain"] == lab.RERUN_NOTE


def test_kaleido_path_really_draws(monkeypatch):
    pytest.importorskip("kaleido")
    import ipywidgets as W
    monkeypatch.setenv("COURSE_KIT_STATIC_FIGURES", "1")
    shown = _Shown(monkeypatch)
    widgets.show(W.IntSlider(), _figure(), "the explorer")
    assert [type(o).__name__ for o, _ in shown.outputs[1:]] == ["Image", "Markdown"]

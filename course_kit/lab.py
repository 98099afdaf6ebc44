"""What `make lab` sets up in JupyterLab so that widgets survive a reopened notebook.

- `write_settings(prefix)`: JupyterLab's widget manager saves widget state into the notebook on
  every save (`saveState`, off by default), so a reopened notebook draws its widgets from that state
  instead of "Error displaying widget: model not found". Written to the environment's
  `share/jupyter/lab/settings/overrides.d/course_kit.json` (JupyterLab merges every file there
  under the environment's own overrides.json), so only the course's JupyterLab is changed.
- `pre_save` (JupyterLab's `ContentsManager.pre_save_hook`): a widget output whose state is not in
  the notebook (it was saved without it, or its kernel died first) can never be drawn again, so it is
  saved as the one-line note `RERUN_NOTE` instead of a reference to a model that no longer exists.
- `RERUN_NOTE` is also the text every course widget carries beside its live view (`widgets.show`),
  which is what a reader without the widget (GitHub, nbviewer, a reopened copy) sees.

Standard library only: the Jupyter server imports the hook.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
RERUN_NOTE = "↻ This widget is not live: re-run this cell to use it."
WIDGET_PLUGIN = "@jupyter-widgets/jupyterlab-manager:plugin"


def settings_dir(prefix: str | os.PathLike = sys.prefix) -> Path:
    """JupyterLab's application settings folder of the environment at `prefix`."""
    return Path(prefix) / "share" / "jupyter" / "lab" / "settings"


def write_settings(prefix: str | os.PathLike = sys.prefix, folder: str | os.PathLike | None = None) -> Path:
    """Turn on widget-state saving in this environment's JupyterLab (or in the settings `folder`)."""
    path = Path(folder or settings_dir(prefix)) / "overrides.d" / "course_kit.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({WIDGET_PLUGIN: {"saveState": True}}, indent=2) + "\n")
    return path


def saved_models(nb: dict) -> set[str]:
    """The widget model ids whose state the notebook carries (JupyterLab's saveState)."""
    widgets = (nb.get("metadata") or {}).get("widgets") or {}
    state = (widgets.get(WIDGET_STATE) or {}).get("state") or {}
    return set(state)


def drop_dead_widgets(nb: dict) -> int:
    """Replace each widget output whose model state the notebook does not carry by `RERUN_NOTE`
    (changed in place). Returns how many were replaced."""
    alive = saved_models(nb)
    replaced = 0
    for cell in nb.get("cells") or []:
        for output in cell.get("outputs") or []:
            data = output.get("data") or {}
            view = data.get(WIDGET_VIEW)
            if not isinstance(view, dict) or view.get("model_id") in alive:
                continue
            del data[WIDGET_VIEW]
            data["text/plain"] = RERUN_NOTE
            replaced += 1
    return replaced


def pre_save(model: dict, path: str = "", contents_manager: Any = None, **kwargs: Any) -> None:
    """JupyterLab's pre-save hook (`--ContentsManager.pre_save_hook=course_kit.lab.pre_save`)."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        drop_dead_widgets(model["content"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prefix = argv[0] if argv else sys.prefix
    print(f"JupyterLab saves widget state: {write_settings(prefix)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Static images of plotly figures, for executed copies read outside Jupyter (GitHub, nbviewer).

`course-kit record` executes each notebook with COURSE_KIT_STATIC_FIGURES=1 (widgets then also show a
PNG of their first view, and progress bars stay out), then `finish_executed` post-processes the copy:
- every plotly figure output gets an `image/png` beside its interactive JSON;
- figures whose JSON is large, and then the largest others until the copy is under about 1.5 MB,
  keep only the PNG (the interactive figure is one run of the notebook away);
- progress bars frozen at their first state ("0%|...") are removed.

The PNG is made by kaleido. kaleido 0.2.1 (the `record` extra) carries its own Chromium, so it works on
GPU machines with no browser; it is given the plotly.js of the installed plotly (its default would
fetch one from a CDN). kaleido >= 1 (system Chrome) is used through plotly when that is what is
installed. Without either, no image is added and nothing fails.
"""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
FIGURE_JSON_MAX = 200_000          # characters of a figure's JSON above which only its PNG is kept
NOTEBOOK_BUDGET = 1_500_000        # bytes an executed copy should stay under
WIDTH, HEIGHT = 900, 450
_PROGRESS = re.compile(r"^[^\n|]*\d+%\|.*\|\s*\d+/\d*")   # tqdm's text: "desc:  0%|     | 0/148 [...]"

_scope: Any = None


def _kaleido_scope() -> Any:
    """kaleido 0.2.1's renderer, started once per process, with the local plotly.js."""
    global _scope
    if _scope is None:
        import plotly
        from kaleido.scopes.plotly import PlotlyScope
        js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        _scope = PlotlyScope(plotlyjs=str(js) if js.is_file() else None)
    return _scope


def _size(figure: dict, width: int | None, height: int | None) -> tuple[int, int]:
    layout = figure.get("layout") or {}
    return int(width or layout.get("width") or WIDTH), int(height or layout.get("height") or HEIGHT)


def to_png(figure: Any, width: int | None = None, height: int | None = None) -> bytes | None:
    """The figure (a plotly Figure or its JSON dict) as PNG bytes, or None when no renderer works."""
    fig = figure if isinstance(figure, dict) else figure.to_plotly_json()
    w, h = _size(fig, width, height)
    try:
        import kaleido
        if getattr(kaleido, "__version__", "1").startswith("0."):
            return _kaleido_scope().transform(fig, format="png", width=w, height=h)
        import plotly.io as pio
        return pio.to_image(fig, format="png", width=w, height=h)
    except Exception:  # noqa: BLE001 - kaleido missing or unable to start: no static copy, never a failure
        return None


def display_static(figure: Any) -> bool:
    """Display a PNG of `figure`; True when one was shown."""
    png = to_png(figure)
    if png is None:
        return False
    from IPython.display import Image, display
    display(Image(png))
    return True


WIDGET_STATIC = "widget_static"   # course_kit metadata of a widget's static image: {"what", "pending"}


def widget_caption(what: str) -> str:
    return f"*Above: the initial view of {what}. In Jupyter it is live: move its controls.*"


def display_widget_static(figure: Any, what: str) -> bool:
    """A widget's static image for an executed copy: its PNG and the caption saying so, True; or,
    where no PNG can be made in this process, the figure's JSON marked pending and no caption, False:
    `finish_executed` then turns it into the PNG and its caption, or removes it (never a caption
    with no image above it)."""
    from IPython.display import Image, Markdown, display
    png = to_png(figure)
    if png is not None:
        display(Image(png), metadata={"course_kit": {WIDGET_STATIC: {"what": what}}})
        display(Markdown(widget_caption(what)))
        return True
    fig = figure if isinstance(figure, dict) else json.loads(figure.to_json())
    display({PLOTLY_MIME: fig, "text/plain": ""}, raw=True,
            metadata={"course_kit": {WIDGET_STATIC: {"what": what, "pending": True}}})
    return False


def _pending(output: dict) -> dict | None:
    meta = ((output.get("metadata") or {}).get("course_kit") or {}).get(WIDGET_STATIC)
    return meta if isinstance(meta, dict) and meta.get("pending") else None


def _finish_widget_statics(nb: dict) -> tuple[int, int]:
    """Pending widget images (display_widget_static): PNG and caption, or removed. (made, removed)"""
    made = removed = 0
    for cell, outputs in _outputs(nb):
        kept = []
        for output in outputs:
            meta = _pending(output)
            if meta is None:
                kept.append(output)
                continue
            png = to_png(output["data"][PLOTLY_MIME])
            if png is None:
                removed += 1
                continue
            made += 1
            kept.append({"output_type": "display_data", "metadata": {"course_kit": {WIDGET_STATIC: {"what": meta["what"]}}},
                         "data": {"image/png": base64.b64encode(png).decode("ascii"),
                                  "text/plain": f"<the initial view of {meta['what']}>"}})
            kept.append({"output_type": "display_data", "metadata": {},
                         "data": {"text/markdown": widget_caption(meta["what"]), "text/plain": widget_caption(meta["what"])}})
        cell["outputs"] = kept
    return made, removed


def _outputs(nb: dict):
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            yield cell, cell.get("outputs", [])


def _is_progress_bar(output: dict) -> bool:
    data = output.get("data") or {}
    if output.get("output_type") == "stream":
        return bool(_PROGRESS.match("".join(output.get("text", "")).strip().split("\r")[-1]))
    text = data.get("text/plain", "")
    text = "".join(text) if isinstance(text, list) else text
    return WIDGET_MIME in data and bool(_PROGRESS.match(text.strip()))


def _drop_interactive(output: dict) -> int:
    """Keep the PNG of a figure output, drop its JSON (and its HTML copy); returns bytes saved."""
    data = output["data"]
    saved = sum(len(json.dumps(data.pop(k))) for k in (PLOTLY_MIME, "text/html") if k in data)
    data["text/plain"] = "A static image of a plotly figure: run the notebook for the interactive one."
    return saved


PAPERMILL_BANNER_TAG = "papermill-error-cell-tag"


def drop_exercise_banners(nb: dict) -> int:
    """Remove papermill's red "An Exception was encountered" / "…stopped" banners when every error
    in the copy comes from a cell tagged `raises-exception` (the learner build's unsolved exercises,
    which nbclient runs past): there the run did not stop, and the banner would say it did. A copy
    with any other error keeps them. Returns how many were removed."""
    errors_only_in_exercises = all(
        "raises-exception" in cell.get("metadata", {}).get("tags", [])
        for cell in nb.get("cells", [])
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])))
    if not errors_only_in_exercises:
        return 0
    kept = [c for c in nb.get("cells", []) if PAPERMILL_BANNER_TAG not in c.get("metadata", {}).get("tags", [])]
    removed = len(nb.get("cells", [])) - len(kept)
    nb["cells"] = kept
    return removed


def finish_executed(nb: dict, budget: int = NOTEBOOK_BUDGET, figure_max: int = FIGURE_JSON_MAX) -> dict:
    """Add PNGs to the figures of an executed notebook (nbformat JSON, changed in place), keep it
    under `budget` bytes by dropping interactive JSON (largest first, only where a PNG exists) and
    remove frozen progress bars and papermill's banners over unsolved exercises (`drop_exercise_banners`). Widgets' pending static images get their PNG and caption, or go;
    widget outputs without saved state become the "re-run this cell" note. Returns counts: images
    (added), dropped (interactive JSON), progress_bars (removed), without_png (no renderer could make
    one), widget_images, widget_images_removed, dead_widgets, bytes."""
    stats = {"images": 0, "dropped": 0, "progress_bars": 0, "without_png": 0,
             "papermill_banners": drop_exercise_banners(nb)}
    stats["widget_images"], stats["widget_images_removed"] = _finish_widget_statics(nb)
    figures = []
    for cell, outputs in _outputs(nb):
        kept = [o for o in outputs if not _is_progress_bar(o)]
        stats["progress_bars"] += len(outputs) - len(kept)
        cell["outputs"] = kept
        for output in kept:
            data = output.get("data") or {}
            if PLOTLY_MIME not in data:
                continue
            if "image/png" not in data:
                png = to_png(data[PLOTLY_MIME])
                if png is None:
                    stats["without_png"] += 1
                    continue
                data["image/png"] = base64.b64encode(png).decode("ascii")
                stats["images"] += 1
            figures.append(output)
    from ..lab import drop_dead_widgets
    stats["dead_widgets"] = drop_dead_widgets(nb)   # no saved state: "re-run this cell", not "model not found"
    for output in figures:
        if len(json.dumps(output["data"][PLOTLY_MIME])) > figure_max:
            _drop_interactive(output)
            stats["dropped"] += 1
    size = len(_dumps(nb).encode())
    rest = sorted((o for o in figures if PLOTLY_MIME in o["data"]),
                  key=lambda o: len(json.dumps(o["data"][PLOTLY_MIME])), reverse=True)
    for output in rest:
        if size <= budget:
            break
        size -= _drop_interactive(output)
        stats["dropped"] += 1
    stats["bytes"] = len(_dumps(nb).encode())
    return stats


def _dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def finish_executed_file(path: str | Path, **kwargs: Any) -> dict:
    """`finish_executed` on a notebook file, rewritten in place."""
    path = Path(path)
    nb = json.loads(path.read_text())
    stats = finish_executed(nb, **kwargs)
    try:
        import nbformat      # written as papermill writes it
        text = nbformat.writes(nbformat.from_dict(nb))
    except ImportError:
        text = _dumps(nb)
    path.write_text(text)
    stats["bytes"] = len(text.encode())
    return stats

"""Notebook 07's overlap widget, headless: the controls rerun the real step loop and redraw."""
from __future__ import annotations

import pytest

from course_kit.widgets.streams import OverlapExplorer


def _idle(fig, lane):
    label = next(t for t in fig.layout.yaxis.ticktext if t.startswith(lane))
    return float(label.split("idle ")[1].rstrip("%)")) / 100


def test_more_host_work_leaves_the_device_idler_in_sync():
    w = OverlapExplorer(prep_work=0, device_ms=2.0, mode="sync", steps=6)
    idle0, text0 = _idle(w.figure, "device"), w.readout.value
    w.work.value = 10_000
    assert w.readout.value != text0
    assert w.run["prep_work"] == 10_000 and w.run["mode"] == "sync"
    assert _idle(w.figure, "device") > idle0            # the host's part grew; the device waits for it
    # the readout is the timeline's own figures
    assert f"{w.run['timeline'].idle_fraction('device'):.1%}" in w.readout.value


def test_mode_toggle_reruns_in_async_with_the_same_tokens():
    w = OverlapExplorer(prep_work=4000, device_ms=1.0, mode="sync", steps=6)
    sync_tokens = w.run["outputs"]
    w.mode.value = "async"
    assert w.run["mode"] == "async" and w.figure.layout.title.text.startswith("async")
    assert w.run["outputs"] == sync_tokens


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode 'fast'"):
        OverlapExplorer(mode="fast")
    with pytest.raises(ValueError, match=r"prep_work=-1"):
        OverlapExplorer(prep_work=-1)
    with pytest.raises(ValueError, match=r"device_ms=9"):
        OverlapExplorer(device_ms=9)

"""Every GPU-idle figure in the records was read from a profiler trace, and says so (issue 40).

A record's `gpu_idle_*` figure must sit beside `gpu_idle_method: "profiler kernel-interval union"`
(`profiling.GPU_IDLE_METHOD`); the engine's step brackets are stored as `host_step_gap_fraction`;
a bare "idle" figure names the key it was read from (`idle_key`). A cited claim (a dict with its
"source") is quoted, not measured, and exempt."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_kit import profiling

DATA = Path(__file__).resolve().parents[1] / "data" / "reference"
IDLE_KEYS = ("idle", "sync_idle", "async_idle")


def problems(node, where: str = "") -> list[str]:
    out = []
    if isinstance(node, dict):
        if "source" not in node:
            gpu = [k for k in node if "gpu_idle" in k and k != "gpu_idle_method" and node[k] is not None]
            if gpu and node.get("gpu_idle_method") != profiling.GPU_IDLE_METHOD:
                out.append(f"{where}: {gpu} without gpu_idle_method = {profiling.GPU_IDLE_METHOD!r}")
            bare = [k for k in IDLE_KEYS if k in node]
            if bare and node.get("idle_key") not in ("gpu_idle_fraction", "host_step_gap_fraction"):
                out.append(f"{where}: {bare} without an idle_key naming what they are")
            if bare and node.get("idle_key") == "gpu_idle_fraction" \
                    and node.get("gpu_idle_method") != profiling.GPU_IDLE_METHOD:
                out.append(f"{where}: {bare} read as GPU idle without its method")
        for k, v in node.items():
            out += problems(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += problems(v, f"{where}[{i}]")
    return out


RECORDS = sorted(DATA.rglob("*.json"))


@pytest.mark.parametrize("path", RECORDS, ids=[str(p.relative_to(DATA)) for p in RECORDS])
def test_every_recorded_gpu_idle_names_the_profiler_method(path):
    assert problems(json.loads(path.read_text()), path.name) == []


def test_the_check_catches_an_event_timeline_figure_called_gpu_idle():
    assert problems({"results": [{"gpu_idle_fraction": 0.02}]})                     # no method
    assert problems({"gpu_idle_fraction": 0.02, "gpu_idle_method": "CUDA events around steps"})
    assert problems({"sync_idle": 0.2, "async_idle": 0.01})                          # bare, unnamed
    assert problems({"sync_idle": 0.2, "idle_key": "gpu_idle_fraction"})             # claimed, no method
    assert not problems({"sync_idle": 0.2, "idle_key": "host_step_gap_fraction"})
    assert not problems({"gpu_idle_fraction": 0.3, "gpu_idle_method": profiling.GPU_IDLE_METHOD})
    assert not problems({"claim": {"source": "a blog", "sync_gpu_idle": 0.24}})

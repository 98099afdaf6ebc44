"""Recorded results: `data/reference/<gpu-slug>/<topic>.json`, written by `course-kit bench` and read
by the notebooks, so that no measured number is ever typed into prose.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from .device import has_cuda
from .paths import data_dir

REFERENCE_GPU = "h200"


def root() -> Path:
    """The `data/reference` folder (paths.data_dir: $COURSE_KIT_DATA, the checkout, the course wheel)."""
    return data_dir("reference")


def slug_for(name: str | None, count: int = 1) -> str:
    """'NVIDIA H200' -> 'h200', 'Tesla T4' -> 't4', 'NVIDIA A100-SXM4-80GB' -> 'a100'; x2 etc. for several."""
    if not name:
        return "cpu"
    text = name.lower()
    for word in ("nvidia", "tesla", "geforce", "corporation"):
        text = text.replace(word, " ")
    text = re.sub(r"-(sxm|pcie|nvl)\w*.*$", "", text.strip())
    text = re.sub(r"\b\d+\s*gb\b", " ", text)
    slug = re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "gpu"
    return f"{slug}x{count}" if count > 1 else slug


def gpu_slug() -> str:
    """This machine's slug: the GPU model and, when there are several GPUs, their count; under
    COURSE_KIT_EMULATE=t4, "t4-emulated" (never a real T4's or the real GPU's records)."""
    if not has_cuda():
        return "cpu"
    from .device import emulation
    emu = emulation()
    if emu is not None:
        return emu.slug
    return slug_for(torch.cuda.get_device_name(0), torch.cuda.device_count())


def path(topic: str, slug: str | None = None) -> Path:
    if not re.fullmatch(r"[a-z0-9_]+", topic):
        raise ValueError(f"topic must be lower-case letters, digits and '_', got {topic!r}")
    return root() / (slug or gpu_slug()) / f"{topic}.json"


def save(topic: str, record: dict, slug: str | None = None, folder: Path | str | None = None) -> Path:
    """Write a record (adding the environment stamp if missing) and return its path.

    `folder` replaces `data/reference/<slug>`; an unwritable folder raises PermissionError naming it.
    """
    if "environment" not in record:
        from .bench import environment
        record = {**record, "environment": environment()}
    target = (Path(folder) / f"{topic}.json") if folder is not None else path(topic, slug)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
        tmp.replace(target)
    except OSError as err:
        raise PermissionError(f"cannot write {target}: {err.strerror or err}") from err
    return target


def load(topic: str, slug: str = REFERENCE_GPU) -> dict | None:
    """The recorded result of a topic on a GPU, or None when nothing was recorded there."""
    p = path(topic, slug)
    if not p.is_file():
        return None
    return json.loads(p.read_text())


def available(topic: str | None = None) -> list[str]:
    """Slugs of the machines with records (of `topic`, if given)."""
    base = root()
    if not base.is_dir():
        return []
    return sorted(d.name for d in base.iterdir()
                  if d.is_dir() and (topic is None or (d / f"{topic}.json").is_file()))


def own_and_reference(topic: str, own: dict | None = None, ref_slug: str = REFERENCE_GPU) -> list[tuple[str, dict]]:
    """(label, record) pairs to plot side by side: the learner's own result first, then the reference."""
    pairs: list[tuple[str, dict]] = []
    if own is not None:
        gpu = (own.get("environment") or {}).get("gpu") or "this machine"
        pairs.append((f"yours ({gpu})", own))
    ref = load(topic, ref_slug)
    if ref is not None:
        gpu = (ref.get("environment") or {}).get("gpu") or ref_slug
        pairs.append((f"reference ({gpu})", ref))
    return pairs

"""The thin notebook layer: show real source, label GPU-only sections, state results in prose.

Nothing here computes course content; it only displays what the pure functions return.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch

from . import device, reference


def _display(obj: Any) -> None:
    try:
        from IPython.display import display
    except ImportError:  # plain Python: print instead
        print(obj)
        return
    display(obj)


def source(obj: Any) -> str:
    """The source of a function, class or module, exactly as it runs."""
    return inspect.getsource(obj)


def show_source(obj: Any) -> None:
    """Display the source of `obj` with syntax highlighting (what you read is what runs)."""
    text = source(obj)
    try:
        from IPython.display import Code
    except ImportError:
        print(text)
        return
    _display(Code(text, language="python"))


def md(text: str) -> None:
    """Display Markdown; used for "what just happened" paragraphs built from computed numbers."""
    try:
        from IPython.display import Markdown
    except ImportError:
        print(text)
        return
    _display(Markdown(text))


def banner(text: str, kind: str = "info") -> None:
    """A coloured box; kind is info, warning or gpu."""
    colours = {"info": ("#e8f1fb", "#1f6feb"), "warning": ("#fff4e5", "#d97706"), "gpu": ("#f3e8ff", "#7c3aed")}
    if kind not in colours:
        raise ValueError(f"unknown banner kind {kind!r}; choose one of {sorted(colours)}")
    bg, edge = colours[kind]
    try:
        from IPython.display import HTML
    except ImportError:
        print(f"[{kind}] {text}")
        return
    _display(HTML(f"<div style='background:{bg};border-left:6px solid {edge};padding:8px 12px;"
                  f"margin:6px 0;color:#111'>{text}</div>"))


def has_gpu() -> bool:
    return torch.cuda.is_available()


def gpu_only(topic: str, slug: str = reference.REFERENCE_GPU) -> dict | None:
    """On a GPU: return None (run the section live). On a CPU: show a banner and the recorded record.

    Returns the record of `data/reference/<slug>/<topic>.json`, or None when none was recorded yet.
    """
    if has_gpu():
        return None
    record = reference.load(topic, slug)
    if record is None:
        banner(f"<b>GPU-only section.</b> This machine has no CUDA GPU, and no reference record "
               f"<code>{slug}/{topic}.json</code> exists yet. Run <code>course-kit bench {topic}</code> "
               f"on a GPU to create one.", "warning")
        return None
    env = record.get("environment", {})
    banner(f"<b>GPU-only section: recorded results, not this machine.</b> This machine has no CUDA GPU, "
           f"so what follows shows the reference run on <b>{env.get('gpu', slug)}</b> "
           f"({env.get('capability', '?')}, torch {env.get('torch', '?')}, {env.get('date', '?')[:10]}), "
           f"from <code>data/reference/{slug}/{topic}.json</code>.", "gpu")
    return record


def is_smoke() -> bool:
    return device.is_smoke()


def oom_message(err: BaseException) -> str:
    """What a learner sees instead of a traceback when a cell runs out of GPU memory."""
    free = ""
    if torch.cuda.is_available():
        free_b, total_b = torch.cuda.mem_get_info()
        free = f" {free_b / 2**30:.1f} of {total_b / 2**30:.1f} GiB are free now."
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return (f"<b>Skipped: this cell ran out of GPU memory.</b> {first[:200]}.{free} Nothing else is lost: "
            f"lower the sizes in the <code>parameters</code> cell (or restart the kernel to free memory) "
            f"and run the cell again.")


def _handle_oom(shell, etype, value, tb, tb_offset=None):  # IPython's custom-exception signature
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    banner(oom_message(value), "warning")
    return None


def install_oom_handler() -> bool:
    """In a notebook, turn CUDA out-of-memory errors into a clear skip message instead of a crash."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    shell.set_custom_exc(oom_types, _handle_oom)
    return True


install_oom_handler()

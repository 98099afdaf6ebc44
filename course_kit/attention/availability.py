"""What notebook 08 can run here: probes for Triton and xFormers that say *why* when they cannot.

A learner who ran `make lab` on a machine without Triton wheels (macOS, Windows, an ARM laptop) or
without xFormers still runs the rest of notebook 08; the Triton and xFormers cells print what is
missing, in the words of the failed import, and skip their parts. Nothing here imports a kernel
module unless the probe has already found its package importable.

Used by notebook 08 (the guards of its Triton cells and the xFormers comparison) and by
`course-kit bench attention` (which records the xFormers probe's answer).
"""
from __future__ import annotations

import importlib


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()[:300]


def triton_status() -> tuple[bool, str]:
    """(True, "ok") when the course's Triton kernel can run here, else (False, why).

    Wraps `attention.triton_available()`, which already tells "not installed" and "interpreter
    switched off" apart, and also catches a Triton that is installed but fails to import (a wheel
    built for another Python or torch): its error text is the reason.
    """
    from . import triton_available
    try:
        return triton_available()
    except Exception as exc:  # noqa: BLE001 - any failure to import the kernel is a reason to skip it
        return False, f"triton is installed but the kernel module failed to import ({_first_line(exc)})"


def xformers_status() -> tuple[bool, str]:
    """(True, version) when `xformers.ops.memory_efficient_attention` imports here, else (False, why).

    The reason is the import's own error text, e.g. "ModuleNotFoundError: No module named
    'xformers'", or the error of a wheel built against another torch.
    """
    try:
        xformers = importlib.import_module("xformers")
        ops = importlib.import_module("xformers.ops")
        getattr(ops, "memory_efficient_attention")
    except Exception as exc:  # noqa: BLE001 - ImportError, AttributeError or a broken build
        return False, _first_line(exc)
    return True, f"xformers {getattr(xformers, '__version__', '?')}"

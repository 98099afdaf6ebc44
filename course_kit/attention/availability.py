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


def _why_no_operator(exc: BaseException) -> str:
    """xFormers' "No operator found" text, shortened to its first line and the distinct reasons."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    reasons = list(dict.fromkeys(ln for ln in lines[1:] 
                              if ("supported:" in ln or "built" in ln) and not ln.endswith(":")))
    head = lines[0].split(" with inputs")[0]
    return (f"{type(exc).__name__}: {head}" + (": " + "; ".join(reasons[:3]) if reasons else ""))[:400]


def xformers_probe(q, k, v, causal: bool = True) -> tuple[bool, str]:
    """Does xFormers' memory_efficient_attention run on these very inputs here? (ok, why not).

    Importable is not enough: a wheel built for another torch imports but loads no kernels, and
    xFormers has no CPU kernels at all; the call on the learner's own tensors says which.
    """
    ok, why = xformers_status()
    if not ok:
        return False, why
    from .sdpa_backends import xformers_attention
    try:
        xformers_attention(q, k, v, causal=causal)
    except Exception as exc:  # noqa: BLE001 - NotImplementedError ("No operator found"), or a broken build
        return False, _why_no_operator(exc)
    return True, why

"""Attention kernels by name: what `Transformer.set_attention` may plug into the course model.

Two kinds, each a plain callable (so that notebook 08's Triton kernel, or a learner's, can be
plugged in with `model.set_attention(decode=..., paged=...)`):
- decode attention:  fn(q[B, H, D], k[B, n_kv, S, D], v[B, n_kv, S, D], positions[B], scale) -> [B, H, D]
- paged attention:   fn(q[N, H, D], k_cache[num_blocks, bs, n_kv, D], v_cache, batch, scale) -> [N, H, D]

`register_attention(kind, name, fn)` adds one (re-exported as `llama.register_attention`).

Which of them runs where is decided here and nowhere else: `default_paged(device)` for the model's
own paged attention, `triton_kernels(device)` for the engine (its Triton paged-decode and varlen
kernels, and Inductor's fused blocks).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..device import triton_installed
from .engine_step import engine_attention
from .gqa import decode_attention
from .paged import paged_attention_gather, paged_attention_reference

DECODE_ATTENTION: dict[str, Callable] = {"grouped": decode_attention}
PAGED_ATTENTION: dict[str, Callable] = {
    "reference": paged_attention_reference,
    "gather": paged_attention_gather,
    "engine": engine_attention,
}
_TABLES = {"decode": DECODE_ATTENTION, "paged": PAGED_ATTENTION}


def register_attention(kind: str, name: str, fn: Callable) -> None:
    """Make a kernel selectable by name: kind is "decode" or "paged" (see the module docstring)."""
    _table(kind)[name] = fn


def lookup(kind: str, choice: str | Callable) -> Callable:
    """The kernel for `choice`: a registered name of this kind, or a callable (returned as is)."""
    if not isinstance(choice, str):
        return choice
    table = _table(kind)
    if choice not in table:
        raise ValueError(f"unknown {kind} attention {choice!r}; choices: {sorted(table)}")
    return table[choice]


def _table(kind: str) -> dict[str, Callable]:
    if kind not in _TABLES:
        raise ValueError(f"kind must be 'decode' or 'paged', got {kind!r}")
    return _TABLES[kind]


def triton_kernels(device: torch.device) -> bool:
    """Whether the engine runs the course's Triton kernels (and Inductor's fused blocks) for tensors
    on `device`: on a CUDA device where triton is installed. On a CPU they would need Triton's
    interpreter, far too slow for a model, so the PyTorch paths run there."""
    return torch.device(device).type == "cuda" and triton_installed()


def default_paged(device: torch.device) -> str:
    """The model's paged attention when none was set: the gathered kernel on a GPU (static shapes,
    graph-safe), the plain reference on a CPU."""
    return "gather" if torch.device(device).type == "cuda" else "reference"

"""One training step per precision mode under `torch.cuda.memory`'s allocation log (notebook 02,
`course-kit bench amp`): what holds the step's peak memory, by `profiling.memory.breakdown`.

A warm-up step first creates the gradients and the optimizer's state, so that the recorded step is a
steady one. The log is switched on for that step only; `_snapshot()` at each phase boundary gives the
log's length there (forward, backward, optimizer). Needs a CUDA GPU: the CPU allocator keeps no log.
"""
from __future__ import annotations

import torch

from ..device import has_cuda
from ..profiling import memory
from .precision import get

MAX_ENTRIES = 2_000_000


def _log_length(device: int) -> int:
    traces = torch.cuda.memory._snapshot().get("device_traces", [])
    return len(traces[device]) if device < len(traces) else 0


def step_memory(model: torch.nn.Module, tokens: torch.Tensor, precision: str, lr: float = 3e-4) -> dict:
    """Record one steady AdamW step of `model.loss(tokens)` in `precision`; its peak, by category."""
    if not has_cuda() or tokens.device.type != "cuda":
        raise RuntimeError("step_memory needs a CUDA GPU and the batch on it: the CPU allocator keeps no log")
    prec = get(precision)
    dev = tokens.device.index or 0
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    scaler = torch.amp.GradScaler("cuda") if prec.scaler else None

    def step(mark=lambda name: None) -> None:
        opt.zero_grad(set_to_none=True)
        mark("forward")
        with prec.context("cuda"):
            loss = model.loss(tokens)
        mark("backward")
        (scaler.scale(loss) if scaler else loss).backward()
        mark("optimizer")
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()

    with prec.tf32_scope():
        step()                                   # warm-up: gradients and optimizer state exist now
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, context=None, stacks="python")
        try:
            start = memory.live_blocks(torch.cuda.memory._snapshot(), dev)
            marks: list[tuple[str, int]] = []
            step(lambda name: marks.append((name, _log_length(dev))))
            torch.cuda.synchronize()
            entries = torch.cuda.memory._snapshot()["device_traces"][dev]
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
    if len(entries) >= MAX_ENTRIES:
        raise RuntimeError(f"the allocator log filled its {MAX_ENTRIES} entries: the step's start is lost")
    params = [p for p in model.parameters()]
    tags = {p.data_ptr(): memory.WEIGHTS for p in params}
    tags.update({p.grad.data_ptr(): memory.GRADS for p in params if p.grad is not None})
    tags.update({t.data_ptr(): memory.OPT_STATE for st in opt.state.values() for t in st.values()
                 if isinstance(t, torch.Tensor) and t.is_cuda and t.numel() > 1})
    low = prec.autocast_dtype if prec.autocast_dtype in (torch.float16, torch.bfloat16) else None
    casts = [p.numel() * 2 for p in params if p.is_floating_point()] if low is not None else []
    out = memory.breakdown(entries, start, marks, tags, casts)
    del opt, scaler
    return {"precision": precision, **out}

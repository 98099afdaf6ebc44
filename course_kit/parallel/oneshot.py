"""A one-shot all-reduce for small messages, through symmetric memory (GPUs joined by NVLink).

NCCL's ring all-reduce sends 2(n-1) messages per GPU, one after another: the right trade for
large tensors, where bandwidth is what counts. A batch-1 decode step all-reduces a few kilobytes
twice per layer, and there each step's fixed latency is the whole cost. With symmetric memory
every rank maps its peers' buffers into its own address space, so one kernel can do it all:
copy the input into this rank's buffer, meet the peers at a barrier (a flag in each peer's
signal pad), then read all n buffers over NVLink and sum them. One launch, one barrier, no ring.
vLLM's custom all-reduce and PyTorch's `symm_mem` ops are built on this idea.

`enable_one_shot_all_reduce(group, max_numel, dtype, device)` registers it for a group;
`comm.all_reduce_sum` then routes tensors of at most `max_numel` elements of that dtype to it
and everything larger to NCCL. Where symmetric memory is missing (CPU, gloo, older torch, GPUs
without peer access) it returns None and NCCL keeps every all-reduce.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as dist

from . import comm
from ..device import has_cuda


def symmetric_memory_group(group: Any = None) -> str:
    """The name under which `group` (None: the world) rendezvouses symmetric memory; older torch
    must first enable it per group. Also what a TP shard hands the Triton step (tp_llama.TPComm)."""
    import torch.distributed._symmetric_memory as symm_mem

    name = (group if group is not None else dist.group.WORLD).group_name
    if hasattr(symm_mem, "enable_symm_mem_for_group"):   # needed by older torch only
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(name)
    return name


class OneShotAllReduce:
    """Sums `x` over the group with torch.ops.symm_mem.one_shot_all_reduce_copy."""

    def __init__(self, group: Any, max_numel: int, dtype: torch.dtype, device: torch.device):
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = symmetric_memory_group(group)
        self.buffer = symm_mem.empty(max_numel, dtype=dtype, device=device)
        symm_mem.rendezvous(self.buffer, self.group_name)   # collective: maps the peers' buffers
        self.max_numel, self.dtype = max_numel, dtype
        self._op = torch.ops.symm_mem.one_shot_all_reduce_copy

    def accepts(self, x: torch.Tensor) -> bool:
        return x.numel() <= self.max_numel and x.dtype == self.dtype and x.is_cuda

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # the op copies x into our slot of the symmetric buffer, then sums every rank's slot
        out = self._op(self.buffer[: x.numel()], x.reshape(-1), "sum", self.group_name)
        return out.view_as(x)


def enable_one_shot_all_reduce(group: Any = None, max_numel: int = 1 << 16,
                               dtype: torch.dtype = torch.bfloat16,
                               device: torch.device | str | None = None) -> OneShotAllReduce | None:
    """Route small all-reduces of `group` through a one-shot kernel; None where unsupported.

    A collective: every rank of the group must call it. It checks the sum on a test tensor
    before trusting the path, and every rank agrees on the outcome, so all ranks take the same
    path afterwards."""
    _, n = comm.world(group)
    if n == 1 or not has_cuda():
        return None
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    fast, ok = None, True
    try:
        fast = OneShotAllReduce(group, max_numel, dtype, dev)
        rank = dist.get_rank(group)
        probe = torch.full((max_numel,), float(rank + 1), dtype=dtype, device=dev)
        got = fast(probe)
        ok = bool((got == float(n * (n + 1) // 2)).all())
    except Exception:  # noqa: BLE001 - no symmetric memory here: NCCL it is
        ok = False
    flag = torch.tensor([int(ok)], device=dev)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    if not bool(flag.item()):
        return None
    comm.set_small_all_reduce(fast, group)
    return fast


def disable_one_shot_all_reduce(group: Any = None) -> None:
    comm.set_small_all_reduce(None, group)

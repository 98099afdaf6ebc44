"""Data parallelism: every rank holds the whole model and a slice of the batch.

After the backward pass each rank has the gradient of its own slice; averaging them with one
all-reduce gives every rank the gradient of the whole batch, so the replicas stay identical.
`DistributedDataParallel` does the same, overlapping the all-reduce with the backward pass by
bucketing gradients; `allreduce_gradients` is the plain version, and `allreduce_bucketed` packs
the gradients into a few flat buffers first (fewer, larger messages: the alpha of the
alpha-beta model is paid once per bucket instead of once per tensor).
"""
from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.distributed as dist
from torch import nn

from .comm import world


def allreduce_gradients(params: Iterable[nn.Parameter], group: Any = None) -> int:
    """Average every parameter's .grad over the ranks, one all-reduce per tensor; returns calls."""
    _, n = world(group)
    calls = 0
    for p in params:
        if p.grad is None:
            continue
        if n > 1:
            dist.all_reduce(p.grad, group=group)
            calls += 1
        p.grad /= n
    return calls


def allreduce_bucketed(params: Iterable[nn.Parameter], bucket_bytes: int = 25 << 20,
                       group: Any = None) -> int:
    """The same average, with gradients packed into flat buckets of about `bucket_bytes`."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes={bucket_bytes}; it must be > 0")
    _, n = world(group)
    grads = [p.grad for p in params if p.grad is not None]
    buckets: list[list[torch.Tensor]] = [[]]
    size = 0
    for g in grads:
        nbytes = g.numel() * g.element_size()
        if buckets[-1] and (size + nbytes > bucket_bytes or g.dtype != buckets[-1][0].dtype):
            buckets.append([])
            size = 0
        buckets[-1].append(g)
        size += nbytes
    calls = 0
    for bucket in buckets:
        if not bucket:
            continue
        flat = torch.cat([g.reshape(-1) for g in bucket])
        if n > 1:
            dist.all_reduce(flat, group=group)
            calls += 1
        flat /= n
        offset = 0
        for g in bucket:
            g.copy_(flat[offset: offset + g.numel()].view_as(g))
            offset += g.numel()
    return calls


def _mlp(seed: int, dims: tuple[int, ...]) -> nn.Module:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.GELU()]
    return nn.Sequential(*layers[:-1])


def check_dp(rank: int, world_size: int, batch: int = 16, dims: tuple[int, ...] = (32, 64, 64, 8),
             steps: int = 2, seed: int = 0) -> dict[str, float]:
    """Max relative differences, after `steps` SGD steps, between:
    hand-written all-reduce vs DistributedDataParallel, bucketed vs plain, and DP vs one
    process training on the whole batch."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    if batch % world_size:
        raise ValueError(f"batch={batch} is not divisible by world_size={world_size}")
    torch.manual_seed(seed + 1)
    data = [(torch.randn(batch, dims[0]), torch.randn(batch, dims[-1])) for _ in range(steps)]
    lo, hi = rank * batch // world_size, (rank + 1) * batch // world_size

    def train(model: nn.Module, sync: Any, full_batch: bool) -> list[torch.Tensor]:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in data:
            if not full_batch:
                x, y = x[lo:hi], y[lo:hi]
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            if sync is not None:
                sync(model.parameters())
            opt.step()
        m = model.module if isinstance(model, DDP) else model
        return [p.detach().clone() for p in m.parameters()]

    ref = train(_mlp(seed, dims), None, True)
    hand = train(_mlp(seed, dims), allreduce_gradients, False)
    bucketed = train(_mlp(seed, dims), lambda ps: allreduce_bucketed(ps, bucket_bytes=4096), False)
    ddp = train(DDP(_mlp(seed, dims)), None, False)

    def diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
        return max(float((x - y).abs().max() / x.abs().max().clamp_min(1e-30)) for x, y in zip(a, b))

    return {"hand_vs_ddp": diff(ddp, hand), "bucketed_vs_hand": diff(hand, bucketed),
            "hand_vs_single_process": diff(ref, hand)}

"""Sharded data parallelism as PyTorch ships it: FSDP2's `fully_shard` (notebook 09, §9).

`fully_shard(module)` replaces each parameter of the module by a DTensor sharded on dim 0 over the
ranks: every rank stores 1/N of each weight, its gradient and (since the optimizer sees the shards)
its optimizer state. That is ZeRO stage 3 (`parallel.zero`): before a block's forward an
all-gather rebuilds its whole weights, they are freed after it, gathered again for its backward,
and the gradients are reduce-scattered, each rank keeping the averaged gradient of its shard. Wrapping
every block, then the root, makes one all-gather per block: only one block's full weights are alive
at a time.

`check_fsdp` trains the same TinyGPT both ways on every rank's slice of the same batches, plain
data parallelism (one all-reduce of the gradients, `parallel.data`) and FSDP2, and compares the
parameters after N AdamW steps, and the bytes each rank holds against ZeRO-3's arithmetic.
`measure_fsdp` times FSDP2 against DDP on GPUs over NCCL (one per rank) with their peak memory;
no two-GPU machine has run it yet (`PENDING`).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .. import narrate
from ..models.tiny_gpt import TinyGPT, batches, config, markov_tokens
from .data import allreduce_gradients
from .zero import zero_bytes_per_gpu

PENDING = "FSDP2 over NCCL on 2 GPUs: pending (no two-GPU machine has run `measure_fsdp` yet)"
PARTS = ("weights", "gradients", "optimizer state")


def shard(model: TinyGPT, **kwargs: Any) -> TinyGPT:
    """FSDP2 on the course model: each block its own unit, then the root (embeddings, final norm)."""
    from torch.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(tensors: Any) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors if t is not None)


def held_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds of the weights, the gradients and the optimizer state (local shards of
    DTensors; whole tensors otherwise). Call after a backward, before zero_grad."""
    params = list(model.parameters())
    state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    return {"weights": _nbytes(params), "gradients": _nbytes(p.grad for p in params),
            "optimizer state": _nbytes(state)}


def zero3_prediction(n_params: int, world_size: int) -> dict[str, float]:
    """ZeRO-3's bytes per rank for fp32 AdamW: 4-byte weights and gradients, 8 bytes of state (two
    moments; no separate fp32 master copy, the weights are fp32 already)."""
    return zero_bytes_per_gpu(n_params, world_size, 3, k=8.0, low_bytes=4.0)


def _data(preset: str, batch: int, steps: int, seed: int, device: Any) -> list[torch.Tensor]:
    cfg = config(preset)
    return batches(markov_tokens(cfg.vocab, max(20 * cfg.seq_len, 4096), seed=seed), batch, cfg.seq_len, steps,
                   seed=seed, device=device)


def check_fsdp(rank: int, world_size: int, steps: int = 3, preset: str = "smoke", batch: int = 8,
               lr: float = 1e-3, seed: int = 0) -> dict:
    """On every rank: DP and FSDP2 trained on this rank's slice of the same batches; the largest
    relative parameter difference after `steps` AdamW steps and the bytes each way holds."""
    if batch % world_size:
        raise ValueError(f"batch={batch} is not divisible by world_size={world_size}")
    dp = TinyGPT.from_preset(preset, seed=seed)
    fsdp = shard(TinyGPT.from_preset(preset, seed=seed))
    opts = {"dp": torch.optim.AdamW(dp.parameters(), lr=lr), "fsdp": torch.optim.AdamW(fsdp.parameters(), lr=lr)}
    held = {}
    for i, x in enumerate(_data(preset, batch, steps, seed, "cpu")):
        xs = x.chunk(world_size)[rank]
        for name, model in (("dp", dp), ("fsdp", fsdp)):
            opts[name].zero_grad(set_to_none=True)
            model.loss(xs).backward()          # FSDP2 reduce-scatters (and averages) the gradients here
            if name == "dp":
                allreduce_gradients(model.parameters())
            opts[name].step()
            if i == steps - 1:
                held[name] = held_bytes(model, opts[name])
    start = TinyGPT.from_preset(preset, seed=seed)
    with torch.no_grad():
        full = [p.detach().full_tensor() for p in fsdp.parameters()]   # an all-gather: every rank gets all
        diff = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(full, dp.parameters()))
        # how far training moved the weights (all of them as one vector; biases start at zero)
        moved = float(torch.linalg.vector_norm(torch.cat([(a - b).flatten() for a, b in
                                                          zip(dp.parameters(), start.parameters())]))
                      / torch.linalg.vector_norm(torch.cat([b.flatten() for b in start.parameters()])))
    n_params = sum(p.numel() for p in dp.parameters())
    return {"fsdp_vs_dp": diff, "moved_from_init": moved, "n_params": n_params, "held_dp": held["dp"],
            "held_fsdp": held["fsdp"], "zero3": zero3_prediction(n_params, world_size), "world_size": world_size}


def _timed_steps(model: nn.Module, opt: torch.optim.Optimizer, data: list[torch.Tensor], rank: int,
                 world: int) -> tuple[float, int]:
    """Median step time (CUDA events; the first two steps are warm-up) and the peak memory of the
    steps beyond what was allocated before them."""
    dev = data[0].device
    times = []
    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    for x in data:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        loss_of = model.module.loss if hasattr(model, "module") else model.loss
        loss_of(x.chunk(world)[rank]).backward()
        opt.step()
        end.record()
        times.append((start, end))
    torch.cuda.synchronize(dev)
    ms = sorted(s.elapsed_time(e) for s, e in times[2:] or times)
    return ms[len(ms) // 2] / 1e3, int(torch.cuda.max_memory_allocated(dev) - base)


def measure_fsdp(rank: int, world_size: int, preset: str = "small_gpu", batch: int = 16, steps: int = 12,
                 seed: int = 0) -> dict:
    """On a GPU per rank (NCCL): step time and memory of DDP (plain data parallelism, its all-reduce
    overlapped with the backward pass) and of FSDP2, both fp32 AdamW on the same batches."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    if dist.get_backend() != "nccl":
        raise ValueError(f"measure_fsdp runs on GPUs over NCCL (launch(..., backend='nccl')), not "
                         f"{dist.get_backend()!r}; check_fsdp is the CPU version")
    dev = torch.device("cuda", rank)
    data = _data(preset, batch, steps, seed, dev)
    out: dict[str, Any] = {"rank": rank, "world_size": world_size, "preset": preset, "batch": batch}
    for name in ("dp", "fsdp"):
        model = TinyGPT.from_preset(preset, seed=seed, device=dev)
        out["n_params"] = sum(p.numel() for p in model.parameters())
        model = shard(model) if name == "fsdp" else DDP(model, device_ids=[rank])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        step_s, peak = _timed_steps(model, opt, data, rank, world_size)
        out[name] = {"step_s": step_s, "step_peak_bytes": peak, **held_bytes(model, opt),
                     "allocated_bytes": int(torch.cuda.memory_allocated(dev))}
        del model, opt
        torch.cuda.empty_cache()
    out["zero3"] = zero3_prediction(out["n_params"], world_size)
    return out


def explain_fsdp(result: dict) -> str:
    """FSDP2 against DP on one rank: equal parameters, and its bytes against ZeRO-3's arithmetic."""
    n, mib = result["world_size"], 2**20
    held, pred, dp = result["held_fsdp"], result["zero3"], result["held_dp"]
    rows = "; ".join(f"{part} {held[part] / mib:.3f} MiB (ZeRO-3: {pred[part] / mib:.3f}, plain DP "
                     f"{dp[part] / mib:.3f})" for part in PARTS)
    total, total_pred, total_dp = (sum(d[p] for p in PARTS) for d in (held, pred, dp))
    return (f"After the steps, FSDP2's parameters differ from plain DP's by at most **{result['fsdp_vs_dp']:.1e}** "
            f"(relative), while training moved them by {result['moved_from_init']:.1%} (the norm of the change over the norm of the start): the same training. "
            f"Each of the {n} ranks holds {rows}. In all, **{total / mib:.3f} MiB**, "
            f"{narrate.more_or_less(total / mib, total_pred / mib, 'MiB')} ZeRO-3's 16 bytes per parameter / {n} "
            f"({total_pred / mib:.3f} MiB; a shard is padded to equal rows on every rank), and {total_dp / total:.2f}x "
            f"less than plain DP's {total_dp / mib:.3f} MiB.")


def explain_nccl(rank0: dict) -> str:
    """FSDP2 against DDP on GPUs (one rank of `measure_fsdp`): step time and peak memory."""
    f, d, mib = rank0["fsdp"], rank0["dp"], 2**20
    return (f"On {rank0['world_size']} GPUs over NCCL ({rank0['preset']} preset, batch {rank0['batch']}), a FSDP2 step "
            f"ran {narrate.speed(f['step_s'], d['step_s'])} DDP's ({f['step_s'] * 1e3:.1f} ms against "
            f"{d['step_s'] * 1e3:.1f} ms), and a rank's step peaked at {f['step_peak_bytes'] / mib:,.0f} MiB against "
            f"DDP's {d['step_peak_bytes'] / mib:,.0f} MiB ({narrate.more_or_less(f['step_peak_bytes'] / mib, d['step_peak_bytes'] / mib, 'MiB')} "
            f"DDP); it held {sum(f[p] for p in PARTS) / mib:,.0f} MiB of training state against DDP's "
            f"{sum(d[p] for p in PARTS) / mib:,.0f} MiB.")

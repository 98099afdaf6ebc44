"""Activation recomputation, one checkpoint per block (notebook 09, §9).

A training step keeps, for the backward pass, the activations every operation needs to compute its
gradient. Korthikanti et al. ("Reducing Activation Recomputation in Large Transformer Models",
MLSys 2023, arXiv 2205.05198, section 4.1; the table lives in `parallel.sequence.LAYER_PARTS`)
count them per transformer layer: 34 s*b*h bytes with 16-bit activations and 1-byte dropout masks,
plus 5 a s^2 b for the attention scores (s sequence, b batch, h hidden, a heads). The course's
TinyGPT has no dropout and its attention (SDPA's flash kernels, on a CPU too) keeps no scores, so a
layer keeps the other parts: 32 s*b*h bytes of 16-bit values, i.e. 16 values per s*b*h
(`layer_values`).

With recomputation (`torch.utils.checkpoint` around each block, "full recomputation" in the
paper's section 5), a block keeps only its input (1 value per s*b*h) during the forward pass and
runs its forward again during the backward pass, when its gradient is due: one block's activations
are alive at a time. Memory: L*sbh + 16*sbh values instead of 16*L*sbh; time: one more forward per
block, about a third more compute (forward = 1, backward = 2 units).
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from .. import bench, narrate
from ..models.tiny_gpt import GPTConfig, TinyGPT, batches, config, markov_tokens
from .sequence import LAYER_PARTS
from .step_memory import step_peak_bytes


def enable(model: TinyGPT) -> int:
    """Checkpoint every block of `model` (in place); returns how many blocks.

    The block's `forward` is replaced on the instance, so the parameter names (and state dicts,
    and FSDP's per-block wrapping) stay exactly those of the plain model."""
    n = 0
    for block in model.blocks:
        if "forward" not in vars(block):
            plain = block.forward
            block.forward = functools.partial(checkpoint, plain, use_reentrant=False)
        n += 1
    return n


def disable(model: TinyGPT) -> None:
    for block in model.blocks:
        vars(block).pop("forward", None)


def enabled(model: TinyGPT) -> bool:
    return any("forward" in vars(b) for b in model.blocks)


def layer_values() -> float:
    """Activation values a layer keeps per s*b*h: Korthikanti's 16-bit table without the dropout masks
    (no dropout here) and without the scores (flash attention keeps none): 32 bytes / 2 = 16."""
    return sum(k for name, k, _ in LAYER_PARTS if "dropout" not in name) / 2


def activation_formula(cfg: GPTConfig, batch: int, bytes_per_value: int = 4,
                       recompute: bool = False) -> dict[str, float]:
    """Bytes of the blocks' stored activations by the formula, with and without recomputation."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r}; it must be an integer >= 1")
    sbh = cfg.seq_len * batch * cfg.d_model
    per_layer = layer_values() * sbh * bytes_per_value
    if recompute:
        # every block's input, plus one block recomputed at a time in the backward pass
        stored = cfg.n_layers * sbh * bytes_per_value + per_layer
    else:
        stored = cfg.n_layers * per_layer
    return {"per_layer_bytes": per_layer, "blocks_bytes": stored, "layers": cfg.n_layers, "sbh": sbh}


def _data(cfg: GPTConfig, batch: int, n: int, seed: int, device: Any) -> list[torch.Tensor]:
    return batches(markov_tokens(cfg.vocab, max(20 * cfg.seq_len, 4096), seed=seed), batch, cfg.seq_len, n,
                   seed=seed, device=device)


def measure(preset: str = "smoke", batch: int = 8, *, recompute: bool, device: str | torch.device = "cpu",
            repeat: int = 5, seed: int = 0, **overrides: int) -> dict:
    """One AdamW training step of TinyGPT with or without per-block recomputation: its peak memory
    (`step_memory.step_peak_bytes` of forward, backward and update, after a warm-up step has
    allocated Adam's state and with the last gradients already freed) and its median time over
    `repeat` steps, with the formula's bytes beside them."""
    cfg = config(preset, **overrides)
    model = TinyGPT.from_config(cfg, seed=seed, device=device)
    if recompute:
        enable(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = _data(cfg, batch, 4, seed, device)

    def step(x: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        model.loss(x).backward()
        opt.step()

    def counted(x: torch.Tensor) -> None:      # the step, less the freeing of the last gradients
        model.loss(x).backward()
        opt.step()

    step(data[0])
    opt.zero_grad(set_to_none=True)
    peak, _ = step_peak_bytes(lambda: counted(data[1]), device)
    timing = bench.timeit(step, warmup=1, repeat=repeat, inputs=[(x,) for x in data], device=device)
    formula = activation_formula(cfg, batch, 4, recompute)
    return {"recompute": recompute, "preset": preset, "batch": batch, "peak_bytes": peak,
            "step_s": timing.median_s, "formula_blocks_bytes": formula["blocks_bytes"],
            "n_params": sum(p.numel() for p in model.parameters())}


def check_grads(preset: str = "smoke", batch: int = 4, seed: int = 0) -> dict:
    """Gradients of one loss with and without recomputation, from the same weights and batch."""
    cfg = config(preset)
    x = _data(cfg, batch, 1, seed, "cpu")[0]
    grads = {}
    for rc in (False, True):
        model = TinyGPT.from_config(cfg, seed=seed)
        if rc:
            enable(model)
        model.loss(x).backward()
        grads[rc] = [p.grad for p in model.parameters()]
    diffs = [float((a - b).abs().max()) for a, b in zip(grads[False], grads[True])]
    return {"max_abs_diff": max(diffs), "bitwise_equal": all(torch.equal(a, b) for a, b in zip(grads[False], grads[True])),
            "tensors": len(diffs)}


def explain_recompute(plain: dict, recomputed: dict) -> str:
    """What recomputation bought and cost in this run, with the formula's blocks' bytes beside it."""
    mib = 2**20
    p, r = plain["peak_bytes"] / mib, recomputed["peak_bytes"] / mib
    fp, fr = plain["formula_blocks_bytes"] / mib, recomputed["formula_blocks_bytes"] / mib
    text = (f"With a checkpoint per block, the step's peak memory was **{r:.1f} MiB** against {p:.1f} MiB without "
            f"({narrate.more_or_less(r, p, 'MiB')} without), and the step ran "
            f"**{narrate.speed(recomputed['step_s'], plain['step_s'])}** without ({recomputed['step_s'] * 1e3:.1f} ms "
            f"against {plain['step_s'] * 1e3:.1f} ms). By the formula, the blocks' stored activations go from "
            f"{fp:.1f} MiB to {fr:.1f} MiB, ")
    if p > r and fp > fr:
        text += (f"a drop {narrate.more_or_less(fp - fr, p - r, 'MiB')} the measured one of {p - r:.1f} MiB; the rest "
                 f"of the peak (the logits and their gradient, the weights' gradients, Adam's update) is the same "
                 f"either way.")
    else:
        text += "but the measured peak did not drop: something other than the blocks' activations set it."
    return text


def explain_grads(check: dict) -> str:
    """Whether recomputation changed the gradients (`check_grads`), in words."""
    if check["bitwise_equal"]:
        return (f"The gradients with recomputation are bit for bit those without ({check['tensors']} tensors): the "
                f"same operations on the same values, run again.")
    return (f"The gradients with recomputation differ from those without by up to {check['max_abs_diff']:.1e} "
            f"({check['tensors']} tensors): the recomputed forward did not reproduce the first one exactly "
            f"(a non-deterministic kernel).")

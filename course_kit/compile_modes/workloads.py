"""The two GPU workloads of `course-kit bench compile`: a batch-1 decode step and a training step.

Both use the course's TinyGPT (course_kit.models.tiny_gpt) with seeded random weights.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..models.tiny_gpt import TinyGPT, batches, config, markov_tokens
from ..device import autocast_dtype, compute_dtype


class DecodeStep(torch.nn.Module):
    """One batch-1 decode step with the KV cache held as buffers at fixed addresses, so that
    reduce-overhead can capture the step (in-place cache writes included) in a CUDA graph."""

    def __init__(self, model: TinyGPT, batch: int = 1):
        super().__init__()
        self.model = model
        for i, kv in enumerate(model.new_cache(batch)):
            self.register_buffer(f"kv{i}", kv, persistent=False)
            torch._dynamo.mark_static_address(kv)

    def caches(self) -> list[torch.Tensor]:
        return [getattr(self, f"kv{i}") for i in range(self.model.cfg.n_layers)]

    def reset(self) -> None:
        for kv in self.caches():
            kv.zero_()

    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.model.decode(token, pos, self.caches())


def decode_setup(preset: str = "small_gpu", *, device: str = "cuda", dtype: torch.dtype | None = None,
                 seed: int = 0, positions: int = 16, **overrides: int):
    """(step module, inputs: list of (token[1], pos[1]) tuples for positions 0..positions-1);
    `dtype` defaults to the course's rule for this machine (device.compute_dtype)."""
    dtype = dtype if dtype is not None else compute_dtype()
    model = TinyGPT.from_preset(preset, seed=seed, device=device, dtype=dtype, **overrides).eval()
    step = DecodeStep(model)
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(model.cfg.vocab, (positions,), generator=g)
    inputs = [(toks[i:i + 1].to(device), torch.tensor([i], device=device)) for i in range(positions)]
    return step, inputs


def decode_reference(step: DecodeStep, inputs: list[tuple]) -> torch.Tensor:
    """Logits of each input in order, starting from an empty cache (the correctness oracle)."""
    step.reset()
    with torch.no_grad():
        out = torch.stack([step(*a) for a in inputs])
    step.reset()
    return out


def train_setup(preset: str = "small_gpu", *, device: str = "cuda", batch: int = 8, steps: int = 8,
                seed: int = 0, **overrides: int):
    """(model, fused AdamW, batches) for a bf16-autocast training step."""
    cfg = config(preset, **overrides)
    model = TinyGPT.from_config(cfg, seed=seed, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=torch.device(device).type == "cuda")
    data = batches(markov_tokens(cfg.vocab, 20 * cfg.seq_len * batch, seed=seed), batch, cfg.seq_len,
                   steps, seed=seed, device=device)
    return model, opt, data


def make_train_step(model: TinyGPT, opt: torch.optim.Optimizer, loss_fn: Callable | None = None,
                    device_type: str = "cuda") -> Callable:
    """A step: (possibly compiled) loss under 16-bit autocast (device.autocast_dtype: bf16, fp16 on a
    T4), backward, optimizer step. Returns the loss. Only the model's loss is compiled; the (fused)
    optimizer step is the same eager code everywhere."""
    half = autocast_dtype(device_type)

    def loss_eager(tokens: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type, dtype=half):
            return model.loss(tokens)

    fn = loss_fn if loss_fn is not None else loss_eager

    def step(tokens: torch.Tensor) -> torch.Tensor:
        loss = fn(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    step.loss_eager = loss_eager  # type: ignore[attr-defined]
    return step

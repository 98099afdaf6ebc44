"""One training loop for every precision mode, recording what each step did.

Per step: loss, step time (synchronised), the loss scale and whether the step was skipped, and where
the true (unscaled) gradients sit against fp16's range. Per run: peak GPU memory and the bytes that
autograd saved for the backward pass (measured on any device with saved-tensor hooks).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from ..models.tiny_gpt import GPTConfig, TinyGPT, batches, config, markov_tokens
from . import grads as G
from .precision import get, tf32_flags
from .scaler import DynamicLossScaler

SCALERS = ("torch", "course")
# A run's final loss is the mean of its last LAST_STEPS losses (one step's loss is noisy): notebook 02
# states every run's final loss this way, and fp8 training is held to bf16's on it.
LAST_STEPS = 5


def final_loss(losses: list[float], last: int = LAST_STEPS) -> float:
    """The mean of the last `last` losses (all of them when there are fewer)."""
    if not losses:
        raise ValueError("a run with no losses has no final loss")
    if last < 1:
        raise ValueError(f"last must be >= 1, got {last}")
    tail = losses[-last:]
    return sum(tail) / len(tail)


def _stream_batches(cfg: GPTConfig, batch: int, steps: int, seed: int, device: torch.device | str) -> list[torch.Tensor]:
    stream = markov_tokens(cfg.vocab, max(20 * cfg.seq_len, 4096), seed=seed)
    return batches(stream, batch, cfg.seq_len, steps, seed=seed, device=device)


def train_data(preset: str, batch: int, steps: int, seed: int = 0,
               device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """The batches `train` draws for a fresh `preset` model when it is given none: one token stream
    of max(20 x seq_len, 4096) tokens, `steps` windows of `batch` rows. Notebook 02 trains every mode
    (and fp8, `fp8_train.make_data`) on these, so its runs of the same settings see the same data."""
    return _stream_batches(config(preset), batch, steps, seed, device)


@dataclass
class RunResult:
    precision: str
    device: str
    losses: list[float] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)     # the scale used at each step (1 without)
    skipped: list[bool] = field(default_factory=list)
    underflow: list[float] = field(default_factory=list)  # unscaled grads below 2**-24
    underflow_scaled: list[float] = field(default_factory=list)  # grads x scale below 2**-24
    zero_grads: list[float] = field(default_factory=list)  # fraction of gradient entries exactly 0
    peak_mem_bytes: int | None = None
    base_mem_bytes: int | None = None   # GPU memory already allocated when the peak counter was reset
    saved_bytes: int | None = None
    saved_by_dtype: dict | None = None   # the same bytes per dtype
    grad_hist: dict | None = None   # log2 histogram of the last step's gradient magnitudes
    tf32_flags: dict | None = None  # the TF32 switches as the steps saw them

    def median_step_s(self, warmup: int = 3) -> float:
        t = sorted(self.times_s[warmup:] or self.times_s)
        return t[len(t) // 2]

    def final_loss(self, last: int = LAST_STEPS) -> float:
        """The mean of the last `last` losses: the one final-loss statistic of notebook 02."""
        return final_loss(self.losses, last)

    def skipped_fraction(self, warmup: int = 0) -> float:
        s = self.skipped[warmup:]
        return sum(s) / max(len(s), 1)

    def to_dict(self) -> dict:
        return asdict(self)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _no_unpack(packed: None) -> torch.Tensor:
    raise RuntimeError("saved_activation_bytes runs a forward pass only; it cannot be backpropagated")


def saved_bytes_by_dtype(model: torch.nn.Module, tokens: torch.Tensor, precision: str) -> dict[str, int]:
    """Bytes of the distinct tensors autograd keeps for the backward pass of one forward in `precision`
    (activations, plus the low-precision weight copies that autocast saves), per dtype
    ("float32", "bfloat16", "float16", "int64", ...). Notebook 02 uses it to say why autocast saves
    more than half of fp32's bytes.

    Every packed tensor is held in a list until the forward ends, so no two of them can share an
    address (a tensor freed mid-forward would hand its memory to the next, and counting storages by
    address would merge them). The hook returns nothing, so no graph refers to the list, and the list
    is dropped at the end: nothing leaks (returning the tensor itself made a reference cycle through
    autograd's C++ graph that leaked one forward per call, issue 19 item 10)."""
    kept: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> None:
        kept.append(t)

    with torch.autograd.graph.saved_tensors_hooks(pack, _no_unpack):
        with get(precision).context(tokens.device.type):
            model.loss(tokens)
    seen: dict[tuple, tuple[int, str]] = {}
    for t in kept:
        try:
            seen[(t.untyped_storage().data_ptr(), t.device.type)] = (t.untyped_storage().nbytes(),
                                                                     str(t.dtype).removeprefix("torch."))
        except (RuntimeError, NotImplementedError):  # tensors without storage (e.g. wrappers)
            pass
    kept.clear()
    out: dict[str, int] = {}
    for nbytes, dtype in seen.values():
        out[dtype] = out.get(dtype, 0) + nbytes
    return out


def saved_activation_bytes(model: torch.nn.Module, tokens: torch.Tensor, precision: str) -> int:
    """Bytes of the distinct tensors autograd keeps for the backward pass of one forward in `precision`
    (activations, plus the low-precision weight copies that autocast saves)."""
    return sum(saved_bytes_by_dtype(model, tokens, precision).values())


def train(precision: str, *, preset: str = "smoke", steps: int = 30, batch: int = 8,
          lr: float = 3e-3, seed: int = 0, device: str | torch.device = "cpu",
          scaler: str = "torch", scaler_kwargs: dict | None = None, track_grads: bool = True,
          model: TinyGPT | None = None, data: list[torch.Tensor] | None = None,
          on_step: Callable[[int], None] | None = None) -> RunResult:
    """Train a TinyGPT (fresh from `seed`, or `model`) for `steps` AdamW steps in `precision`.

    `scaler` picks torch's GradScaler ("torch") or the course's DynamicLossScaler ("course") for
    fp16_scaler. The gradient statistics are computed after each step's timer stops."""
    prec = get(precision)
    if scaler not in SCALERS:
        raise ValueError(f"unknown scaler {scaler!r}; valid scalers: {list(SCALERS)}")
    dev = torch.device(device)
    model = model if model is not None else TinyGPT.from_preset(preset, seed=seed, device=dev)
    cfg = model.cfg
    if data is None:
        data = _stream_batches(cfg, batch, steps, seed, dev)
    if len(data) < steps:
        raise ValueError(f"need {steps} batches, got {len(data)}")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    kw = dict(scaler_kwargs or {})
    amp_scaler = None
    if prec.scaler:
        amp_scaler = (torch.amp.GradScaler(dev.type, **kw) if scaler == "torch" else DynamicLossScaler(**kw))
    res = RunResult(precision, str(dev))
    # TF32 switches over the whole step (backward and optimizer too), not only the autocast forward.
    with prec.tf32_scope():
        res.tf32_flags = tf32_flags()
        res.saved_by_dtype = saved_bytes_by_dtype(model, data[0], precision)
        res.saved_bytes = sum(res.saved_by_dtype.values())
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
            res.base_mem_bytes = int(torch.cuda.memory_allocated(dev))
        params = [p for p in model.parameters()]
        for i in range(steps):
            x = data[i]
            _sync(dev)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with prec.context(dev.type):
                loss = model.loss(x)
            if amp_scaler is None:
                scale = 1.0
                loss.backward()
                opt.step()
                skipped = False
            else:
                scale = amp_scaler.get_scale()
                amp_scaler.scale(loss).backward()
                amp_scaler.step(opt)   # unscales the gradients, steps unless one overflowed
                amp_scaler.update()
                # A skipped step is exactly a step after which the scale backed off.
                skipped = amp_scaler.get_scale() < scale
            _sync(dev)
            res.times_s.append(time.perf_counter() - t0)
            res.losses.append(float(loss.detach()))
            res.scales.append(float(scale))
            res.skipped.append(bool(skipped))
            if track_grads:
                mags = G.flat_grads(params)  # already unscaled by step()
                fr = G.underflow_fractions(mags)
                res.underflow.append(fr["underflow"])
                res.zero_grads.append(fr["zero"])
                res.underflow_scaled.append(G.underflow_fractions(mags, scale)["underflow"])
                if i == steps - 1:
                    res.grad_hist = G.log2_histogram(mags)
            if on_step is not None:
                on_step(i)
    if dev.type == "cuda":
        res.peak_mem_bytes = int(torch.cuda.max_memory_allocated(dev))
    # Nothing in `res` refers to tensors: the model (unless the caller holds it), the optimizer, the
    # scaler and the last step's activations and gradients go when this frame ends.
    del opt, amp_scaler, params
    return res


def compare(precisions: list[str], **kwargs) -> dict[str, RunResult]:
    """Train the same model from the same seed on the same batches in each precision."""
    for p in precisions:
        get(p)  # fail fast on a bad name, before any training
    return {p: train(p, **kwargs) for p in precisions}

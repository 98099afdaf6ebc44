"""Activation gradients under autocast: what fp16 flushes to zero when the loss is not scaled.

Notebook 02 (section 2 and its loss-scale explorer). The parameter gradients that the optimizer sees
are accumulated in fp32 (the weights are fp32), so they say little about fp16. What runs in fp16 under
autocast is the backward pass through the activations: the gradient of the loss with respect to the
logits, the residual stream, and so on. The first of them is tiny by construction: the loss is a mean
over N = batch x sequence tokens, so dL/dlogit[i, j] = (softmax_ij - [j = target_i]) / N, and for a
model that has not learned much yet softmax_ij is about 1/vocab: |dL/dlogit| ~ 1/(N x vocab).
"""
from __future__ import annotations

import math

import torch

from ..dtypes import get_format
from .precision import get

# Formats the loss-scale explorer offers, by their course_kit.dtypes names.
SCALE_FORMATS = ("fp16", "bf16", "fp8_e5m2", "fp8_e4m3fn")


def activation_grads(model: torch.nn.Module, tokens: torch.Tensor, precision: str = "fp32",
                     scale: float = 1.0) -> dict[str, dict]:
    """One forward and backward of `model.loss(tokens)` in `precision`, the loss multiplied by `scale`;
    the gradients that reach the logits and each block's output (the residual stream), as the backward
    pass holds them: {name: {"dtype": str, "mags": fp32 tensor of |grad| / scale, "zero": fraction
    exactly 0}}. The parameters' .grad are cleared afterwards."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    grads: dict[str, torch.Tensor] = {}
    handles = []

    def keep(name: str):
        def fwd_hook(module, args, out):
            if out.requires_grad:
                out.register_hook(lambda g: grads.__setitem__(name, g.detach()))
        return fwd_hook

    handles.append(model.register_forward_hook(keep("logits")))
    for i, block in enumerate(getattr(model, "blocks", [])):
        handles.append(block.register_forward_hook(keep(f"block {i} output")))
    try:
        with get(precision).context(tokens.device.type):
            loss = model.loss(tokens)
        (loss * scale).backward()
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
    out = {}
    for name, g in grads.items():
        out[name] = {"dtype": str(g.dtype).removeprefix("torch."),
                     "mags": g.float().abs().flatten() / scale,
                     "zero": float((g == 0).sum()) / max(g.numel(), 1)}
    return out


def typical_logit_grad(n_tokens: int, vocab: int) -> float:
    """1 / (tokens x vocab): the size of most entries of dL/dlogits for a mean cross-entropy loss
    while the predicted distribution is still close to uniform."""
    if n_tokens < 1 or vocab < 2:
        raise ValueError(f"need n_tokens >= 1 and vocab >= 2, got {n_tokens} and {vocab}")
    return 1.0 / (n_tokens * vocab)


def log2_hist(mags: torch.Tensor, lo: int = -64, hi: int = 24) -> dict:
    """Counts of the non-zero finite magnitudes per power of two [2**e, 2**(e+1)), e from lo to hi-1
    (clamped at the ends), with the number of exact zeros."""
    if hi <= lo:
        raise ValueError(f"need lo < hi, got lo={lo}, hi={hi}")
    m = mags[torch.isfinite(mags) & (mags > 0)].float()
    e = torch.floor(torch.log2(m)).clamp(lo, hi - 1).long() - lo
    counts = torch.bincount(e.cpu(), minlength=hi - lo)
    return {"log2_lo": list(range(lo, hi)), "counts": counts.tolist(), "zeros": int((mags == 0).sum())}


def zones(hist: dict, fmt: str = "fp16", log2_scale: int = 0) -> dict:
    """Where the histogram's values land in `fmt` once multiplied by 2**log2_scale: fractions of the
    non-zero values that underflow (below the smallest subnormal: flushed to zero, or rounded up to it
    from above half of it), that are subnormal (fewer significant bits), normal, or overflow (above
    the format's max: inf or saturation). Decided per power-of-two bin by its lower edge, so it is
    exact for the bins and for power-of-two scales. Also the format's edges in log2."""
    f = get_format(fmt)
    if f.kind != "float":
        raise ValueError(f"zones need a floating-point format, got {fmt!r}; choose one of {SCALE_FORMATS}")
    if not isinstance(log2_scale, int) or abs(log2_scale) > 128:
        raise ValueError(f"log2_scale must be an int in [-128, 128], got {log2_scale!r}")
    sub, normal, top = math.log2(f.smallest_subnormal), math.log2(f.smallest_normal), math.log2(f.max)
    total = sum(hist["counts"]) or 1
    out = {"underflow": 0, "subnormal": 0, "normal": 0, "overflow": 0}
    for e, c in zip(hist["log2_lo"], hist["counts"]):
        x = e + log2_scale            # the bin [2**x, 2**(x+1)) after scaling
        if x < sub:
            out["underflow"] += c
        elif x < normal:
            out["subnormal"] += c
        elif x <= top:                # lower edge within range (the top bin may be cut at the max)
            out["normal"] += c
        else:
            out["overflow"] += c
    frac = {k: v / total for k, v in out.items()}
    frac.update(format=f.name, log2_scale=log2_scale, edges={"subnormal": sub, "normal": normal, "max": top})
    return frac


def explain_logit_grads(n_tokens: int, vocab: int, zero_fp16: float | None = None,
                        losses: list[float] | None = None, fmt: str = "fp16", where: str = "this run") -> str:
    """Whether dL/dlogits ~ 1/(tokens x vocab) sits below `fmt`'s smallest subnormal, and what the
    run's numbers say about it: the fraction of fp16 dL/dlogits entries that were exactly zero, and
    the first and last loss of fp16 without a scaler against ln(vocab), the loss of a uniform guess."""
    f = get_format(fmt)
    g = typical_logit_grad(n_tokens, vocab)
    sub = f.smallest_subnormal
    side = "below" if g < sub else "above"
    text = (f"In {where}, a step averages the loss over {n_tokens:,} tokens with a vocabulary of {vocab:,}: "
            f"most entries of dL/dlogits are about 1/({n_tokens:,} × {vocab:,}) = 2^{math.log2(g):.1f}, "
            f"**{side}** {f.name}'s smallest subnormal 2^{math.log2(sub):.0f}.")
    if zero_fp16 is not None:
        text += f" Under {f.name} autocast without a scaler, **{zero_fp16:.1%}** of those entries were exactly zero."
    if losses:
        text += " " + explain_noscale_losses(losses, vocab)
    if g < sub:
        need = math.ceil(math.log2(sub) - math.log2(g))
        text += (f" A loss scale of at least 2^{need} lifts them into {f.name}'s range; GradScaler starts "
                 f"at 2^16.")
    else:
        text += (f" At this size they survive in {f.name} even without a scaler: the gradients that matter "
                 f"here are not small enough to flush.")
    return text


def explain_noscale_losses(losses: list[float], vocab: int) -> str:
    """How the loss of fp16 without a scaler moved, first step to last, against ln(vocab), the loss of
    a uniform guess: the part of `explain_logit_grads` that a training run adds to section 2's probe."""
    if not losses:
        raise ValueError("no losses to describe")
    first, last, uniform = losses[0], losses[-1], math.log(vocab)
    moved = first - last
    if abs(moved) < 0.02 * uniform:
        verdict = "did not fall"
    elif moved > 0:
        verdict = f"fell by {moved:.2f}"
    else:
        verdict = f"rose by {-moved:.2f}"
    return (f"Without a scaler the loss went from {first:.2f} to {last:.2f} ({verdict}; a uniform "
            f"guess scores ln({vocab:,}) = {uniform:.2f}).")

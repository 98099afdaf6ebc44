"""Checks for notebook 02 (AMP and GradScaler).

- 02.rescue_scale: predict, then measure with `amp.activation_grads`, the smallest power-of-two loss
  scale at which the fp16 gradient of a given model's logits holds only normal fp16 numbers (nothing
  flushed to zero, nothing subnormal); then say what doubling the batch does to it. The scale is
  checked by what it must be (all normal at 2**k, not at 2**(k-1)); the letter by the instructor's
  answer key (instructor/hidden_checks/nb02.py).
- 02.unscale_clip: implement what the notebook did not show: gradient clipping with a loss scaler
  (unscale, skip on inf/NaN, clip the total norm), checked against torch's own `GradScaler.unscale_`
  followed by `torch.nn.utils.clip_grad_norm_` on seeded gradients the learner does not see.
"""
from __future__ import annotations

import math

import torch

from course_kit import grading
from course_kit.grading.checks import feedback, registry

# ---- 02.rescue_scale ----------------------------------------------------------------------------

RESCUE = {"vocab": 1024, "seq_len": 64, "batch": 16, "seed": 0}
FP16_SMALLEST_NORMAL = 2.0 ** -14
CHOICES = ("A", "B", "C", "D")   # doubled batch: (A) the scale halves, (B) stays, (C) doubles, (D) quadruples


def rescue_model_and_tokens(batch: int | None = None):
    """The exercise's model (the smoke TinyGPT with a wider vocabulary and longer rows) and its first
    batch, on the CPU, exactly as the notebook's task builds them."""
    from course_kit.models import tiny_gpt
    cfg = tiny_gpt.config("smoke", vocab=RESCUE["vocab"], seq_len=RESCUE["seq_len"])
    tokens = tiny_gpt.batches(tiny_gpt.markov_tokens(cfg.vocab, 50 * cfg.seq_len, seed=RESCUE["seed"]),
                              batch or RESCUE["batch"], cfg.seq_len, 1, seed=RESCUE["seed"], device="cpu")[0]
    return tiny_gpt.TinyGPT.from_config(cfg, seed=RESCUE["seed"], device="cpu"), tokens


def all_normal(model, tokens, log2_scale: int) -> bool:
    """Measured: under fp16 autocast with the loss times 2**log2_scale, is every entry of the logits'
    gradient a normal fp16 number (no zero, no subnormal)?"""
    from course_kit import amp
    g = amp.activation_grads(model, tokens, "fp16_noscale", scale=2.0 ** log2_scale)["logits"]
    return bool((g["mags"] * 2.0 ** log2_scale >= FP16_SMALLEST_NORMAL).all())


RESCUE_HINT = """Measure: for k = 0, 1, 2, ... call amp.activation_grads(model, tokens, "fp16_noscale",
scale=2.0**k) and look at ["logits"]["mags"] (the fp16 gradient divided by the scale): times 2**k, is
every entry at least fp16's smallest normal, 2**-14? To explain, remember how the loss is averaged:
what does each logit's gradient become when there are twice as many tokens?"""


def _int(found, what: str) -> int:
    if isinstance(found, bool) or not isinstance(found, int):
        raise grading.Wrong(f"{what}: expected an int, found {feedback.describe(found)}")
    return found


@grading.exercise("02.rescue_scale", hint=RESCUE_HINT, keyed="DOUBLED")
def rescue_scale(predicted, log2_scale, doubled) -> None:
    """predicted: log2 of the scale guessed before measuring (recorded, not graded); log2_scale: the
    measured smallest k (checked by measuring at 2**k and 2**(k-1)); doubled: a letter."""
    wrong = feedback.Fields()
    with wrong.field():
        _int(predicted, "PREDICTED_LOG2 (recorded, not graded)")
    with wrong.field():
        k = _int(log2_scale, "LOG2_SCALE")
        if not 0 <= k <= 64:
            raise grading.Wrong(f"LOG2_SCALE: {k} is outside 0..64")
        model, tokens = rescue_model_and_tokens()
        if not all_normal(model, tokens, k):
            raise grading.Wrong(f"LOG2_SCALE: at 2**{k} some logit gradients are still zero or subnormal in fp16")
        if k > 0 and all_normal(model, tokens, k - 1):
            raise grading.Wrong(f"LOG2_SCALE: 2**{k} works, but it is not the smallest power of two that does")
    with wrong.field():
        if not (isinstance(doubled, str) and doubled.strip().upper() in CHOICES):
            raise grading.Wrong(f"DOUBLED: expected one of {', '.join(map(repr, CHOICES))}, found {doubled!r}"[:200])
    wrong.done()
    key = registry.key("02.rescue_scale")
    if key is not None:
        grading.expect(doubled.strip().upper() == key["doubled"],
                       "DOUBLED: that is not what doubling the batch does to the scale needed", key["doubled"], doubled)


# ---- 02.unscale_clip ----------------------------------------------------------------------------

def torch_unscale_clip(grads: list[torch.Tensor], scale: float, max_norm: float) -> list[torch.Tensor] | None:
    """The oracle: torch's GradScaler.unscale_, then clip_grad_norm_, then GradScaler.step (which
    skips the optimizer's step when a gradient was inf or NaN). The gradients the step would use, or None."""
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    stepped = []

    class Recorder(torch.optim.SGD):
        def step(self, closure=None):
            stepped.append(True)

    opt = Recorder(params, lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    scaler.scale(torch.zeros(()))       # creates the scaler's state, as scaling a loss does
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    scaler.step(opt)
    return [p.grad for p in params] if stepped else None


def clip_cases() -> list[tuple]:
    """(grads, scale, max_norm): scaled gradients as the backward pass leaves them, of several shapes
    and magnitudes; some clipped, some not (the norm below max_norm), some with inf or NaN, scales that
    are and are not powers of two, norms small enough that the clip's epsilon matters."""
    g = torch.Generator().manual_seed(202)
    cases = []
    for i, (scale, true_size, max_norm) in enumerate([
            (2.0 ** 16, 1.0, 1.0), (2.0 ** 16, 0.01, 1.0), (1024.0, 3.0, 0.5), (3.0, 1.0, 2.0),
            (2.0 ** 24, 1e-3, 1e-3), (2.0 ** 10, 5e-4, 1e-4), (1.0, 10.0, 1.0), (65536.0, 1.0, 1.0),
            (65536.0, 1.0, 1.0), (7.0, 0.2, 0.05), (2.0 ** 20, 2e-3, 1.0)]):
        shapes = [(4, 8), (8,), (3, 5, 2)][: 1 + i % 3]
        grads = [torch.randn(s, generator=g) * true_size * scale for s in shapes]
        if i == 7:
            grads[0][1, 2] = math.inf           # an overflow in one gradient
        if i == 8:
            grads[-1][0] = math.nan
        cases.append((grads, scale, max_norm))
    return cases


CLIP_HINT = """The order matters: GradScaler's unscale_ multiplies every gradient by 1/S (1/S computed
in fp64, then rounded to fp32), and reports whether any gradient was inf or NaN; a step with one is
skipped (return None). Then clip_grad_norm_ on the unscaled gradients: the total norm is the 2-norm of
all the gradients together; each is multiplied by max_norm / (total + 1e-6), clamped to at most 1."""


@grading.exercise("02.unscale_clip", cases=clip_cases, hint=CLIP_HINT)
def unscale_clip(fn) -> None:
    """fn(grads, scale, max_norm) -> list of the clipped, unscaled gradients, or None for a skipped step."""
    for grads, scale, max_norm in clip_cases():
        found = fn(grads, scale, max_norm)
        want = torch_unscale_clip(grads, scale, max_norm)
        norm = float(torch.linalg.vector_norm(torch.cat([t.flatten() for t in grads]).double()) / scale)
        kind = ("a step whose gradients hold inf or NaN" if want is None else
                "gradients the clip must shrink" if norm > max_norm else "gradients already within max_norm")
        what = f"unscale_and_clip on {len(grads)} gradients, scale {scale:g}, max_norm {max_norm:g} ({kind})"
        if want is None:
            if found is not None:
                raise grading.Wrong(f"{what}: the step must be skipped (return None), found {feedback.describe(found)}")
            continue
        if not (isinstance(found, (list, tuple)) and len(found) == len(want)):
            raise grading.Wrong(f"{what}: expected a list of {len(want)} tensors, found {feedback.describe(found)}")
        for i, (f, w) in enumerate(zip(found, want)):
            feedback.tensor(f, w, f"{what}, gradient {i}", rtol=2e-6, atol=0.0)

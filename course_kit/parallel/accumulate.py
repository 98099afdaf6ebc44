"""Gradient accumulation: the step of a large batch, taken in k micro-batches (notebook 09, §9).

The loss of a batch of B sequences is a mean over its B*T tokens. Cut the batch into k equal
micro-batches: each one's loss is the mean over its B*T/k tokens, and the mean of those k means is
the batch's mean. Backpropagating loss_i / k for each micro-batch and letting `.grad` add them up
gives the gradient of the whole batch, so one optimizer step afterwards is the large-batch step.
Equal in exact arithmetic; in float32 the tokens are summed in another order (k partial sums, each
divided, then added), so the two agree to rounding, about 1e-7 relative per value. (With padded,
unequal micro-batches the mean of means would weight tokens unequally: divide by the total token
count instead.)

Memory: only one micro-batch's activations are alive at a time, about 1/k of the batch's. Time:
the same arithmetic in k smaller pieces, which use the hardware less well, plus k forward and
backward launches instead of one.
"""
from __future__ import annotations

import torch

from .. import bench, narrate
from ..models.tiny_gpt import TinyGPT, batches, config, markov_tokens
from .step_memory import step_peak_bytes


def accumulate_grads(model: TinyGPT, tokens: torch.Tensor, micro: int) -> torch.Tensor:
    """Backpropagate the batch `tokens` [B, T+1] in `micro` equal micro-batches (adding into .grad);
    returns the batch's loss (detached)."""
    if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1 or tokens.shape[0] % micro:
        raise ValueError(f"micro={micro!r} must be an integer >= 1 that divides the batch of {tokens.shape[0]}")
    total = torch.zeros((), device=tokens.device)
    for chunk in tokens.chunk(micro):
        loss = model.loss(chunk) / micro
        loss.backward()
        total += loss.detach()
    return total


def check_accumulation(preset: str = "smoke", batch: int = 8, micro: int = 4, steps: int = 2,
                       seed: int = 0) -> dict:
    """The same model trained `steps` SGD steps on the same batches, whole and in `micro`
    micro-batches: the largest relative difference of the first step's gradients and of the final
    parameters.

    SGD, because its step is linear in the gradient, so the parameters inherit the gradients'
    rounding-sized differences and nothing more. Adam divides each gradient by its own running
    magnitude: for a weight whose gradient is almost zero, that turns two rounding-level different
    tiny numbers into two different updates of full size, so Adam's weights agree less closely
    (about 1e-4 relative after two steps here) although the gradients agree just as well."""
    cfg = config(preset)
    data = batches(markov_tokens(cfg.vocab, max(20 * cfg.seq_len, 4096), seed=seed), batch, cfg.seq_len, steps,
                   seed=seed)
    models = {k: TinyGPT.from_config(cfg, seed=seed) for k in (1, micro)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1) for k, m in models.items()}
    first_grads, losses = {}, {}
    for i, x in enumerate(data):
        for k, model in models.items():
            opts[k].zero_grad(set_to_none=True)
            losses.setdefault(k, []).append(float(accumulate_grads(model, x, k)))
            if i == 0:
                first_grads[k] = [p.grad.clone() for p in model.parameters()]
            opts[k].step()

    def rel(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
        return max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-30)) for x, y in zip(a, b))

    params = {k: [p.detach() for p in m.parameters()] for k, m in models.items()}
    return {"grads_rel_diff": rel(first_grads[micro], first_grads[1]),
            "params_rel_diff": rel(params[micro], params[1]),
            "loss_diff": max(abs(a - b) for a, b in zip(losses[micro], losses[1])), "micro": micro}


def cost(preset: str = "smoke", batch: int = 8, micros: tuple[int, ...] = (1, 2, 4, 8), *,
         device: str | torch.device = "cpu", repeat: int = 5, seed: int = 0) -> list[dict]:
    """Per number of micro-batches k: the peak memory and the median time of one whole step
    (accumulate, then AdamW) of the same batch."""
    cfg = config(preset)
    data = batches(markov_tokens(cfg.vocab, max(20 * cfg.seq_len, 4096), seed=seed), batch, cfg.seq_len, 3,
                   seed=seed, device=device)
    rows = []
    for k in micros:
        model = TinyGPT.from_config(cfg, seed=seed, device=device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(x: torch.Tensor) -> None:
            opt.zero_grad(set_to_none=True)
            accumulate_grads(model, x, k)
            opt.step()

        step(data[0])                               # Adam's state is allocated before the peak counts
        opt.zero_grad(set_to_none=True)
        peak, _ = step_peak_bytes(lambda: (accumulate_grads(model, data[1], k), opt.step()), device)
        timing = bench.timeit(step, warmup=1, repeat=repeat, inputs=[(x,) for x in data], device=device)
        rows.append({"micro": k, "micro_batch": batch // k, "peak_bytes": peak, "step_s": timing.median_s})
    return rows


def explain_accumulation(rows: list[dict], check: dict | None = None) -> str:
    """Memory and time of k micro-batches against the one large batch, and the equality check."""
    base = next((r for r in rows if r["micro"] == 1), None)
    if base is None:
        raise ValueError(f"need the one-batch row (micro=1) to compare against, got micro={[r['micro'] for r in rows]}")
    mib = 2**20
    parts = []
    for r in rows:
        if r["micro"] == 1:
            continue
        parts.append(f"k={r['micro']} (micro-batches of {r['micro_batch']}): peak {r['peak_bytes'] / mib:.1f} MiB, "
                     f"{narrate.more_or_less(r['peak_bytes'] / mib, base['peak_bytes'] / mib, 'MiB')} the whole batch; "
                     f"step {narrate.speed(r['step_s'], base['step_s'])} the whole batch")
    text = (f"The whole batch of {base['micro_batch']} in one go peaked at {base['peak_bytes'] / mib:.1f} MiB and took "
            f"{base['step_s'] * 1e3:.1f} ms per step. " + "; ".join(parts) + ".")
    if check is not None:
        text += (f" And the step is the same step: with k={check['micro']}, the gradients differ from the whole "
                 f"batch's by at most {check['grads_rel_diff']:.1e} (relative), the weights after the steps by "
                 f"{check['params_rel_diff']:.1e}: float32 rounding of sums taken in another order.")
    return text

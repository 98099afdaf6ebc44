"""`course-kit bench amp`: one training loop in every precision mode (notebook 02).

Checks first: the course's DynamicLossScaler against torch's GradScaler on the same steps (scale
history and parameters), and that every mode's loss is finite and falls. Then it times a TinyGPT of
about 0.34B parameters (preset "full", batch 32 x 1024 tokens) per mode on the same batches.
Acceptance: bf16 autocast step >= 2.5x strict fp32; fp16 + GradScaler skips <= 1% of steps after
warm-up. Where a target is missed the summary carries the profiler's top kernels.
"""
from __future__ import annotations

import gc

import torch

from .. import bench
from ..amp import PRECISIONS, note, train
from ..models.tiny_gpt import TinyGPT, batches, config, markov_tokens

# Steps per mode at full size: fp32 is slow (~1 s/step), fp16 + scaler runs longest because its
# skipped-step fraction after warm-up is one of the targets.
_STEPS = {"fp32": 12, "tf32": 20, "bf16": 30, "fp16_noscale": 30, "fp16_scaler": 150}
_WARMUP_STEPS = 20   # steps excluded from the skipped fraction (the scale settles first)
_TIME_WARMUP = 3     # steps excluded from the step-time median


def _check_scaler(device: str) -> dict:
    """DynamicLossScaler vs GradScaler on a small model with forced overflows, on this device."""
    kw = dict(init_scale=2.0**30, growth_interval=4)
    data = batches(markov_tokens(64, 4096, seed=1), 4, 32, 20, seed=1, device=device)
    runs, models = {}, {}
    for which in ("torch", "course"):
        models[which] = TinyGPT.from_preset("smoke", seed=1, device=device)
        runs[which] = train("fp16_scaler", steps=20, scaler=which, scaler_kwargs=kw, model=models[which],
                            data=data, track_grads=False, device=device)
    same_params = all(torch.equal(a, b) for a, b in zip(models["torch"].parameters(),
                                                         models["course"].parameters()))
    return {"same_scale_history": runs["torch"].scales == runs["course"].scales,
            "same_params": same_params, "skipped_steps": sum(runs["torch"].skipped)}


def _top_kernels(model: TinyGPT, tokens: torch.Tensor, precision: str) -> list[dict]:
    """The profiler's top GPU kernels of one training step, for the explanation of a missed target."""
    from torch.profiler import ProfilerActivity, profile

    from ..amp import get
    prec = get(precision)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with prec.context("cuda"):
            loss = model.loss(tokens)
        loss.backward()
        torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        rows.append({"kernel": e.key[:100], "count": e.count, "gpu_ms": t / 1e3})
    return sorted(rows, key=lambda r: -r["gpu_ms"])[:10]


@bench.topic("amp", help="AMP: step time, memory and skipped steps per precision mode")
def run(params: dict) -> dict:
    device = params.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    size = params.get("size", "full")
    preset = {"smoke": "smoke", "cpu": "cpu"}.get(size, size)
    preset = preset if preset in ("smoke", "cpu", "small_gpu", "full") else "full"
    batch = int(params.get("batch", {"full": 32, "small_gpu": 16}.get(preset, 8)))
    scale_steps = 1 if preset in ("smoke", "cpu") else int(params.get("steps_scale", 1))
    steps = {k: (max(8, v // 10) if preset in ("smoke", "cpu") else v * scale_steps) for k, v in _STEPS.items()}
    modes = [m for m in params.get("modes", list(PRECISIONS))]
    cfg = config(preset)

    checks = _check_scaler(device)
    data = batches(markov_tokens(cfg.vocab, 200_000, seed=0), batch, cfg.seq_len, max(steps.values()),
                   seed=0, device=device)
    results, runs = [], {}
    for mode in bench.progress(modes, desc="precision modes"):
        n = steps[mode]

        def one_run(mode=mode, n=n):
            return train(mode, preset=preset, steps=n, batch=batch, lr=3e-4, seed=0, device=device,
                         data=data[:n], track_grads=True)

        r = bench.guard_oom(one_run, what=f"{mode} training")
        if isinstance(r, bench.Skipped):
            results.append({"name": mode, "skipped": r.reason})
            continue
        runs[mode] = r
        warm = _WARMUP_STEPS if n > 2 * _WARMUP_STEPS else n // 4
        results.append({
            "name": mode, "steps": n, "median_step_s": r.median_step_s(_TIME_WARMUP),
            "tokens_per_s": batch * cfg.seq_len / r.median_step_s(_TIME_WARMUP),
            "peak_mem_gib": (r.peak_mem_bytes or 0) / 2**30, "saved_activation_gib": r.saved_bytes / 2**30,
            "first_loss": r.losses[0], "last_loss": r.losses[-1],
            "loss_finite": all(x == x and abs(x) != float("inf") for x in r.losses),
            "skipped_steps": sum(r.skipped), "skipped_after_warmup": r.skipped_fraction(warm),
            "final_scale": r.scales[-1], "underflow_frac_last": r.underflow[-1],
            "underflow_scaled_frac_last": r.underflow_scaled[-1], "zero_grad_frac_last": r.zero_grads[-1],
            "note": note(mode, device),
            # Per-step curves for the notebook's plots.
            "losses": r.losses, "scales": r.scales, "skipped": r.skipped, "times_s": r.times_s,
            "underflow": r.underflow, "grad_hist": r.grad_hist,
        })
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()

    by = {r["name"]: r for r in results if "median_step_s" in r}
    summary: dict = {"checks": checks, "n_params": cfg.n_params(), "preset": preset, "batch": batch,
                     "seq_len": cfg.seq_len}
    if "fp32" in by:
        for m in ("tf32", "bf16", "fp16_scaler", "fp16_noscale"):
            if m in by:
                summary[f"{m}_speedup_vs_fp32"] = by["fp32"]["median_step_s"] / by[m]["median_step_s"]
    if "fp16_scaler" in by:
        summary["fp16_scaler_skipped_after_warmup"] = by["fp16_scaler"]["skipped_after_warmup"]
        summary["skipped_warmup_steps"] = _WARMUP_STEPS
    summary["targets"] = {
        "bf16_speedup_vs_fp32 >= 2.5": summary.get("bf16_speedup_vs_fp32", 0) >= 2.5,
        "fp16_scaler_skipped_after_warmup <= 0.01": summary.get("fp16_scaler_skipped_after_warmup", 1) <= 0.01,
    }
    summary["checks_passed"] = bool(checks["same_scale_history"] and checks["same_params"]
                                    and all(r.get("loss_finite", True) for r in results
                                            if r["name"] != "fp16_noscale"))
    # A missed speed target carries the profile of both peers, so the record explains itself.
    if device == "cuda" and not summary["targets"]["bf16_speedup_vs_fp32 >= 2.5"]:
        model = TinyGPT.from_preset(preset, seed=0, device=device)
        summary["explain_top_kernels"] = {m: _top_kernels(model, data[0], m) for m in ("fp32", "bf16")}
        del model
    return {"params": {"preset": preset, "batch": batch, "steps": steps, "modes": modes, "device": device},
            "results": results, "summary": summary}

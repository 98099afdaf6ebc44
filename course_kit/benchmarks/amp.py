"""`course-kit bench amp`: one training loop in every precision mode (notebook 02).

Checks first: the course's DynamicLossScaler against torch's GradScaler on the same steps (scale
history and parameters), and that every mode's loss is finite and falls. Then it times a TinyGPT of
about 0.34B parameters (preset "full", batch 8 x 1024 tokens: strict fp32 peaks near 35 GiB, far from
the H200's capacity, where allocator thrash would slow every mode) per mode on the same batches, each
mode's model, optimizer and activations freed before the next. Acceptance: bf16 autocast step >= 2.5x
strict fp32; fp16 + GradScaler skips <= 1% of steps after warm-up. Where the speed target is missed,
the summary carries one profiled step per peer (at a small batch, guarded against OOM) and `explain`.
On a GPU each mode's row also carries `memory_breakdown`: one steady step recorded by the allocator's
log (`amp.snapshot`), its peak split into weights, gradients, optimizer state, autocast's 16-bit
weight copies, activations and temporaries (`profiling.memory`).
"""
from __future__ import annotations

import gc
from typing import Callable

import torch

from .. import bench, narrate
from ..amp import PRECISIONS, note, train
from ..models.tiny_gpt import TinyGPT, batches, config, markov_tokens
from ..device import default_device

# Steps per mode at full size: fp32 is slow (~0.3 s/step at batch 8), fp16 + scaler runs longest as its
# skipped-step fraction after warm-up is one of the targets.
_STEPS = {"fp32": 20, "tf32": 30, "bf16": 40, "fp16_noscale": 40, "fp16_scaler": 150}
_WARMUP_STEPS = 20   # steps excluded from the skipped fraction (the scale settles first)
_TIME_WARMUP = 3     # steps excluded from the step-time median
_DEFAULT_BATCH = {"full": 8, "small_gpu": 16}   # sequences per step on a GPU (CPU presets: 8)
_EXPLAIN_BATCH = 2   # the profiled step that explains a missed target needs little memory


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


def _kernel_class(name: str) -> str:
    """Attention, GEMM (matrix-multiply units) or other (memory-bound: elementwise, norms, softmax,
    cross-entropy, casts) from a CUDA kernel's name."""
    n = name.lower()
    if any(w in n for w in ("fmha", "flash", "attention")):
        return "attention"
    if any(w in n for w in ("gemm", "nvjet", "xmma", "cutlass", "cublas", "matmul")):
        return "gemm"
    return "other"


def _top_kernels(model: TinyGPT, tokens: torch.Tensor, precision: str) -> dict:
    """One profiled forward + backward in `precision` (after one warm-up step): the top GPU kernels
    and the GPU time per kernel class, to explain a missed speed-up."""
    from torch.profiler import ProfilerActivity, profile

    from ..amp import get
    prec = get(precision)

    def step() -> None:
        with prec.context("cuda"):
            loss = model.loss(tokens)
        loss.backward()
        model.zero_grad(set_to_none=True)

    with prec.tf32_scope():   # backward in the mode's TF32 setting too
        step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        rows.append({"kernel": e.key[:100], "count": e.count, "gpu_ms": t / 1e3})
    classes: dict[str, float] = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for r in rows:
        classes[_kernel_class(r["kernel"])] += r["gpu_ms"]
    return {"top": sorted(rows, key=lambda r: -r["gpu_ms"])[:10], "class_ms": classes}


def explain_speedup(speedup: float, profiles: dict, batch: int) -> str:
    """Why bf16 autocast gained `speedup` over strict fp32, from the profiled step of each peer
    (`profiles[mode]["class_ms"]`): matrix-multiply time shrinks by the tensor-core ratio, the
    memory-bound rest only by the bytes saved, and the rest bounds the step (Amdahl)."""
    a, b = profiles["fp32"]["class_ms"], profiles["bf16"]["class_ms"]
    ta, tb = sum(a.values()), sum(b.values())
    if ta <= 0 or tb <= 0:
        return "The profiled step recorded no GPU time; no explanation available."
    mm_a, mm_b = a["gemm"] + a["attention"], b["gemm"] + b["attention"]
    other_b = b["other"]
    parts = [f"bf16 autocast ran a training step {narrate.ratio_words(speedup)} strict fp32."
             f" One profiled forward+backward at batch {batch}: fp32 {ta:.1f} ms on the GPU, bf16 {tb:.1f} ms"
             f" ({ta / tb:.2f}x)."]
    if mm_b > 0:
        parts.append(f" Matrix multiplies and attention: {mm_a:.1f} ms -> {mm_b:.1f} ms ({mm_a / mm_b:.1f}x, tensor cores);")
    if other_b > 0:
        parts.append(f" everything else (elementwise, LayerNorm, GELU, cross-entropy, casts): {a['other']:.1f} ms ->"
                     f" {other_b:.1f} ms ({a['other'] / other_b:.1f}x), because those kernels are bound by memory"
                     f" traffic and autocast keeps several of them in fp32.")
        parts.append(f" In bf16 that memory-bound part is {100 * other_b / tb:.0f}% of the step, so even infinitely"
                     f" fast matmuls would cap the speed-up near {ta / other_b:.1f}x.")
    return "".join(parts)


def summarize(results: list[dict], checks: dict, *, cfg, preset: str, batch: int, device: str,
              explain: Callable[[], dict] | None = None) -> dict:
    """The record's summary: speed-ups vs strict fp32, the skipped fraction, targets, and where the bf16
    target is missed on a GPU, `explain()`'s profiles (run under the OOM guard) and an `explain` text."""
    by = {r["name"]: r for r in results if "median_step_s" in r}
    summary: dict = {"checks": checks, "n_params": cfg.n_params(), "preset": preset, "batch": batch,
                     "seq_len": cfg.seq_len,
                     "max_peak_mem_gib": max((r.get("peak_mem_gib") or 0 for r in by.values()), default=0)}
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
    missed = "bf16_speedup_vs_fp32" in summary and not summary["targets"]["bf16_speedup_vs_fp32 >= 2.5"]
    if missed and device == "cuda" and explain is not None:
        prof = bench.guard_oom(explain, what=f"the explaining profile (batch {_EXPLAIN_BATCH})")
        if isinstance(prof, bench.Skipped):
            summary["explain"] = f"bf16 target missed; the explaining profile was skipped: {prof.reason}"
        else:
            summary["explain_top_kernels"] = {m: p["top"] for m, p in prof.items()}
            summary["explain_kernel_class_ms"] = {m: p["class_ms"] for m, p in prof.items()}
            summary["explain_batch"] = _EXPLAIN_BATCH
            summary["explain"] = explain_speedup(summary["bf16_speedup_vs_fp32"], prof, _EXPLAIN_BATCH)
    return summary


def _release(device: str) -> float | None:
    """Collect garbage and return cached blocks; GiB still allocated (a leak would show here)."""
    gc.collect()
    if device != "cuda":
        return None
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated() / 2**30


def _breakdown(preset: str, tokens: torch.Tensor, mode: str) -> dict:
    """`amp.snapshot.step_memory` on a fresh model of the preset (an OOM is recorded, never fatal)."""
    from ..amp.snapshot import step_memory

    def run() -> dict:
        model = TinyGPT.from_preset(preset, seed=0, device=tokens.device)
        try:
            return step_memory(model, tokens, mode)
        finally:
            del model
    out = bench.guard_oom(run, what=f"the memory snapshot of one {mode} step")
    return {"skipped": out.reason} if isinstance(out, bench.Skipped) else out


@bench.topic("amp", help="AMP: step time, memory and skipped steps per precision mode")
def run(params: dict) -> dict:
    device = params.get("device") or default_device()
    size = params.get("size", "full")
    preset = {"smoke": "smoke", "cpu": "cpu"}.get(size, size)
    preset = preset if preset in ("smoke", "cpu", "small_gpu", "full") else "full"
    batch = int(params.get("batch", _DEFAULT_BATCH.get(preset, 8)))
    scale_steps = 1 if preset in ("smoke", "cpu") else int(params.get("steps_scale", 1))
    steps = {k: (max(8, v // 10) if preset in ("smoke", "cpu") else v * scale_steps) for k, v in _STEPS.items()}
    modes = [m for m in params.get("modes", list(PRECISIONS))]
    cfg = config(preset)

    checks = _check_scaler(device)
    _release(device)
    data = batches(markov_tokens(cfg.vocab, 200_000, seed=0), batch, cfg.seq_len, max(steps.values()),
                   seed=0, device=device)
    results = []
    for mode in bench.progress(modes, desc="precision modes"):
        n = steps[mode]
        r = bench.guard_oom(lambda: train(mode, preset=preset, steps=n, batch=batch, lr=3e-4, seed=0,
                                          device=device, data=data[:n], track_grads=True),
                            what=f"{mode} training at batch {batch}")
        if isinstance(r, bench.Skipped):
            results.append({"name": mode, "skipped": r.reason, "mem_after_gib": _release(device)})
            continue
        warm = _WARMUP_STEPS if n > 2 * _WARMUP_STEPS else n // 4
        # Only Python numbers and lists go into the record: nothing here keeps a tensor alive.
        results.append({
            "name": mode, "steps": n, "median_step_s": r.median_step_s(_TIME_WARMUP),
            "tokens_per_s": batch * cfg.seq_len / r.median_step_s(_TIME_WARMUP),
            "peak_mem_gib": (r.peak_mem_bytes or 0) / 2**30, "saved_activation_gib": r.saved_bytes / 2**30,
            # what was already allocated when this mode's peak counter started (data, leftovers):
            # the mode's own step needed peak - base (course_kit.amp.explain.step_peak_gib)
            "base_mem_gib": None if r.base_mem_bytes is None else r.base_mem_bytes / 2**30,
            "saved_by_dtype": r.saved_by_dtype,
            "first_loss": r.losses[0], "last_loss": r.losses[-1],
            "loss_finite": all(x == x and abs(x) != float("inf") for x in r.losses),
            "skipped_steps": sum(r.skipped), "skipped_after_warmup": r.skipped_fraction(warm),
            "final_scale": r.scales[-1], "underflow_frac_last": r.underflow[-1],
            "underflow_scaled_frac_last": r.underflow_scaled[-1], "zero_grad_frac_last": r.zero_grads[-1],
            "tf32_flags": r.tf32_flags, "note": note(mode, device),
            # Per-step curves for the notebook's plots.
            "losses": r.losses, "scales": r.scales, "skipped": r.skipped, "times_s": r.times_s,
            "underflow": r.underflow, "grad_hist": r.grad_hist,
        })
        del r
        results[-1]["mem_after_gib"] = _release(device)
        if device == "cuda":   # what holds one steady step's peak, by the allocator's log
            results[-1]["memory_breakdown"] = _breakdown(preset, data[0], mode)
            _release(device)

    def explain() -> dict:
        model = TinyGPT.from_preset(preset, seed=0, device=device)
        try:
            return {m: _top_kernels(model, data[0][:_EXPLAIN_BATCH], m) for m in ("fp32", "bf16")}
        finally:
            del model
            _release(device)

    summary = summarize(results, checks, cfg=cfg, preset=preset, batch=batch, device=device, explain=explain)
    return {"params": {"preset": preset, "batch": batch, "steps": steps, "modes": modes, "device": device},
            "results": results, "summary": summary}

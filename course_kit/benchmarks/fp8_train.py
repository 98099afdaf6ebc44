"""`course-kit bench fp8_train`: TinyGPT trained in fp8 against bf16 autocast (notebook 02, §6).

Phases, each guarded (an error is recorded and the next phase runs):
1. the fp8 layer on this device: the path taken (torch._scaled_mm on sm_89+, else emulated, and
   why) against the emulated path on the same values;
2. timed training, same seed and batches: bf16 autocast and fp8 (dynamic scaling, no range
   statistics inside the timed steps): loss curves, step times, peak memory, bytes saved for backward;
3. fp8 again with the range statistics (the scales over training and the step where a tensor
   would have left its format without them), then delayed scaling and no scaling;
4. where the time goes: one linear of each of the model's shapes, forward + backward, bf16
   against fp8, and the fp8 matmul alone against the bf16 one.
Budget: about 60 s on an H200 at preset "full" (0.34B parameters, batch 8 x 1024 tokens); phases
3-4 are skipped, and say so, once `params["budget_s"]` (default 80) is spent.
"""
from __future__ import annotations

import gc
import time

import torch

from .. import bench
from ..amp import fp8, fp8_train
from ..models.tiny_gpt import config

_PRESET = {"smoke": "smoke", "cpu": "cpu", "small_gpu": "small_gpu", "full": "full"}
_STEPS = {"smoke": 10, "cpu": 16, "small_gpu": 40, "full": 40}
_BATCH = {"smoke": 8, "cpu": 8, "small_gpu": 16, "full": 8}


def _say(text: str) -> None:
    print(f"[fp8_train] {text}", flush=True)


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def layer_check(device: str, rows: int = 256, inp: int = 512, out: int = 1024) -> dict:
    """The path this device takes against the emulated path, on the same values: max relative
    differences of the output and both gradients."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, inp, generator=g).to(device)
    gy = (torch.randn(rows, out, generator=g) * 1e-3).to(device)
    lin = torch.nn.Linear(inp, out).to(device)
    got = {}
    for path in ("auto", "emulated"):
        layer = fp8.Fp8Linear.from_linear(lin, path=path)
        xi = x.clone().requires_grad_()
        lin.weight.grad = None
        y = layer(xi)
        y.backward(gy)
        got[path] = (y.detach(), xi.grad, lin.weight.grad.clone(), layer.last_path, layer.why)

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b.float()).abs().max() / b.float().abs().max())

    a, e = got["auto"], got["emulated"]
    return {"path": a[3], "why": a[4], "output_rel_diff": rel(a[0], e[0]), "grad_input_rel_diff": rel(a[1], e[1]),
            "grad_weight_rel_diff": rel(a[2], e[2])}


def _run_row(name: str, res, cfg, batch: int) -> dict:
    return {"name": name, "steps": len(res.losses), "median_step_s": res.median_step_s(3),
            "tokens_per_s": batch * cfg.seq_len / res.median_step_s(3), "losses": res.losses, "times_s": res.times_s,
            "peak_mem_gib": None if res.peak_mem_bytes is None else (res.peak_mem_bytes - (res.base_mem_bytes or 0)) / 2**30,
            "saved_by_dtype": res.saved_by_dtype, "saved_gib": (res.saved_bytes or 0) / 2**30,
            "final_loss": fp8_train.final_loss(res.losses)}   # the statistic 02 states (amp.final_loss)


def layer_times(cfg, batch: int, device: str, repeat: int = 20) -> list[dict]:
    """For each linear shape of the model: forward + backward of nn.Linear under bf16 autocast and of
    Fp8Linear (no range statistics), and the matmul alone: bf16 against fp8 (torch._scaled_mm where
    this device has fp8 tensor cores)."""
    d, n = cfg.d_model, batch * cfg.seq_len
    shapes = {"qkv": (d, 3 * d), "proj": (d, d), "fc": (d, cfg.mlp_ratio * d), "out": (cfg.mlp_ratio * d, d)}
    rows = []
    for name, (inp, out) in shapes.items():
        lin = torch.nn.Linear(inp, out, device=device)
        layer = fp8.Fp8Linear.from_linear(lin, track_ranges=False)
        x = torch.randn(n, inp, device=device, requires_grad=True)
        gy = torch.randn(n, out, device=device, dtype=torch.bfloat16)

        def fwd_bwd(module) -> None:
            with torch.autocast(device, dtype=torch.bfloat16):
                y = module(x)
            y.backward(gy.to(y.dtype))

        t16 = bench.timeit(lambda: fwd_bwd(lin), warmup=3, repeat=repeat, device=device)
        t8 = bench.timeit(lambda: fwd_bwd(layer), warmup=3, repeat=repeat, device=device)
        a16, b16 = x.detach().bfloat16(), lin.weight.detach().bfloat16().t()
        mm16 = bench.timeit(lambda: a16 @ b16, warmup=3, repeat=repeat, device=device)
        xq, sx = layer.cast("input", x.detach())
        wq, sw = layer.cast("weight", lin.weight.detach())
        path = layer.last_path or fp8.choose_path(torch.device(device).type, None, (n, inp, out))[0]
        mm8 = bench.timeit(lambda: fp8.fp8_mm(xq, sx, wq.t(), sw, torch.bfloat16, path), warmup=3,
                           repeat=repeat, device=device)
        rows.append({"name": name, "tokens": n, "in": inp, "out": out, "path": path,
                     "linear_bf16_s": t16.median_s, "linear_fp8_s": t8.median_s,
                     "matmul_bf16_s": mm16.median_s, "matmul_fp8_s": mm8.median_s,
                     "cast_overhead_s": t8.median_s - 3 * mm8.median_s})
    return rows


def _guard(name: str, errors: dict, fn):
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - one failed phase is recorded, the others still run
        errors[name] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err).strip() else ''}"
        _say(f"{name} failed: {errors[name]}")
        return None


@bench.topic("fp8_train", help="fp8 training (e4m3/e5m2, per-tensor scales) against bf16 autocast")
def run(params: dict) -> dict:
    t_start = time.perf_counter()
    device = params.get("device") or "cpu"
    size = params.get("size", "full")
    preset = _PRESET.get(size, "full")
    steps = int(params.get("steps", _STEPS[preset]))
    batch = int(params.get("batch", _BATCH[preset]))
    budget = float(params.get("budget_s", 80.0))
    lr = 3e-3 if preset in ("smoke", "cpu") else 3e-4
    cfg = config(preset)
    errors: dict[str, str] = {}
    out: dict = {"params": {"preset": preset, "steps": steps, "batch": batch, "lr": lr, "device": device,
                            "n_params": cfg.n_params(), "seq_len": cfg.seq_len}}
    _say(f"phase 1: the fp8 layer on {device}")
    check = _guard("layer_check", errors, lambda: layer_check(device)) or {}
    data = fp8_train.make_data(preset, batch, steps, 0, device)
    kw = dict(preset=preset, steps=steps, batch=batch, lr=lr, device=device, data=data)
    results, histories = [], {}
    _say(f"phase 2: timed training, bf16 and fp8, {steps} steps of {batch} x {cfg.seq_len} tokens ({preset})")
    for name in ("bf16", "fp8"):
        c = _guard(f"train_{name}", errors, lambda: fp8_train.compare((name,), track_ranges=False, **kw))
        if c is not None:
            results.append(_run_row(name, c.runs[name], cfg, batch))
            out.setdefault("why", c.why.get("fp8"))
        _free(device)
    for name in ("fp8", "fp8_delayed", "fp8_noscale"):
        if time.perf_counter() - t_start > budget:
            errors[f"ranges_{name}"] = f"skipped: the {budget:.0f} s budget was spent"
            continue
        _say(f"phase 3: {name} with range statistics")
        c = _guard(f"ranges_{name}", errors, lambda: fp8_train.compare((name,), track_ranges=True, **kw))
        if c is None:
            continue
        h = c.histories[name]
        histories[name] = {"scales": fp8_train.scale_summary(h), "out_of_range": fp8_train.out_of_range(h),
                           "losses": c.runs[name].losses,
                           "max_saturated": max((s["saturated"] for row in h.steps for r in row.values()
                                                 for s in r.values()), default=0.0)}
        _free(device)
    layers = None
    if time.perf_counter() - t_start <= budget:
        _say("phase 4: one linear of each shape, bf16 against fp8")
        layers = _guard("layer_times", errors, lambda: layer_times(cfg, batch, device))
    else:
        errors["layer_times"] = f"skipped: the {budget:.0f} s budget was spent"
    out.update(results=results, layer_check=check, histories=histories, layer_times=layers, errors=errors,
               summary=summarize(results, histories, check, layers))
    _say(f"done in {time.perf_counter() - t_start:.0f} s; errors: {sorted(errors) or 'none'}")
    return out


def summarize(results: list[dict], histories: dict, check: dict, layers: list[dict] | None) -> dict:
    by = {r["name"]: r for r in results}
    s: dict = {"path": check.get("path"), "why": check.get("why"), "loss_tolerance": fp8_train.LOSS_TOLERANCE}
    if "bf16" in by and "fp8" in by:
        gap = (by["fp8"]["final_loss"] - by["bf16"]["final_loss"]) / by["bf16"]["final_loss"]
        s.update(fp8_loss_gap=gap, fp8_within_tolerance=abs(gap) <= fp8_train.LOSS_TOLERANCE,
                 fp8_speedup_vs_bf16=by["bf16"]["median_step_s"] / by["fp8"]["median_step_s"])
    if "fp8" in histories:
        s["out_of_range"] = histories["fp8"]["out_of_range"]
    if layers:
        s["matmul_fp8_speedup"] = {r["name"]: r["matmul_bf16_s"] / r["matmul_fp8_s"] for r in layers}
        s["linear_fp8_speedup"] = {r["name"]: r["linear_bf16_s"] / r["linear_fp8_s"] for r in layers}
    s["checks_passed"] = bool(check) and max(check.get(k, 1.0) for k in
                                             ("output_rel_diff", "grad_input_rel_diff", "grad_weight_rel_diff")) < 1e-3
    return s

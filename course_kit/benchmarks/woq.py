"""`course-kit bench woq`: weight-only int8 and int4 decode at batch 1 against bf16, in one run (issue 48).

For llama-1b and the Llama-3-8B shape (random weights, scaled as the course models draw them):
1. the ceilings of notebook 00 in this run: copy bandwidth and the bf16 matmul rate;
2. a short sweep of the quantised kernels' launch settings (programs per SM, bytes per load,
   warps) on llama-1b's whole step, chosen by the step's time (not one kernel's), then kept;
3. the batch-1 Triton decode runner (CUDA graph, PDL) in bf16, int8 and int4: tokens/s, bytes read
   per token, and that rate as a fraction of the copy bandwidth;
4. each product of the step at M = 1 (q/k/v, output, MLP up and down, logits), called as the step
   calls it, checked against the fp32 matmul of its dequantised weights, timed back to back;
5. the same products' shapes through torch's peers (bf16 linear, int8 dequantise-then-matmul, int4
   tinygemm) at M = 1, 16, 64, 256, next to the roofline's crossings (dtypes/woq_roofline.py);
6. quality: greedy agreement over 256 positions and max |Δlogit| of int8 and int4 against the
   bf16 step on the same weights (and of the bf16 Triton step against the model's eager step, the
   floor that rounding alone sets).
Every phase is guarded: a failure is recorded under summary["errors"] and the rest still runs.
Targets (the README's table, never learner text): llama-1b int8 >= 1.6x and int4 >= 2.4x the bf16
runner's tokens/s; the fused products at >= 70% of the copy bandwidth at M = 1; int8 agreement >= 95%.
"""
from __future__ import annotations

import time
import traceback

import torch

from .. import bench
from .. import device as device_info
from ..cuda_graphs.decode_kernels import constants, woq_gemv as W
from ..cuda_graphs.quantised import compare_steps
from ..dtypes import woq_roofline as R
from ..dtypes.woq_explain import dtype_label, explain_crossing, explain_decode, explain_error, explain_gemv
from ..models import llama
from ..roofline.ceilings import copy_bandwidth, matmul_rate
from . import woq_measure as measure
from .model import free

SIZES = {
    "smoke": dict(models=["tiny"], group_size=32, positions=3, prompt_len=3, max_seq=16, repeat=2, peer_ms=[1, 4],
                  copy_mib=16, matmul_n=128, sweep=False, budget_s=None),
    "cpu": dict(models=["tiny"], group_size=32, positions=8, prompt_len=4, max_seq=32, repeat=3, peer_ms=[1, 16],
                copy_mib=64, matmul_n=256, sweep=False, budget_s=None),
    "small_gpu": dict(models=["llama-1b"], group_size=128, positions=256, prompt_len=64, max_seq=512, repeat=50,
                      peer_ms=[1, 16, 64, 256], copy_mib=1024, matmul_n=4096, sweep=False, budget_s=300),
    "full": dict(models=["llama-1b", "llama3-8b"], group_size=128, positions=256, prompt_len=64, max_seq=512,
                 repeat=100, peer_ms=[1, 16, 64, 256], copy_mib=2048, matmul_n=8192, sweep=True, budget_s=150),
}
POSITIONS_8B = 128            # the 8B shape's quality run is shorter: its targets are llama-1b's
TARGETS = {"int8_vs_bf16_llama-1b": 1.6, "int4_vs_bf16_llama-1b": 2.4, "gemv_fraction_of_copy": 0.70,
           "int8_agreement_llama-1b": 0.95}
# (programs per SM, bytes of codes per load, warps) tried on llama-1b's whole step, the packaged
# default first. int8: twice the bytes per program with twice the warps (its 16 KiB tile takes 128
# registers a thread, so both keep 8-16 warps an SM). int4: its 16 KiB tile takes 170-220 registers
# (sm_90 build, woq_hopper.py), 2-3 programs an SM; 8 KiB tiles take ~96, 5 programs an SM, with the
# same rows per program or half of them.
DEFAULT = {"PROGRAMS_PER_SM": W.PROGRAMS_PER_SM, "TILE_BYTES": W.TILE_BYTES, "NUM_WARPS": W.NUM_WARPS}
SWEEP = {"int8": [DEFAULT, {"PROGRAMS_PER_SM": 2, "TILE_BYTES": 32768, "NUM_WARPS": 8}],
         "int4": [DEFAULT, {"PROGRAMS_PER_SM": 3, "TILE_BYTES": 8192, "NUM_WARPS": 4},
                  {"PROGRAMS_PER_SM": 6, "TILE_BYTES": 8192, "NUM_WARPS": 4}]}
# Seconds a phase of the Llama-3-8B shape needs on the H200 (compiles included), so that a run that
# has used its budget (spec["budget_s"]) skips what would not fit and says so, rather than overrun.
NEEDS_S = {"products": 10, "peers": 8, "quality": 12, "llama3-8b": 45}


class _Log:
    """One progress line per phase, with the seconds since the run began (the lead reads logs)."""

    def __init__(self):
        self.t0 = time.perf_counter()

    def __call__(self, text: str) -> None:
        print(f"[woq {self.elapsed():6.1f} s] {text}", flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def _fits(phase: str, spec: dict, summary: dict, log: _Log) -> bool:
    """Whether a phase fits in what is left of the run's budget; if not, the skip is recorded."""
    budget = spec.get("budget_s")
    need = NEEDS_S.get(phase.rsplit("/", 1)[-1], 0)
    if budget is None or log.elapsed() + need <= budget:
        return True
    summary.setdefault("skipped", {})[phase] = (f"time budget: {log.elapsed():.0f} s of {budget} s used, and this "
                                                f"phase needs about {need} s")
    log(f"{phase} skipped: {summary['skipped'][phase]}")
    return False


def _guard(summary: dict, phase: str, fn, log: _Log):
    """Run one phase; a failure is recorded (phase -> error) and the run goes on."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - one failed phase must not lose the others
        summary.setdefault("errors", {})[phase] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        log(f"{phase} FAILED: {summary['errors'][phase]}")
        traceback.print_exc(limit=4)
        return None


def model_config(name: str) -> llama.ModelConfig:
    """A course preset, or "llama3-8b" (parallel/measure.py's Llama 3.1 8B shape)."""
    from ..parallel.measure import model_config as config_of
    return config_of(name)


@bench.topic("woq", help="weight-only int8/int4 batch-1 decode vs bf16: tokens/s, bytes, peers, crossings, quality")
def run(params: dict) -> dict:
    size = params.get("size", "cpu")
    spec = {**SIZES[size], **{k: v for k, v in params.items() if k in SIZES["full"]}}
    if isinstance(spec["models"], str):
        spec["models"] = [m.strip() for m in spec["models"].split(",")]
    dev = params.get("device") or device_info.default_device()
    dtype = device_info.param_dtype(params)
    log, summary, results = _Log(), {"dtype": device_info.dtype_name(dtype)}, []
    log(f"start: {dev}, {summary['dtype']}, models {spec['models']}, int4 groups of {spec['group_size']}")
    ceilings = _guard(summary, "ceilings", lambda: _ceilings(spec, dev, dtype), log) or {}
    summary.update(ceilings)
    copy_gbs = ceilings.get("copy_gbs") or float("nan")
    log(f"ceilings: copy {copy_gbs:,.0f} GB/s, matmul {ceilings.get('matmul_tflops', float('nan')):,.1f} TFLOP/s")
    settings = {fmt: DEFAULT for fmt in W.FORMATS}
    for name in spec["models"]:
        if not _fits(name, spec, summary, log):
            continue
        _guard(summary, name, lambda: _one_model(name, spec, dev, dtype, copy_gbs, settings, summary, results, log),
               log)
        free()
    summary["crossing"] = _guard(summary, "crossing", lambda: crossing(results, ceilings, spec["group_size"]), log)
    summary.update(meets(summary, results))
    shape = next((s for s in summary["crossing"] or {} if s.endswith(" w13")), None)
    if shape is not None:
        summary["explain"]["crossing"] = explain_crossing(summary["crossing"][shape], shape, ceilings)
    log("done")
    return {"params": {**spec, "dtype": dtype, "device": dev}, "results": results, "summary": summary}


def _ceilings(spec: dict, dev: str, dtype: torch.dtype) -> dict:
    copy = copy_bandwidth(spec["copy_mib"] * 2**20, dev)
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
    mm = matmul_rate(spec["matmul_n"], name, dev)
    return {"copy_gbs": copy["gbs"], "matmul_tflops": mm["tflops"], "matmul_dtype": name, "matmul_n": spec["matmul_n"]}


def _one_model(name: str, spec: dict, dev: str, dtype, copy_gbs: float, settings: dict, summary: dict,
               results: list[dict], log: _Log) -> None:
    """Runners, products, peers and quality for one model, each guarded on its own; rows go into
    `results` as they are measured. `settings` are the sweep's choices (made on llama-1b)."""
    cfg = model_config(name)
    model = llama.Transformer.from_config(cfg, seed=0, dtype=dtype, device=dev)
    gs = spec["group_size"]
    log(f"{name}: built ({cfg.num_params() / 1e9:.2f} B parameters)")

    def runner(fmt: str):
        if fmt != "bf16" and spec["sweep"] and name == "llama-1b":
            settings[fmt], row, made, swept = sweep(model, fmt, spec, dev, copy_gbs, log)
            results.extend(swept)
        else:
            with constants(settings.get(fmt, DEFAULT), W):
                row, made = measure.runner_row(model, fmt, spec, dev, copy_gbs, gs)
        results.append({"kind": "runner", **row, **({"settings": settings[fmt]} if fmt in settings else {})})
        log(f"{name}: {fmt} runner {row['tokens_per_s']:,.0f} tokens/s ({row['fraction_of_copy']:.0%} of copy)")
        return made

    runners = {fmt: _guard(summary, f"{name}/{fmt} runner", lambda: runner(fmt), log) for fmt in ("bf16", *W.FORMATS)}
    runners = {fmt: r for fmt, r in runners.items() if r is not None}
    pdl = next(iter(runners.values())).decode.pdl if runners else False
    for fmt, made in runners.items():
        if not _fits(f"{name}/{fmt}/products", spec, summary, log):
            continue
        with constants(settings.get(fmt, DEFAULT), W):
            rows = _guard(summary, f"{name}/{fmt} products", lambda: measure.products(
                made.decode, fmt, copy_gbs, dev, spec["repeat"], pdl), log) or []
        results.extend({"kind": "product", **r} for r in rows)
    log(f"{name}: products at M = 1 timed")
    fits = _fits(f"{name}/peers", spec, summary, log)
    rows = fits and _guard(summary, f"{name}/peers", lambda: measure.peers(model, spec["peer_ms"], dev,
                                                                           spec["repeat"], gs), log) or []
    results.extend({"kind": "peer", **r} for r in rows)
    log(f"{name}: torch's peers at M = {spec['peer_ms']} timed")
    if "bf16" in runners and _fits(f"{name}/quality", spec, summary, log):
        _guard(summary, f"{name}/quality", lambda: _quality(name, model, runners, spec, dev, dtype, settings,
                                                           summary, log), log)


def _quality(name, model, runners, spec, dev, dtype, settings, summary, log) -> None:
    positions = spec["positions"] if name != "llama3-8b" else min(spec["positions"], POSITIONS_8B)
    cfg, ref = model.config, runners["bf16"].decode
    quality = summary.setdefault("quality", {}).setdefault(name, {})
    quality["bf16_triton_vs_eager"] = compare_steps(model.decode, ref, cfg, positions, dtype, dev)
    for fmt in W.FORMATS:
        if fmt in runners:
            with constants(settings.get(fmt, DEFAULT), W):
                quality[fmt] = compare_steps(ref, runners[fmt].decode, cfg, positions, dtype, dev)
    log(f"{name}: quality over {positions} positions: " +
        ", ".join(f"{k} {v['agreement']:.1%} (max |dlogit| {v['max_abs_dlogit']:.3g})" for k, v in quality.items()))


def sweep(model, fmt: str, spec: dict, dev: str, copy_gbs: float, log: _Log):
    """The whole step's time under each launch setting of SWEEP[fmt]: (best setting, its runner row,
    its runner, every setting's row)."""
    best, swept = None, []
    for setting in SWEEP[fmt]:
        try:
            with constants(setting, W):
                row, runner = measure.runner_row(model, fmt, spec, dev, copy_gbs, spec["group_size"])
        except Exception as err:  # noqa: BLE001 - a setting that fails to compile or run is recorded
            swept.append({"kind": "sweep", "model": model.config.name, "format": fmt, "settings": setting,
                          "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"})
            continue
        swept.append({"kind": "sweep", **row, "settings": setting})
        log(f"  sweep {fmt} {setting}: {row['tokens_per_s']:,.0f} tokens/s")
        if best is None or row["tokens_per_s"] > best[1]["tokens_per_s"]:
            best = (setting, row, runner)
        del runner
    if best is None:
        raise RuntimeError(f"no launch setting of the {fmt} step ran: {[s.get('error') for s in swept]}")
    return (*best, swept)


def crossing(results: list[dict], ceilings: dict, group_size: int) -> dict:
    """For each product shape the peers ran: the roofline's crossings from this run's ceilings, and
    where each measured peer stopped being faster than bf16."""
    peer = [r for r in results if r.get("kind") == "peer"]
    out = {}
    for shape in dict.fromkeys(r["shape"] for r in peer):
        n, k = next((r["n"], r["k"]) for r in peer if r["shape"] == shape)
        predicted = R.crossings(n, k, ceilings["copy_gbs"], ceilings["matmul_tflops"], group_size)
        out[shape] = {"n": n, "k": k, "predicted": predicted,
                      "measured": {fmt: R.measured_stop(peer, fmt, shape) for fmt in ("int8", "int4")}}
    return out


def live_record(n: int, k: int, ms: list[int], device: str | None = None, group_size: int = 128,
                repeat: int = 5, copy_mib: int = 64, matmul_n: int = 512) -> dict:
    """A small record of this machine for the lesson's widget where no bench woq record of it exists:
    its ceilings (as notebook 00 measures them) and one random n x k weight through torch's peers at
    each M, with its crossings. Seconds on a CPU."""
    dev = device or device_info.default_device()
    dtype = device_info.compute_dtype() if dev == "cuda" else torch.float32
    ceilings = _ceilings({"copy_mib": copy_mib, "matmul_n": matmul_n}, dev, dtype)
    w = (torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.02).to(dev)
    results = [{"kind": "peer", **r} for r in measure.peers_for({f"{n}x{k} weight": w}, ms, dev, repeat, group_size)]
    summary = {**ceilings, "crossing": crossing(results, ceilings, group_size)}
    return {"topic": "woq", "environment": bench.environment(), "params": {"group_size": group_size, "device": dev},
            "results": results, "summary": summary}


def _ratio(summary_rows: dict, model: str, fmt: str) -> float | None:
    a, b = summary_rows.get((model, "bf16")), summary_rows.get((model, fmt))
    return b["tokens_per_s"] / a["tokens_per_s"] if a and b else None


def meets(summary: dict, results: list[dict]) -> dict:
    """The headline figures, the targets, whether this record meets them, and the words."""
    runners = {(r["model"], r["format"]): r for r in results if r.get("kind") == "runner"}
    out: dict = {}
    for model in dict.fromkeys(m for m, _ in runners):
        for fmt in W.FORMATS:
            out[f"{fmt}_vs_bf16_{model}"] = _ratio(runners, model, fmt)
        for fmt in ("bf16", *W.FORMATS):
            if (model, fmt) in runners:
                out[f"tokens_per_s_{fmt}_{model}"] = runners[(model, fmt)]["tokens_per_s"]
                out[f"fraction_of_copy_{fmt}_{model}"] = runners[(model, fmt)]["fraction_of_copy"]
    products = [r for r in results if r.get("kind") == "product" and r.get("median_s")]
    for fmt in ("bf16", *W.FORMATS):
        mine = [r for r in products if r["format"] == fmt and r["model"] == "llama-1b"] or \
            [r for r in products if r["format"] == fmt]
        if mine and summary.get("copy_gbs"):
            # the products of one layer and the head, back to back: their bytes over their time
            nbytes, secs = sum(r["weight_bytes"] for r in mine), sum(r["median_s"] for r in mine)
            out[f"gemv_fraction_of_copy_{fmt}"] = nbytes / secs / 1e9 / summary["copy_gbs"]
    for model, q in (summary.get("quality") or {}).items():
        for fmt in W.FORMATS:
            if fmt in q:
                out[f"{fmt}_agreement_{model}"] = q[fmt]["agreement"]
    gemv = [out.get(f"gemv_fraction_of_copy_{f}") for f in W.FORMATS]
    out["targets"] = TARGETS
    out["meets"] = {
        **{k: (out.get(k) is not None and out[k] >= v) for k, v in TARGETS.items() if k != "gemv_fraction_of_copy"},
        "gemv_fraction_of_copy": all(g is not None and g >= TARGETS["gemv_fraction_of_copy"] for g in gemv)}
    out["explain"] = {"decode": explain_decode(results), "gemv": explain_gemv(results, summary.get("copy_gbs")),
                      "error": explain_error(summary.get("quality") or {}, reference=dtype_label(summary.get("dtype")))}
    return out

"""A decode step's time under tensor parallelism, fitted on the 1- and 2-GPU records (notebook 09,
§8 and its TP widget).

One batch-1 decode step on each of tp GPUs costs

    reads / (tp * hbm)              the weights (and KV cache) this GPU reads, at its bandwidth
  + layers * per_layer              fixed costs TP does not divide: the dozens of small kernels of
                                    a layer, each with its own latency (measured inside a CUDA graph)
  + (2 * layers + 1) * collective   two all-reduces per layer (after attention, after the MLP) and
                                    one all-gather of the logits' vocabulary slices

and a collective of N bytes over n GPUs costs, for the two algorithms the course runs:

- **ring** (NCCL's): base + 2(n-1) hop + 2(n-1)/n N / busbw. NCCL's own tuning model has this
  form (src/graph/tuning.cc: latency = base + steps x per-hop latency); the hop latency on NVLink
  is small (its table gives well under a microsecond for the LL protocol), so going from 2 to 8
  GPUs adds 12 hops, not 6x the whole call.
- **one-shot** (oneshot.py, symmetric memory): base + (n-1) N / busbw: one kernel reads every
  peer's buffer after one barrier, so its latency does not grow with the ring's steps.

What the old model got wrong: it fitted alpha on the 2-GPU bus-bandwidth sweep (eager calls timed
from the host, whose ~40 us per call is mostly the host launching NCCL) and extrapolated
2(n-1) alpha, multiplying that launch cost by 7 at n = 8. Inside a captured decode step the launch
is gone: the records show a few microseconds per all-reduce (`fit_costs`).

`fit_costs` takes the fixed parts from the records (two model sizes at TP=1 give the weight-read
bandwidth and the per-layer cost; TP=2 gives each algorithm's base latency); the hop latency and the
bus bandwidth are the only assumptions, and the widget lets the learner move them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from ..dtypes.memory import ModelShape

ALGORITHMS = ("ring", "one_shot")
# Memory the reference H200 exposes to PyTorch, in GiB (torch.cuda.get_device_properties(0)
# .total_memory / 2**30 as device.describe() printed it in data/reference/h200*/notebooks;
# tests/test_tp_model.py checks it against those executed notebooks).
H200_GIB = 139.8


@dataclass(frozen=True)
class DecodeCosts:
    """The parameters of the decode-step model (seconds, bytes per second)."""

    hbm_Bps: float              # effective bandwidth of the weight reads
    per_layer_s: float          # fixed cost of one layer's kernels, not divided by TP
    ring_base_s: float | None   # fixed latency of one ring collective (inside a CUDA graph); None: not measured
    one_shot_base_s: float | None   # fixed latency of one one-shot all-reduce; None: not measured
    hop_s: float = 0.6e-6       # latency of one ring step over NVLink (an assumption; see above)
    busbw_Bps: float = 300e9    # bus bandwidth for the bandwidth terms
    source: str = "defaults"

    def __post_init__(self) -> None:
        for name in ("hbm_Bps", "busbw_Bps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r}; it must be > 0")
        for name in ("per_layer_s", "ring_base_s", "one_shot_base_s", "hop_s"):
            value = getattr(self, name)
            if value is None and name in ("ring_base_s", "one_shot_base_s"):
                continue            # an algorithm the record never timed in this step
            if not value >= 0:
                raise ValueError(f"{name}={value!r}; it must be >= 0")


def collective_s(nbytes: float, n: int, algo: str, costs: DecodeCosts) -> float:
    """Seconds of one all-reduce of `nbytes` over n GPUs (0 for n = 1)."""
    if algo not in ALGORITHMS:
        raise ValueError(f"algo={algo!r}; choose one of {ALGORITHMS}")
    if n < 1 or nbytes < 0:
        raise ValueError(f"need n >= 1 and nbytes >= 0; got n={n}, nbytes={nbytes}")
    if n == 1:
        return 0.0
    if (costs.ring_base_s if algo == "ring" else costs.one_shot_base_s) is None:
        raise ValueError(f"these costs ({costs.source}) have no base latency for {algo!r}: the record never "
                         "timed that all-reduce in the step they were fitted on")
    if algo == "ring":
        return costs.ring_base_s + 2 * (n - 1) * costs.hop_s + 2 * (n - 1) / n * nbytes / costs.busbw_Bps
    return costs.one_shot_base_s + (n - 1) * nbytes / costs.busbw_Bps


def step_s(read_bytes: float, hidden: int, layers: int, tp: int, costs: DecodeCosts,
           algo: str = "ring", batch: int = 1, act_bytes: int = 2) -> dict[str, float]:
    """One decode step's time and its parts: {"reads_s", "fixed_s", "comm_s", "total_s"}.

    read_bytes: what the whole model reads per step (weights, plus KV cache if wanted), before
    sharding; each GPU reads 1/tp of it.
    """
    if tp < 1 or layers < 1 or batch < 1 or hidden < 1:
        raise ValueError(f"need tp, layers, batch, hidden >= 1; got tp={tp}, layers={layers}, "
                         f"batch={batch}, hidden={hidden}")
    reads = read_bytes / tp / costs.hbm_Bps
    fixed = layers * costs.per_layer_s
    comm = (2 * layers + 1) * collective_s(batch * hidden * act_bytes, tp, algo, costs)
    return {"reads_s": reads, "fixed_s": fixed, "comm_s": comm, "total_s": reads + fixed + comm}


def read_bytes_of(shape: ModelShape, bytes_per_param: float = 2.0) -> float:
    """Weight bytes one decode step reads: every weight but the input embedding table (a lookup
    reads one row), which tied embeddings read once as the output layer."""
    untied_embedding = 0 if shape.tied_embeddings else shape.vocab * shape.hidden
    return (shape.n_params() - untied_embedding) * bytes_per_param


def shape_of_config(cfg: Any) -> ModelShape:
    """A course-model config (models.llama.ModelConfig) as a memory.ModelShape."""
    return ModelShape(cfg.name, cfg.n_layers, cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim,
                      cfg.vocab_size, tied_embeddings=cfg.tie_embeddings)


def _decode_rows(record: Mapping[str, Any]) -> dict[tuple[str, int], Mapping[str, Any]]:
    return {(r["model"], r["tp"]): r for r in record.get("results", []) if r.get("name") == "decode"}


# Which time of a decode row the model reads, per step kind: at TP=1 the step itself; at TP=2 the
# step with an all-reduce kernel after each row-parallel product (the row's own algorithm, its
# "all_reduce" field) and, where recorded, the same step with NCCL's ring. The Triton step at TP=2
# also ran with the sums folded into the products ("triton_graph"), which has no all-reduce for the
# model's collective term, so that time is not used.
STEP_KEYS: dict[str, tuple[str, str, str | None]] = {
    # mode: (TP=1 key, TP=2 key with the row's all-reduce, TP=2 key with NCCL's ring)
    "cuda_graph": ("cuda_graph", "cuda_graph", "cuda_graph_nccl"),
    "triton_graph": ("triton_graph", "triton_graph_all_reduce", None),
}


def _tp2_times(row: Mapping[str, Any], mode: str) -> dict[str, float | None]:
    """{"ring": s or None, "one_shot": s or None} of a TP=2 row in `mode`."""
    _, own, ring_key = STEP_KEYS[mode]
    by = row["s_per_token_by_mode"]
    algo = "one_shot" if row.get("all_reduce") == "one_shot" else "ring"
    out: dict[str, float | None] = {"ring": None, "one_shot": None}
    out[algo] = by.get(own)
    if ring_key and ring_key in by:
        out["ring"] = by[ring_key]
    return out


def fit_costs(record: Mapping[str, Any], shapes: Mapping[str, ModelShape],
              mode: str = "cuda_graph", hop_s: float = 0.6e-6, busbw_Bps: float = 300e9,
              models: tuple[str, str] | None = None, base_models: tuple[str, ...] | None = None) -> DecodeCosts:
    """Fit hbm_Bps and per_layer_s on two models at TP=1 (two equations, two unknowns: solved
    exactly), then each algorithm's base latency at TP=2, averaged over `base_models` (default: both
    models; one model alone for a held-out check), from one `course-kit bench parallel` record.

    `mode` is the step timed (STEP_KEYS): "cuda_graph" (eager kernels captured in a graph) or
    "triton_graph" (notebook 05's Triton step). An algorithm the record never timed in that mode at
    TP=2 keeps a base of None (the Triton step has no NCCL-ring time).
    """
    if mode not in STEP_KEYS:
        raise ValueError(f"mode={mode!r}; choose one of {list(STEP_KEYS)}")
    rows = _decode_rows(record)
    tp1 = STEP_KEYS[mode][0]
    names = list(models or sorted({m for m, t in rows if t == 1 and (m, 2) in rows and m in shapes
                                   and tp1 in rows[(m, 1)]["s_per_token_by_mode"]}))
    if len(names) < 2:
        raise ValueError(f"fitting needs two models at TP=1 and TP=2 with known shapes; found {names}")
    a, b = names[:2]
    ra, rb = read_bytes_of(shapes[a]), read_bytes_of(shapes[b])
    la, lb = shapes[a].layers, shapes[b].layers
    ta, tb = (rows[(x, 1)]["s_per_token_by_mode"][tp1] for x in (a, b))
    det = ra * lb - rb * la
    if det == 0:
        raise ValueError(f"models {a} and {b} have proportional reads and layers: cannot separate them")
    inv_bw = (ta * lb - tb * la) / det              # 2x2 solve of t = R / B + L c
    per_layer = (ta - ra * inv_bw) / la
    if not (inv_bw > 0 and per_layer >= 0):
        raise ValueError(f"the TP=1 times of {a} and {b} give no positive bandwidth and cost")
    partial = DecodeCosts(1.0 / inv_bw, per_layer, 0.0, 0.0, hop_s, busbw_Bps, "fit")
    bases: dict[str, list[float]] = {"ring": [], "one_shot": []}
    for x in base_models or (a, b):
        sh = shapes[x]
        base = step_s(read_bytes_of(sh), sh.hidden, sh.layers, 2, partial, "ring")
        for algo, total in _tp2_times(rows[(x, 2)], mode).items():
            if total is None:
                continue
            # base + the hops and bytes of n = 2 that collective_s adds on top of its base
            extra = collective_s(sh.hidden * 2, 2, algo, partial)
            bases[algo].append((total - base["total_s"]) / (2 * sh.layers + 1) - extra)
    if not bases["ring"] and not bases["one_shot"]:
        raise ValueError(f"the record has no TP=2 time of the {mode} step with an all-reduce")
    fitted = {k: max(0.0, sum(v) / len(v)) if v else None for k, v in bases.items()}
    on = "+".join(base_models or (a, b))
    return replace(partial, ring_base_s=fitted["ring"], one_shot_base_s=fitted["one_shot"],
                   source=f"{mode}: TP=1 of {a} and {b}, TP=2 bases from {on}")


def predict_record(record: Mapping[str, Any], shapes: Mapping[str, ModelShape], costs: DecodeCosts,
                   mode: str = "cuda_graph", models: tuple[str, ...] | None = None) -> list[dict]:
    """Model against record: one row per decode time of `record` in `mode` that the model can
    predict (model, tp, algo, measured, model, error); `models` keeps only those models' rows."""
    out = []
    for (name, tp), row in sorted(_decode_rows(record).items()):
        if name not in shapes or (models and name not in models):
            continue
        sh = shapes[name]
        if tp == 1:
            pairs = [("-", row["s_per_token_by_mode"].get(STEP_KEYS[mode][0]))]
        else:
            pairs = list(_tp2_times(row, mode).items())
        for algo, meas in pairs:
            if meas is None or (algo != "-" and _base(costs, algo) is None):
                continue
            pred = step_s(read_bytes_of(sh), sh.hidden, sh.layers, tp, costs,
                          "ring" if algo == "-" else algo)["total_s"]
            out.append({"model": name, "tp": tp, "algo": algo, "measured_s": meas, "model_s": pred,
                        "error": pred / meas - 1})
    return out


def held_out(record: Mapping[str, Any], shapes: Mapping[str, ModelShape], mode: str = "cuda_graph") -> list[dict]:
    """Each model's TP=2 times predicted by a model whose TP=2 bases were fitted on the other model
    alone: points the fit did not see (the TP=1 times are needed by every fit, so none is held out)."""
    names = sorted({m for m, t in _decode_rows(record) if t == 2 and m in shapes})
    out = []
    for target in names:
        for other in (n for n in names if n != target):
            costs = fit_costs(record, shapes, mode, base_models=(other,))
            for r in predict_record(record, shapes, costs, mode, models=(target,)):
                if r["tp"] > 1:
                    out.append({**r, "fitted_on": other})
    return out


def _base(costs: DecodeCosts, algo: str) -> float | None:
    return costs.ring_base_s if algo == "ring" else costs.one_shot_base_s


def explain_fit(rows: list[dict], held: list[dict] | None = None) -> str:
    """What the fit shows: the TP=1 times are solved exactly (they test nothing), the TP=2 times
    it was fitted on in sample, and, where given, TP=2 times of a model held out of the fit."""
    if not rows:
        raise ValueError("no rows to compare")
    def worst(rs: list[dict]) -> str:
        w = max(rs, key=lambda r: abs(r["error"]))
        return (f"**{abs(w['error']):.1%}** ({w['model']}, TP={w['tp']}"
                f"{', ' + w['algo'] if w['algo'] != '-' else ''})")
    tp1 = [r for r in rows if r["tp"] == 1]
    tp2 = [r for r in rows if r["tp"] > 1]
    text = (f"The {len(tp1)} TP=1 times fix the read bandwidth and the per-layer cost exactly (two equations, "
            f"two unknowns), so they test nothing.")
    if tp2:
        text += (f" The {len(tp2)} TP=2 times it was fitted on (one base latency per all-reduce, averaged over "
                 f"the models) it reproduces within {worst(tp2)}: in sample.")
    if held:
        others = sorted({r["fitted_on"] for r in held})
        each = "each way" if len(others) > 1 else f"from {others[0]}"
        text += (f" Held out: fitted on one model's TP=2 times alone and predicting the other's ({each}), the "
                 f"model lands within {worst(held)} on {len(held)} times it never saw.")
    return text + " No record has 4 or 8 GPUs: the model's figures there are extrapolations."


def explain_mode_choice(record: Mapping[str, Any]) -> str:
    """Why the widget's model is fitted on the CUDA-graph step and not on the Triton step the
    record headlines: which step was timed at TP=2 with which all-reduce, read from the record."""
    rows = [r for r in record.get("results", []) if r.get("name") == "decode" and r.get("tp") == 2]
    both = [r["model"] for r in rows if all(v is not None for v in _tp2_times(r, "cuda_graph").values())]
    triton = [r for r in rows if "triton_graph" in r.get("s_per_token_by_mode", {})]
    if not triton:
        return "This record has no Triton step, so the model is fitted on the CUDA-graph step."
    ring_in_triton = any(_tp2_times(r, "triton_graph")["ring"] is not None for r in triton)
    head = ", ".join(f"{r['model']} {r['s_per_token_by_mode']['triton_graph'] * 1e3:.3f} ms" for r in triton)
    if both and not ring_in_triton:
        return (f"The widget's model is fitted on the CUDA-graph step, not on the faster Triton step that the "
                f"record headlines (TP=2: {head} per token), because only the CUDA-graph step was timed at TP=2 "
                f"with both NCCL's ring and the one-shot all-reduce ({', '.join(both)}), and the widget compares "
                f"the two. The Triton step was timed with a one-shot all-reduce after each product, and with "
                f"the sums folded into the products, which leaves no all-reduce to model; its own fit "
                f"(one-shot only) is below.")
    return (f"The Triton step (TP=2: {head} per token) was timed with NCCL's ring too, so the model can be "
            f"fitted on it; the widget uses the CUDA-graph fit, which has both algorithms.")


def tradeoff(model: str, costs: DecodeCosts, seq: int = 8192, batch: int = 1,
             weights_dtype: str = "bf16", algo: str = "ring",
             tps: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, dict]:
    """{"memory": {"TP=t": bytes per GPU by part}, "time": {"TP=t": step_s parts}} for a preset of
    course_kit.dtypes.memory: what the TP widget draws. Each GPU reads its weights and KV cache per step."""
    from ..dtypes.memory import PRESETS, bytes_per_param, per_gpu_bytes
    if model not in PRESETS:
        raise ValueError(f"unknown model {model!r}; choose one of {list(PRESETS)}")
    shape = PRESETS[model]
    memory = {f"TP={t}": per_gpu_bytes(model, t, weights_dtype=weights_dtype, seq=seq, batch=batch)
              for t in tps}
    weights = read_bytes_of(shape, bytes_per_param(weights_dtype))
    time = {}
    for t in tps:
        kv = memory[f"TP={t}"].get("KV cache", 0.0) * t      # whole-model KV bytes (replicas count)
        time[f"TP={t}"] = step_s(weights + kv, shape.hidden, shape.layers, t, costs, algo, batch)
    return {"memory": memory, "time": time}


def explain_tradeoff(result: Mapping[str, Mapping], capacity_bytes: float, batch: int = 1) -> list[str]:
    """One line per TP degree: memory per GPU (GiB, fits or not) and modelled tokens/s against TP=1."""
    from ..narrate import fits, gib, speed
    labels = list(result["memory"])
    base = result["time"][labels[0]]["total_s"]
    out = []
    for k in labels:
        need = sum(result["memory"][k].values())
        step = result["time"][k]["total_s"]
        line = (f"{k}: {gib(need):,.1f} GiB per GPU, {fits(need, capacity_bytes)}; about "
                f"{batch / step:,.0f} tokens/s (model)")
        if k != labels[0]:
            line += f", {speed(step, base)} {labels[0]}"
        out.append(line + f"; collectives {result['time'][k]['comm_s'] / step:.0%} of the step")
    return out


def explain_speedups(record: Mapping[str, Any]) -> str:
    """The 2-GPU record against one GPU: the TP MLP, TP decode (same mode at both sizes), and the
    captured step with NCCL's all-reduce against the one-shot one; wording from the ratios."""
    from ..narrate import ratio_words, speed
    s = record["summary"]
    if "mlp_speedup_tp2" not in s:
        raise ValueError("the record has no TP=2 figures")
    env = record.get("environment", {})
    where = f"{env.get('gpu') or 'this machine'} x{env.get('gpu_count', 2)}"
    out = [f"On {where}: the TP=2 MLP runs **{ratio_words(s['mlp_speedup_tp2'])}** one GPU."]
    for r in record["results"]:
        if r.get("name") != "decode" or r.get("tp") != 2 or "speedup" not in r:
            continue
        line = (f"TP=2 decode of the {r['model']} shape ({r['speedup_mode'].replace('_', ' ')}) runs "
                f"**{ratio_words(r['speedup'])}** one GPU; the sharded model's own step gives float32 greedy "
                f"tokens that {'equal' if r.get('fp32_tokens_identical') else 'differ from'} one GPU's.")
        if "fp32_triton_tokens_identical" in r:
            line += (f" With notebook 05's Triton kernels on each GPU's shard, the float32 greedy tokens "
                     f"{'equal' if r['fp32_triton_tokens_identical'] else 'differ from'} one GPU's eager step's.")
        by = r.get("s_per_token_by_mode", {})
        if "cuda_graph_nccl" in by and "cuda_graph" in by and r.get("all_reduce") == "one_shot":
            line += (f" Captured in a CUDA graph, the step with the one-shot all-reduce runs "
                     f"{speed(by['cuda_graph'], by['cuda_graph_nccl'])} the same step with NCCL's "
                     f"({by['cuda_graph'] * 1e3:.3f} against {by['cuda_graph_nccl'] * 1e3:.3f} ms per token).")
        if r.get("triton_exchange") == "folded" and "triton_graph_all_reduce" in by and "triton_graph" in by:
            line += (f" With the Triton kernels, the sums folded into the products (no all-reduce kernel) run "
                     f"{speed(by['triton_graph'], by['triton_graph_all_reduce'])} the same kernels with "
                     f"{'a one-shot' if r.get('all_reduce') == 'one_shot' else 'an NCCL'} all-reduce after each "
                     f"row-parallel product ({by['triton_graph'] * 1e3:.3f} against "
                     f"{by['triton_graph_all_reduce'] * 1e3:.3f} ms per token).")
        out.append(line)
    return " ".join(out)

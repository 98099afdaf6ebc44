"""`course-kit bench speculative`: speculative decoding at batch 1 on the course's own trained pair.

In one run, on the shipped target and draft (data/models, trained by
`python -m course_kit.capstone.speculative.train_pair`), greedy, prompts from the held-out slice:
1. correctness first: in fp32, the speculative decoder's tokens (the round in a CUDA graph, the
   model's own layers: fp32 Triton kernels would only add compile time; the GPU tests check those)
   against the target's own greedy loop; then, for every timed run, its tokens against the target
   alone's in the bench's dtype and kernels (`agreement_with_target_alone`);
2. the target alone: notebook 05's fastest runner (`DecodeGraphRunner(kernels="triton")`) and the
   decoder with k = 0 (the same rounds, no draft); the faster is the baseline;
3. speculation for k = 1..8: tokens/s, the acceptance rate per draft position, alpha, tokens per
   round (the round graph-captured; Triton kernels, k = 8 verifying 9 tokens with the model's own
   layers, since the Triton step takes at most 8); with the trained draft (timed like the target
   alone, on every prompt), and, once each on half the prompts, with an untrained draft of the same
   shape (alpha near 0) and with the target as its own draft (alpha 1, c 1): the widget's other two
   drafts;
4. the cost of one target step over M = 1..8 tokens and of one draft step (each in its own graph):
   the cost ratio c, and Leviathan et al.'s predicted speed-up from alpha and c beside the measured;
5. HF transformers on the same two checkpoints (`model_to_hf`): `generate` alone, and assisted
   generation (`assistant_model`) with HF's default schedule and with the best k held constant.
Targets (record only): the best k at >= 1.8x the target alone, and ahead of HF's assisted generation.
"""
from __future__ import annotations

import time

import torch

from .. import bench
from .. import device as device_info
from ..device import default_device
from ..capstone.speculative import measure as M
from ..capstone.speculative import pair as P
from ..capstone.speculative import rules

SIZES = {
    "smoke": dict(prompts=1, prompt_len=16, new_tokens=12, ks=[1, 2], repeat=1, hf=False, max_seq=96,
                  rows=[1, 2], check_tokens=8, step_repeat=3, hf_prompts=1, hf_tokens=8, hf_repeat=1),
    "cpu": dict(prompts=2, prompt_len=32, new_tokens=24, ks=[1, 2, 3, 4], repeat=1, hf=True, max_seq=128,
                rows=[1, 2, 4], check_tokens=16, step_repeat=5, hf_prompts=1, hf_tokens=16, hf_repeat=1),
    "small_gpu": dict(prompts=8, prompt_len=64, new_tokens=160, ks=list(range(1, 9)), repeat=3, hf=True,
                      max_seq=512, rows=list(range(1, 9)), check_tokens=64, step_repeat=100, hf_prompts=2,
                      hf_tokens=64, hf_repeat=2),
    "full": dict(prompts=8, prompt_len=64, new_tokens=160, ks=list(range(1, 9)), repeat=3, hf=True,
                 max_seq=512, rows=list(range(1, 9)), check_tokens=64, step_repeat=100, hf_prompts=2,
                 hf_tokens=64, hf_repeat=2),
}
TARGETS = {"speedup_vs_target": 1.8, "vs_hf_assisted": 1.0}


def _kernels(kind: str, k: int):
    """The decoder's kernels: Triton where they run (a verify of k + 1 > 8 tokens with the model's own
    layers), else the model's own layers throughout."""
    if kind != "triton":
        return "torch"
    return ("triton", "triton" if k + 1 <= 8 else "torch")


def _pick_kernels(target, gpu: bool, summary: dict) -> str:
    """Triton on a GPU when its rows step gives the model's own logits (within bf16 rounding) on three
    tokens after a prompt; else the model's own layers, with the reason recorded."""
    if not gpu:
        return "torch"
    try:
        from ..models import llama
        from ..capstone.speculative.steps import rows_step
        cfg, w = target.config, target.tok_embeddings.weight
        caches = [llama.StaticKVCache(cfg, 1, 64, w.dtype, w.device) for _ in range(2)]
        prompt = torch.arange(1, 9, device=w.device)[None]
        tokens, positions = torch.tensor([3, 4, 5], device=w.device), torch.arange(8, 11, device=w.device)
        with torch.no_grad():
            got = []
            for cache, kind in zip(caches, ("torch", "triton")):
                target.prefill(prompt, cache)
                got.append(rows_step(target, kind)(tokens, positions, cache).float())
        err = float((got[0] - got[1]).abs().max() / got[0].abs().max())
        summary["triton_rows_rel_err"] = err
        if not err < 0.05:
            raise AssertionError(f"the Triton rows step's logits differ from the model's by {err:.3g} (relative)")
        return "triton"
    except Exception as err:  # noqa: BLE001 - record why, and time the model's own layers instead
        summary["triton_unavailable"] = repr(err)[:500]
        print(f"  Triton rows step unavailable, timing the model's own layers: {err!r}", flush=True)
        return "torch"


def _log(msg: str, t0: float) -> None:
    print(f"[speculative {time.perf_counter() - t0:5.1f} s] {msg}", flush=True)


def _guarded(summary: dict, key: str, fn):
    """Run one phase; an error is recorded under summary['errors'][key] and the bench goes on."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - one failed phase must not lose the others
        summary.setdefault("errors", {})[key] = repr(err)[:500]
        print(f"  {key} failed: {err!r}", flush=True)
        return None


def _correctness(spec: dict, device: str, gpu: bool, prompts: list) -> dict:
    """fp32: the graph-captured speculative tokens against the target's own greedy loop."""
    from ..models import llama
    target, draft = P.load_pair(torch.float32, device)
    out = {}
    for k in (min(4, max(spec["ks"])), max(spec["ks"])):
        got = M.speculative_run(target, draft, k, prompts[:2], spec["check_tokens"], repeat=1,
                                max_seq=spec["max_seq"], kernels="torch")["outputs"]
        want = [llama.generate(target, [p], spec["check_tokens"])[0] for p in prompts[:2]]
        out[f"k{k}"] = got == want
    return out


def _target_alone(target, prompts, spec, device, kind, summary) -> dict:
    """Notebook 05's runner (Triton step in a graph where it runs) and the decoder's rounds with k = 0."""
    from ..cuda_graphs.runner import DecodeGraphRunner

    def runner_speed():
        runner = DecodeGraphRunner(target, 1, spec["max_seq"], sizes=[1], verbose=False, kernels=kind)
        return M.decode_speed(lambda p, n: runner.generate([p], n)[0], prompts, spec["new_tokens"], spec["repeat"],
                              device)
    rows = {"runner": _guarded(summary, "target_runner", runner_speed),
            "rounds_k0": _guarded(summary, "target_rounds_k0", lambda: M.speculative_run(
                target, None, 0, prompts, spec["new_tokens"], repeat=spec["repeat"], max_seq=spec["max_seq"],
                kernels=_kernels(kind, 0)))}
    rows = {k: v for k, v in rows.items() if v is not None}
    if not rows:
        raise RuntimeError(f"the target alone could not be timed: {summary.get('errors')}")
    return rows


def _hf(target, draft, prompts, spec, best_k, summary) -> list[dict]:
    """HF's peers on the first hf_prompts prompts, hf_tokens new tokens (HF's eager steps are slow:
    fewer tokens keep the bench in its time budget; the speed is per token either way)."""
    from ..models.hf import model_to_hf
    hf_t, hf_d = model_to_hf(target), model_to_hf(draft)
    n, prompts = spec["hf_tokens"], prompts[:spec["hf_prompts"]]
    rows = []
    for name, kw in (("hf_generate", {}), ("hf_assisted_default", {"assistant": hf_d}),
                     (f"hf_assisted_k{best_k}", {"assistant": hf_d, "num_assistant_tokens": best_k})):
        r = _guarded(summary, name, lambda kw=kw: M.hf_speed(hf_t, prompts, n, repeat=spec["hf_repeat"], **kw))
        if r is not None:
            rows.append({"name": name, "tokens_per_s": r["tokens_per_s"], "ms_per_token": r["ms_per_token"],
                         "outputs": r["outputs"]})
    return rows


def _hf_summary(hf_rows: list[dict], best: dict, base_out: list, n: int) -> dict:
    out: dict = {}
    plain = next((r for r in hf_rows if r["name"] == "hf_generate"), None)
    assisted = [r for r in hf_rows if r["name"].startswith("hf_assisted")]
    if plain:
        out["hf_generate_tokens_per_s"] = plain["tokens_per_s"]
        out["hf_outputs_agreement_with_target"] = sum(
            a == b for x, y in zip(plain["outputs"], base_out) for a, b in zip(x, y[:n])) / (n * len(plain["outputs"]))
    if assisted:
        top = max(assisted, key=lambda r: r["tokens_per_s"])
        out.update(hf_assisted_variant=top["name"], hf_assisted_tokens_per_s=top["tokens_per_s"],
                   vs_hf_assisted=best["tokens_per_s"] / top["tokens_per_s"],
                   hf_assisted_matches_hf_generate=all(r["outputs"] == plain["outputs"] for r in assisted)
                   if plain else None)
    return out


def _spec_row(target, draft, k, prompts, spec, repeat, kind, base, base_out, c) -> dict:
    r = M.speculative_run(target, draft, k, prompts, spec["new_tokens"], repeat=repeat, max_seq=spec["max_seq"],
                          kernels=_kernels(kind, k))
    agree = sum(a == b for x, y in zip(r["outputs"], base_out) for a, b in zip(x, y)) / sum(map(len, base_out))
    return {"variant": "speculative", "k": k, "tokens_per_s": r["tokens_per_s"], "ms_per_token": r["ms_per_token"],
            "speedup": r["tokens_per_s"] / base, "alpha": r["alpha"],
            "acceptance_per_position": r["acceptance_per_position"], "tokens_per_round": r["tokens_per_round"],
            "rounds": r["rounds"],
            "predicted_speedup": rules.predicted_speedup(r["alpha"], k, c) if c is not None else None,
            "agreement_with_target_alone": agree, "kernels": r["kernels"], "graphs": r["graphs"]}


@bench.topic("speculative", help="speculative decoding at batch 1 on the course's trained pair vs the target alone and HF")
def run(params: dict) -> dict:
    size = params.get("size", "cpu")
    spec = {**SIZES[size], **{k: v for k, v in params.items() if k in SIZES["full"]}}
    device = params.get("device") or default_device()
    gpu = device == "cuda"
    dtype = device_info.param_dtype(params)
    if not P.available():
        raise FileNotFoundError(f"no trained pair under {P.models_dir()}: run "
                                "`python -m course_kit.capstone.speculative.train_pair` first")
    t0 = time.perf_counter()
    summary: dict = {"dtype": str(dtype).replace("torch.", ""), "pair": P.record().get("models", {})}
    summary["pair"] = {r: {k: v for k, v in m.items() if k != "losses"} for r, m in summary["pair"].items()}
    prompts = M.prompts(spec["prompts"], spec["prompt_len"])
    results: list[dict] = []

    _log("correctness (fp32)", t0)
    summary["greedy_identical_fp32"] = _guarded(summary, "correctness", lambda: _correctness(spec, device, gpu, prompts))
    target, draft = P.load_pair(dtype, device)

    kind = _pick_kernels(target, gpu, summary)
    summary["kernels"] = kind
    _log(f"the target alone ({kind} kernels)", t0)
    alone = _target_alone(target, prompts, spec, device, kind, summary)
    for name, r in alone.items():
        results.append({"name": f"target/{name}", "variant": name, "k": 0, "tokens_per_s": r["tokens_per_s"],
                        "ms_per_token": r["ms_per_token"]})
    base_name = max(alone, key=lambda n: alone[n]["tokens_per_s"])
    base, base_out = alone[base_name]["tokens_per_s"], alone[base_name]["outputs"]
    summary.update(target_alone_variant=base_name, target_alone_tokens_per_s=base)

    _log("step costs", t0)
    costs = _guarded(summary, "step_costs", lambda: M.step_costs(
        target, draft, rows=spec["rows"], kernels=kind, max_seq=spec["max_seq"],
        repeat=spec["step_repeat"]))
    summary["step_costs"] = costs
    c = costs["c"] if costs else None

    def sweep(name, model, repeat, n_prompts):
        for k in spec["ks"]:
            _log(f"speculation, {name} draft, k = {k}", t0)
            row = _guarded(summary, f"{name}/k{k}", lambda k=k: _spec_row(
                target, model, k, prompts[:n_prompts], spec, repeat, kind, base, base_out[:n_prompts], c))
            if row is not None:
                results.append({"name": f"speculative/{name}/k{k}", "draft": name, **row})

    sweep("trained", draft, spec["repeat"], len(prompts))
    trained = [r for r in results if r.get("draft") == "trained"]
    if not trained:
        raise RuntimeError(f"no speculative run of the trained draft finished: {summary.get('errors')}")
    best = max(trained, key=lambda r: r["tokens_per_s"])
    summary.update(best_k=best["k"], speculative_tokens_per_s=best["tokens_per_s"], speedup_vs_target=best["speedup"],
                   alpha_best_k=best["alpha"], predicted_speedup_best_k=best["predicted_speedup"], cost_ratio_c=c)
    if spec["hf"]:
        _log("HF generate and assisted generation", t0)
        hf_rows = _hf(target, draft, prompts, spec, best["k"], summary)
        results += [{"name": r["name"], "variant": r["name"], "tokens_per_s": r["tokens_per_s"],
                     "ms_per_token": r["ms_per_token"]} for r in hf_rows]
        summary.update(_hf_summary(hf_rows, best, base_out, spec["hf_tokens"]))
    # the widget's other drafts, timed once each (last: the least needed if time runs short)
    sweep("random", P.random_draft(dtype, device), 1, max(1, len(prompts) // 2))
    sweep("target", target, 1, max(1, len(prompts) // 2))
    summary["targets"] = TARGETS
    summary["meets"] = {"speedup_vs_target": summary["speedup_vs_target"] >= TARGETS["speedup_vs_target"],
                        "vs_hf_assisted": (summary.get("vs_hf_assisted") or 0) >= TARGETS["vs_hf_assisted"]}
    if not gpu:
        summary["note"] = "no CUDA GPU: eager torch rounds on a CPU; the H200 record is the reference"
    summary["bench_s"] = time.perf_counter() - t0
    _log("done", t0)
    return {"params": {**spec, "dtype": dtype}, "results": results, "summary": summary}

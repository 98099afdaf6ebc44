"""`course-kit bench model`: one batch-1 decode step of the course model against HF's, same weights.

Both run eagerly (no CUDA graphs, no compile), each step feeding back its own greedy token so the
caches grow as in real decoding: the course model writes into its StaticKVCache, HF appends to
its DynamicCache. Before timing, the first decode steps of both are compared: logits in the run's
dtype, and greedy tokens in a float32 run of the same comparison (see `judge`).
The helpers here are shared with `course-kit bench cuda_graphs`.
"""
from __future__ import annotations

import contextlib
import gc
import inspect
import time

import torch

from .. import bench
from .. import device as device_info
from ..models import llama
from ..device import default_device, has_cuda
from ..models.hf import model_to_hf

SIZES = {
    "smoke": dict(presets=["tiny"], prompt_len=8, repeat=5, check_steps=4),
    "cpu": dict(presets=["tiny"], prompt_len=32, repeat=20, check_steps=8),
    "small_gpu": dict(presets=["smollm-135m", "llama-1b"], prompt_len=128, repeat=100, check_steps=8),
    "full": dict(presets=["smollm-135m", "llama-1b"], prompt_len=128, repeat=100, check_steps=8),
}
WARMUP = 5
LOGIT_TOL = 0.1        # bf16/fp16 logits vs HF, relative on the max-norm (a wrong model is off by O(1))
FP32_LOGIT_TOL = 1e-3  # float32 logits vs HF on the GPU (kernels differ; on a CPU they agree to ~1e-6)
FP32_CHECK_STEPS = 4   # greedy steps of the float32 comparison: cheap, and enough to catch a wrong cache


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def build(preset: str, dtype: torch.dtype, device: str, seed: int = 0):
    """The course model with seeded weights and HF's LlamaForCausalLM holding the same weights."""
    model = llama.Transformer.from_preset(preset, seed=seed, dtype=dtype, device=device)
    return model, model_to_hf(model)


def prompt_for(cfg, length: int, device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, cfg.vocab_size, (1, length), generator=gen).to(device)


class CourseDecoder:
    """Prefill once, then `step()` decodes one token (greedy) into a StaticKVCache, sync-free."""

    def __init__(self, model, prompt: torch.Tensor, max_seq: int):
        B, T = prompt.shape
        dev, dtype = prompt.device, model.tok_embeddings.weight.dtype
        self.model = model
        self.cache = llama.StaticKVCache(model.config, B, max_seq, dtype, dev)
        with torch.no_grad():
            logits = model.prefill(prompt, self.cache)[:, -1]
        self.token = logits.argmax(-1)
        self.pos = torch.full((B,), T, dtype=torch.long, device=dev)
        self.max_seq = max_seq

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        logits = self.model.decode(self.token, self.pos, self.cache)
        self.token = logits.argmax(-1)
        self.pos += 1  # in place: stays on the device, no host sync
        return logits


class HFDecoder:
    """The same loop through HF: prefill builds its DynamicCache, `step()` appends one token."""

    def __init__(self, hf, prompt: torch.Tensor):
        self.hf = hf
        # transformers renamed `past_key_values` to `cache` (5.2x); use whichever this version has
        self.key = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"
        with torch.no_grad():
            out = hf(input_ids=prompt, use_cache=True)
        self.cache = getattr(out, self.key)
        self.token = out.logits[:, -1].argmax(-1)

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        out = self.hf(input_ids=self.token[:, None], use_cache=True, **{self.key: self.cache})
        self.cache = getattr(out, self.key)
        logits = out.logits[:, -1]
        self.token = logits.argmax(-1)
        return logits


def compare_steps(a, b, steps: int) -> dict:
    """Run both decoders `steps` times; relative logit errors and how many greedy tokens agree.

    Each decoder feeds back its own token, so after a first disagreement the two diverge: errors are
    taken up to and including that step, and `first_mismatch` is its index (None: every token agreed).
    max_rel_err: Frobenius ||a - b|| / ||b||; max_rel_err_maxnorm: max|a - b| / max|b|.
    """
    worst, worst_max, first_mismatch = 0.0, 0.0, None
    for i in range(steps):
        la, lb = a.step().float(), b.step().float()
        if first_mismatch is None:
            worst = max(worst, ((la - lb).norm() / lb.norm()).item())
            worst_max = max(worst_max, ((la - lb).abs().max() / lb.abs().max()).item())
            if not torch.equal(la.argmax(-1), lb.argmax(-1)):
                first_mismatch = i
    return {"max_rel_err": worst, "max_rel_err_maxnorm": worst_max, "first_mismatch": first_mismatch,
            "tokens_agree": steps if first_mismatch is None else first_mismatch, "steps": steps}


@contextlib.contextmanager
def strict_fp32():
    """fp32 matmuls in true fp32 (no TF32) for the duration; restores the switches."""
    before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cuda.matmul.allow_tf32 = before[1]


def fp32_check(preset: str, prompt: torch.Tensor, steps: int, device: str, seed: int = 0) -> dict:
    """The same comparison in float32 (same seeded weights, no rounding to 16 bits): here greedy tokens
    must agree exactly, since near-ties that 16-bit rounding flips are resolved the same way."""
    with strict_fp32():
        model, hf = build(preset, torch.float32, device, seed)
        max_seq = prompt.shape[1] + steps + 1
        out = compare_steps(CourseDecoder(model, prompt, max_seq), HFDecoder(hf, prompt), steps)
    del model, hf
    free()
    return out


def judge(low: dict, fp32: dict, low_precision: bool) -> dict:
    """The check's verdict. ok: the low-precision logits within LOGIT_TOL (relative, max-norm) of HF's,
    and in float32 the logits within FP32_LOGIT_TOL and every greedy token identical. Token agreement
    in bf16 is reported as information only: a random-weight model has near-tied logits that bf16
    rounding (different kernels, different summation orders) can flip, after which the runs diverge."""
    tol = LOGIT_TOL if low_precision else FP32_LOGIT_TOL
    ok = (low["max_rel_err_maxnorm"] <= tol and fp32["max_rel_err_maxnorm"] <= FP32_LOGIT_TOL
          and fp32["first_mismatch"] is None)
    return {"ok": bool(ok), "logits": low, "fp32": fp32, "logit_tol_maxnorm": tol, "fp32_logit_tol_maxnorm": FP32_LOGIT_TOL,
            "tokens_identical_low_precision": low["first_mismatch"] is None,
            "rule": f"ok = max|ours - hf| / max|hf| <= {tol:g} in the run's dtype, and in float32 <= "
                    f"{FP32_LOGIT_TOL:g} with every greedy token identical; low-precision token agreement "
                    f"is information (near-ties flip under 16-bit rounding)"}


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def hf_generate_tokens_per_s(hf, prompt: torch.Tensor, new_tokens: int, repeat: int = 3) -> dict:
    """HF `generate` decode speed: (n - 1) tokens over t(n new) - t(1 new), so prefill cancels out."""
    def run(n):
        sync(prompt.device)
        t0 = time.perf_counter()
        hf.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync(prompt.device)
        return time.perf_counter() - t0
    with torch.no_grad():
        run(2)  # warm-up
        t1 = sorted(run(1) for _ in range(repeat))[repeat // 2]
        tn = sorted(run(new_tokens) for _ in range(repeat))[repeat // 2]
    per_token = (tn - t1) / (new_tokens - 1)
    return {"s_per_token": per_token, "tokens_per_s": 1.0 / per_token, "new_tokens": new_tokens}


def free() -> None:
    gc.collect()
    if has_cuda():
        torch.cuda.empty_cache()


@bench.topic("model", help="batch-1 decode step: the course model vs HF transformers, same weights")
def run(params: dict) -> dict:
    size = params.get("size", "cpu")
    spec = {**SIZES[size], **{k: params[k] for k in ("presets", "prompt_len", "repeat") if k in params}}
    device = params.get("device") or default_device()
    dtype = device_info.param_dtype(params)
    results, summary = [], {}
    for preset in bench.progress(spec["presets"], desc="presets"):
        model, hf = build(preset, dtype, device)
        prompt = prompt_for(model.config, spec["prompt_len"], device)
        max_seq = spec["prompt_len"] + spec["check_steps"] + WARMUP + spec["repeat"] + 1
        low = compare_steps(CourseDecoder(model, prompt, max_seq), HFDecoder(hf, prompt), spec["check_steps"])
        if low["max_rel_err_maxnorm"] > 0.5:
            raise AssertionError(f"{preset}: course logits differ from HF's by {low['max_rel_err_maxnorm']:.3g} "
                                 f"(relative, max-norm): not the same model")
        low_precision = dtype != torch.float32
        fp32 = (fp32_check(preset, prompt, min(FP32_CHECK_STEPS, spec["check_steps"]), device)
                if low_precision else low)
        check = judge(low, fp32, low_precision)
        ours, theirs = CourseDecoder(model, prompt, max_seq), HFDecoder(hf, prompt)
        t_ours = bench.timeit(ours.step, warmup=WARMUP, repeat=spec["repeat"], device=device)
        t_hf = bench.timeit(theirs.step, warmup=WARMUP, repeat=spec["repeat"], device=device)
        for name, t in (("course", t_ours), ("hf", t_hf)):
            results.append(bench.Case(f"{preset}/{name}", t, {
                "preset": preset, "impl": name, "dtype": dtype, "tokens_per_s": 1.0 / t.median_s,
                "weight_bytes": weight_bytes(model)}).as_dict())
        summary[f"{preset}_speedup_vs_hf"] = t_hf.median_s / t_ours.median_s
        summary[f"{preset}_course_ms"] = t_ours.median_s * 1e3
        summary[f"{preset}_hf_ms"] = t_hf.median_s * 1e3
        summary[f"{preset}_check"] = check
        del model, hf, ours, theirs
        free()
    return {"params": {**spec, "dtype": dtype, "batch": 1, "warmup": WARMUP}, "results": results,
            "summary": summary}

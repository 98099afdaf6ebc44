"""`course-kit bench batching`: static vs dynamic vs continuous batching, and the HF peers.

One workload (seeded): `n_requests` prompts and output lengths uniform in the given ranges, EOS
ignored, all arriving at t=0 (offline throughput). Every policy runs it in the engine with the
same number of batch slots (`max_num_seqs`; `also_slots` repeats static and continuous with more),
in the engine's sync loop, and static and continuous again in its async loop (notebook 07); the
headline ratio takes both policies in the loop where continuous batching is faster.
Static batching needs about max/mean of the output lengths times the steps continuous batching
needs, less the tail where continuous batching drains its last requests; with few requests per
slot that tail grows, which is why the headline comparison uses 24 slots for 256 requests. The peers run a subset of it (HF is slow; throughput is tokens per
second on the same distribution of lengths), and the engine runs that same subset too, so each
ratio compares the same requests:
- HF `generate`: static batches of `peer_slots`, left-padded, each batch generating until its
  longest request is done (only requested tokens are counted);
- HF `generate_batch` machinery (continuous batching, transformers >= 5): its manager with CUDA
  graphs on, the best attention it finds (flash if installed, else SDPA), default settings
  otherwise; requests added one by one so each keeps its own output length.

Correctness first: in fp32, every policy's greedy tokens must equal HF `generate` on a few
requests; in the timed dtype, the agreement with HF is reported.
"""
from __future__ import annotations

import inspect
import time

import torch

from .. import bench
from .. import device as _device
from ..engine import Engine, SamplingParams, trace
from ..streams.async_loop import AsyncEngine
from ..engine.metrics import block_usage, policy_gain, slot_intervals
from ..models import llama
from ..device import has_cuda
from ..models.hf import model_to_hf

POLICIES = ("static", "dynamic", "continuous")


def _defaults(size: str, cuda: bool) -> dict:
    if cuda and size in ("full", "small_gpu"):
        return {"preset": "smollm-135m", "n_requests": 256, "prompt_len": [100, 1024],
                "output_len": [100, 1024], "seed": 0, "max_num_seqs": 24, "block_size": 16,
                "max_num_batched_tokens": 2048, "max_wait_s": 0.02, "peer_requests": 64,
                "check_requests": 4, "check_tokens": 24, "also_slots": [64], "wide_slots": 0,
                "peer_slots": 64}
    return {"preset": "tiny", "n_requests": 12, "prompt_len": [4, 40], "output_len": [4, 40],
            "seed": 0, "max_num_seqs": 4, "block_size": 16, "max_num_batched_tokens": 64, "max_wait_s": 0.02,
            "peer_requests": 4, "check_requests": 2, "check_tokens": 6, "also_slots": [], "wide_slots": 0,
            "peer_slots": 4}


def _check_same(hf, prompt: list[int], ref: list[int], got: list[int], what: str, tie: float = 1e-3) -> int:
    """Raise unless `got` equals HF's greedy `ref`; a divergence is forgiven only at a numerical tie
    (HF's own logits for the two tokens within `tie`), after which the texts legitimately differ.
    Returns 1 for a forgiven tie, else 0."""
    if got == ref:
        return 0
    j = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
    if j >= min(len(got), len(ref)):
        raise AssertionError(f"{what}: {len(got)} tokens where HF generated {len(ref)}")
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + ref[:j]], device=hf.device)).logits[0, -1].float()
    gap = float(logits[ref[j]] - logits[got[j]])
    if gap > tie:
        raise AssertionError(f"{what}: token {j} is {got[j]}, HF generate chose {ref[j]} "
                             f"(logit gap {gap:.2e}, not a tie)")
    return 1


def check_fp32_against_hf(p: dict, prompts: list[list[int]], dev: str, engines: dict) -> tuple[dict, int, list]:
    """In fp32, each engine (name -> build(model)) must give HF generate's greedy tokens on the
    first p["check_requests"] prompts, cut to 64 tokens, for p["check_tokens"] new tokens; a
    divergence is forgiven only at a numerical tie. Returns ({name: True}, ties, the prompts)."""
    k, kt = p["check_requests"], p["check_tokens"]
    m32 = llama.Transformer.from_preset(p["preset"], seed=p["seed"], dtype=torch.float32, device=dev)
    hf32 = model_to_hf(m32)
    check_prompts = [x[:64] for x in prompts[:k]]
    ref = [hf_generate_greedy(hf32, x, kt) for x in check_prompts]
    checks, ties = {}, 0
    for name, build in engines.items():
        got = build(m32).generate(check_prompts, SamplingParams(max_new_tokens=kt))
        ties += sum(_check_same(hf32, x, r, o.tokens, f"{name}, request {i}")
                    for i, (x, r, o) in enumerate(zip(check_prompts, ref, got)))
        checks[name] = True
    return checks, ties, check_prompts


def hf_generate_greedy(hf, prompt: list[int], n: int) -> list[int]:
    dev = hf.device
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt], device=dev), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


def hf_generate_static(hf, prompts: list[list[int]], news: list[int], batch: int, pad_id: int = 0) -> list[list[int]]:
    """HF generate in left-padded batches of `batch`, each to its longest requested output."""
    dev, outs = hf.device, []
    for s in range(0, len(prompts), batch):
        ps, ns = prompts[s:s + batch], news[s:s + batch]
        width = max(len(p) for p in ps)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in ps], device=dev)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps], device=dev)
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=mask, max_new_tokens=max(ns), min_new_tokens=max(ns),
                              do_sample=False, pad_token_id=pad_id)
        outs += [out[i, width:width + n].tolist() for i, n in enumerate(ns)]
    return outs


def hf_cpu_cache_sizes(hints: tuple[int, int, int], page_size: int = 256) -> dict:
    """ContinuousBatchingConfig sizes for a CPU run, from the workload (longest prompt, longest output,
    requests): room for every request at full length and one batch of every prompt.

    Left to itself HF sizes its cache and batch from the machine's free RAM, as it does a GPU's free
    memory; on a CPU that is whatever the process has not used, so the same run fails on a machine, or
    late in a test session, with less RAM left ("Invalid values: max_batch_tokens = 8192, num_sectors
    = -13"). Sizes from the workload need a few MB; the memory share is then only HF's ceiling check."""
    prompt, new, requests = hints
    if min(prompt, new, requests) < 1:
        raise ValueError(f"hints (longest prompt, longest output, requests) must all be >= 1, got {hints}")
    pages_per_request = -(-(prompt + new) // page_size)
    return {"num_blocks": requests * pages_per_request + 1,
            "max_batch_tokens": min(8192, max(page_size, prompt * requests)),
            "max_memory_percent": 0.9}


def hf_generate_batch(hf, prompts: list[list[int]], news: list[int], hints: tuple[int, int, int] | None = None,
                      keep: bool = False, graphs: bool = True) -> tuple[list[list[int]], dict]:
    """HF continuous batching, configured at its best here; returns tokens and the settings used.

    `hints` (longest prompt, longest output, requests) size HF's cache and batch; `keep=True`
    keeps the warmed-up manager (CUDA graphs captured) for the next call, so a warm-up call with
    the same hints leaves the timed call nothing to set up."""
    from transformers import GenerationConfig
    gen = GenerationConfig(do_sample=False, max_new_tokens=max(news), eos_token_id=-1)
    settings: dict = {}
    kwargs: dict = {"generation_config": gen, "block": True, "timeout": 10}
    cm = hf.continuous_batching_context_manager
    sig = inspect.signature(cm).parameters
    try:
        from transformers.generation.configuration_utils import ContinuousBatchingConfig
    except ImportError:
        ContinuousBatchingConfig = None
    cuda = hf.device.type == "cuda" and graphs
    if ContinuousBatchingConfig is not None and "continuous_batching_config" in sig:
        fields = inspect.signature(ContinuousBatchingConfig).parameters
        wanted = {"use_cuda_graph": cuda, "auto_switch_to_flash": True}
        if hf.device.type == "cpu":
            wanted.update(hf_cpu_cache_sizes(hints or (max(len(p) for p in prompts), max(news), len(prompts))))
        cfg = {k: v for k, v in wanted.items() if k in fields}
        kwargs["continuous_batching_config"] = ContinuousBatchingConfig(**cfg)
        settings.update(cfg)
    else:   # older releases kept these settings on the GenerationConfig
        gen.use_cuda_graph = cuda
        settings["use_cuda_graph"] = cuda
    if "warmup" in sig:
        kwargs["warmup"] = True
    hints = hints or (max(len(p) for p in prompts), max(news), len(prompts))
    if "workload_hints" in sig:
        from transformers.generation.continuous_batching.utils import WorkloadHints
        kwargs["workload_hints"] = WorkloadHints(max_prompt_length=hints[0], max_generated_length=hints[1],
                                                 num_requests=hints[2])
    if "persistent_manager" in sig:
        kwargs["persistent_manager"] = keep
        settings["manager_kept_warm"] = keep
    with cm(**kwargs) as manager:
        tokens = drain_requests(manager, prompts, news, timeout_s=3600)
    settings["attn_implementation"] = hf.config._attn_implementation
    return tokens, settings


def drain_requests(manager, prompts: list[list[int]], news: list[int], timeout_s: float) -> list[list[int]]:
    """Add every prompt to an HF continuous-batching manager and collect each one's new tokens, in
    prompt order (a request HF reports as failed raises; one still running at the deadline is empty)."""
    results: dict[str, list[int]] = {}
    for i, (p, n) in enumerate(zip(prompts, news)):
        manager.add_request(p, request_id=f"r{i}", max_new_tokens=n)
    deadline = time.time() + timeout_s
    while len(results) < len(prompts) and time.time() < deadline:
        r = manager.get_result(timeout=1)
        if r is not None and r.is_finished():
            if getattr(r, "error", None):
                raise RuntimeError(f"generate_batch failed on {r.request_id}: {r.error}")
            results[r.request_id] = list(r.generated_tokens)
    return [results.get(f"r{i}", []) for i in range(len(prompts))]


def policy_runs(record: dict) -> dict[str, tuple[dict, dict]]:
    """The (static, continuous) results of a batching record for each loop mode it ran: "sync",
    and "async" when recorded (records before the async policy runs hold sync only)."""
    by_name = {r["name"]: r for r in record.get("results", [])}
    out = {"sync": (by_name["static"], by_name["continuous"])}
    if "static async" in by_name and "continuous async" in by_name:
        out["async"] = (by_name["static async"], by_name["continuous async"])
    return out


def _downsample(xs: list, n: int = 400) -> list:
    step = max(1, len(xs) // n)
    return xs[::step]


def _sync() -> None:
    if has_cuda():
        torch.cuda.synchronize()


def time_peer(fn, prompts: list, news: list[int]) -> tuple[float, dict]:
    """Warm a peer on two short requests, then time it on the workload (synchronised host clock).

    `fn(prompts, new_token_counts)` returns the token lists, or (token lists, extra figures). Every
    output must have the length asked for, so that tokens/s counts the same work for every peer.
    Returns (seconds, extra figures).
    """
    fn(prompts[:2], [4, 4])
    _sync()
    t0 = time.perf_counter()
    out = fn(prompts, news)
    _sync()
    seconds = time.perf_counter() - t0
    toks, extra = out if isinstance(out, tuple) else (out, {})
    if [len(t) for t in toks] != list(news):
        raise AssertionError("output lengths differ from the requested ones")
    return seconds, extra


class _Runs:
    """The timed engine runs of one bench: each on the same model and options, its summary kept
    in `results` and its slot and block timelines in `timelines`."""

    def __init__(self, model: llama.Transformer, engine_opts: dict, cuda: bool) -> None:
        self.model, self.engine_opts, self.cuda = model, engine_opts, cuda
        self.results: list[dict] = []
        self.timelines: dict[str, dict] = {}

    def run(self, name: str, policy: str, prompts: list, sampling: list, slots: int, cls=Engine) -> dict:
        eng = cls(self.model, policy=policy, **{**self.engine_opts, "max_num_seqs": slots})
        eng.generate(prompts[:2], [SamplingParams(max_new_tokens=4)] * 2)       # warm-up (graphs, kernels)
        _sync()
        outs = eng.generate(prompts, sampling, progress=True)
        _sync()
        s = eng.summary(outs)
        assert all(len(o.tokens) == sp.max_new_tokens for o, sp in zip(outs, sampling)), f"{name}: short outputs"
        eng.blocks.check_invariants()
        assert eng.blocks.num_used_blocks == 0, f"{name}: blocks leaked"
        self.results.append({"name": name, "policy": policy, "requests": len(prompts), "max_num_seqs": slots, **s})
        self.timelines[name] = {
            "intervals": slot_intervals(eng.steps) if name in POLICIES else [],
            "blocks": {k: _downsample(v) for k, v in block_usage(eng.steps, eng.blocks.num_blocks).items()}}
        del eng
        torch.cuda.empty_cache() if self.cuda else None
        return s

    def peer(self, name: str, fn, prompts: list, news: list[int]) -> float:
        """A peer's throughput on the same requests; a peer that fails (an API change in another
        transformers release) is recorded with why, and must not lose the engine's figures."""
        try:
            dt, extra = time_peer(fn, prompts, news)
        except Exception as err:  # noqa: BLE001
            self.results.append({"name": name, "policy": "peer", "skipped": f"{type(err).__name__}: {err}"[:500]})
            return float("nan")
        self.results.append({"name": name, "policy": "peer", "requests": len(prompts), "duration_s": dt,
                             "output_tokens": sum(news), "throughput_tok_s": sum(news) / dt, **extra})
        return sum(news) / dt


def _policies(runs: _Runs, p: dict, prompts: list, sampling: list) -> dict:
    """Every policy in the sync loop; static and continuous again in the async loop (notebook 07:
    the host prepares step N+1 while the device runs step N, so the host's work per request stops
    adding to each step); the same two with more slots, where the drain tail weighs more."""
    thr, runs_by = {}, {}
    for policy in POLICIES:
        runs_by[policy] = runs.run(policy, policy, prompts, sampling, p["max_num_seqs"])
        thr[policy] = runs_by[policy]["throughput_tok_s"]
    by_mode = {"sync": (runs_by["static"], runs_by["continuous"]),
               "async": tuple(runs.run(f"{policy} async", policy, prompts, sampling, p["max_num_seqs"],
                                       cls=AsyncEngine) for policy in ("static", "continuous"))}
    also = {}
    for slots in p.get("also_slots") or []:
        st = runs.run(f"static ({slots} slots)", "static", prompts, sampling, slots)["throughput_tok_s"]
        co = runs.run(f"continuous ({slots} slots)", "continuous", prompts, sampling, slots)["throughput_tok_s"]
        also[str(slots)] = co / st
    if p.get("wide_slots"):
        thr["continuous_wide"] = runs.run(f"continuous ({p['wide_slots']} slots)", "continuous", prompts,
                                          sampling, p["wide_slots"])["throughput_tok_s"]
    return {"thr": thr, "by_mode": by_mode, "also": also}


def _peers(runs: _Runs, p: dict, hf, prompts: list, news: list[int], sampling: list) -> dict:
    """HF generate and generate_batch on a subset, and the engine (sync and async) on the same one."""
    n_peer = min(p["peer_requests"], len(prompts))
    sub_p, sub_n = prompts[:n_peer], news[:n_peer]
    label = f"({n_peer} requests, {p['peer_slots']} slots)"
    eng_sync = runs.run(f"continuous {label}", "continuous", sub_p, sampling[:n_peer],
                        p["peer_slots"])["throughput_tok_s"]
    # the async mode is part of the same engine, so its best mode faces the peers (both reported)
    eng_async = float("nan")
    try:
        eng_async = runs.run(f"continuous async {label}", "continuous", sub_p, sampling[:n_peer],
                             p["peer_slots"], cls=AsyncEngine)["throughput_tok_s"]
    except Exception as err:  # noqa: BLE001 - the sync figure stands on its own
        runs.results.append({"name": "continuous async", "skipped": f"{type(err).__name__}: {err}"[:500]})
    thr_gen = runs.peer("HF generate (static, padded)",
                        lambda ps, ns: hf_generate_static(hf, ps, ns, p["peer_slots"]), sub_p, sub_n)
    hints = (max(len(x) for x in sub_p), max(sub_n), len(sub_p))
    thr_cb = runs.peer("HF generate_batch (continuous)",
                       lambda ps, ns: hf_generate_batch(hf, ps, ns, hints=hints, keep=True), sub_p, sub_n)
    if thr_cb != thr_cb and runs.cuda:      # failed with CUDA graphs on: measure it without, and say so
        if hasattr(hf, "destroy_cached_continuous_batching_manager"):
            hf.destroy_cached_continuous_batching_manager()
        thr_cb = runs.peer("HF generate_batch (continuous, CUDA graphs off after a failure)",
                           lambda ps, ns: hf_generate_batch(hf, ps, ns, hints=hints, keep=True, graphs=False),
                           sub_p, sub_n)
    if hasattr(hf, "destroy_cached_continuous_batching_manager"):
        hf.destroy_cached_continuous_batching_manager()
    eng_sub = max(eng_sync, eng_async) if eng_async == eng_async else eng_sync
    return {"n": n_peer, "sync": eng_sync, "async": eng_async, "engine": eng_sub, "generate": thr_gen,
            "generate_batch": thr_cb}


def _summary(p: dict, dtype: torch.dtype, checks: dict, ties: int, agree: float, pol: dict, peers: dict,
             n_requests: int) -> dict:
    thr, by_mode = pol["thr"], pol["by_mode"]
    mode_ratio = {m: c["throughput_tok_s"] / s["throughput_tok_s"] for m, (s, c) in by_mode.items()}
    # the headline: both policies in the engine's faster mode for continuous batching
    best_mode = max(by_mode, key=lambda m: by_mode[m][1]["throughput_tok_s"])
    n_peer, eng_sub, thr_cb = peers["n"], peers["engine"], peers["generate_batch"]
    return {
        "correct_fp32": checks,
        "fp32_numerical_ties": ties,
        "bf16_token_agreement_with_hf" if dtype != torch.float32 else "token_agreement_with_hf": agree,
        "throughput_tok_s": thr,
        "continuous_vs_static": mode_ratio[best_mode],
        "continuous_vs_static_mode": best_mode,
        "continuous_vs_static_by_mode": mode_ratio,
        "dynamic_vs_static": thr["dynamic"] / thr["static"],
        "continuous_vs_static_by_slots": {str(p["max_num_seqs"]): mode_ratio["sync"], **pol["also"]},
        "continuous_vs_static_target": 1.6,
        # the ratio in two parts: fewer steps (the scheduling gain) over the cost of each step
        "continuous_vs_static_parts": {m: policy_gain(*pair) for m, pair in by_mode.items()},
        "peer_subset_requests": n_peer,
        "engine_subset_tok_s": eng_sub,
        "engine_subset_sync_tok_s": peers["sync"],
        "engine_subset_async_tok_s": peers["async"],
        "engine_sync_vs_hf_generate_batch": peers["sync"] / thr_cb,
        "engine_vs_hf_generate": eng_sub / peers["generate"],
        "engine_vs_hf_generate_batch": eng_sub / thr_cb,
        "engine_vs_hf_generate_batch_target": 10.0,
        "engine_best_tok_s": max(thr.values()),
        "pass_continuous_vs_static": mode_ratio[best_mode] >= 1.6,
        "pass_engine_vs_generate_batch": eng_sub / thr_cb >= 10.0,
        "notes": [
            "offline workload: every request arrives at t=0, so dynamic batching forms the same batches "
            "as static batching",
            f"the peers ran the first {n_peer} of the {n_requests} requests (same length distribution); "
            f"the engine ran those same requests for the engine_vs_* ratios",
            "throughput counts requested output tokens only (padding and prompt tokens excluded)",
            "throughput_tok_s and continuous_vs_static_by_slots are the sync loop; "
            f"continuous_vs_static compares both policies in the {best_mode} loop (the faster for continuous)",
        ],
    }


@bench.topic("batching", help="static vs dynamic vs continuous batching; HF generate and generate_batch peers")
def run(params: dict) -> dict:
    cuda = has_cuda() and str(params.get("device", "cuda")).startswith("cuda")
    p = {**_defaults(params.get("size", "cpu"), cuda), **{k: v for k, v in params.items() if k not in ("size", "device")}}
    dev = "cuda" if cuda else "cpu"
    # the device's compute dtype (device.defaults): bf16, fp16 on a T4, fp32 on a CPU
    dtype = p["dtype"] = _device.param_dtype(p)
    model = llama.Transformer.from_preset(p["preset"], seed=p["seed"], dtype=dtype, device=dev)
    work = trace.synthetic(p["n_requests"], tuple(p["prompt_len"]), tuple(p["output_len"]),
                           model.config.vocab_size, seed=p["seed"])
    prompts, news = [r.prompt for r in work], [r.max_new_tokens for r in work]
    engine_opts = dict(max_num_seqs=p["max_num_seqs"], block_size=p["block_size"],
                       max_num_batched_tokens=p["max_num_batched_tokens"], max_wait_s=p["max_wait_s"])

    # correctness: fp32, every policy token-identical to HF generate; agreement in the timed dtype
    checks, ties, check_prompts = check_fp32_against_hf(p, prompts, dev, {
        policy: (lambda m, policy=policy: Engine(m, policy=policy, **engine_opts, check_invariants=True))
        for policy in POLICIES})
    kt = p["check_tokens"]
    hf = model_to_hf(model)
    hf_ref = [hf_generate_greedy(hf, pr, kt) for pr in check_prompts]
    eng_tok = [o.tokens for o in Engine(model, **engine_opts).generate(check_prompts, SamplingParams(max_new_tokens=kt))]
    agree = sum(a == b for x, y in zip(eng_tok, hf_ref) for a, b in zip(x, y)) / max(1, sum(len(x) for x in hf_ref))

    runs = _Runs(model, engine_opts, cuda)
    sampling = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in news]
    pol = _policies(runs, p, prompts, sampling)
    peers = _peers(runs, p, hf, prompts, news, sampling)
    summary = _summary(p, dtype, checks, ties, agree, pol, peers, len(prompts))
    return {"params": p, "results": runs.results, "summary": summary, "timelines": runs.timelines}

"""Measuring speculative decoding against the target alone and HF's assisted generation, one way.

Every peer is timed the same way as `course-kit bench model` times HF: a decode speed of
(n - 1) tokens over t(n new tokens) - t(1 new token), medians of repeats, so the prefill (the
same prompt for every peer) cancels out. Prompts are cut from the shipped held-out slice, so they
are the same text on every machine and never seen in training.

- `decode_speed(generate, prompts, n)`: any `generate(prompt, n) -> tokens`;
- `speculative_run(target, draft, k, prompts, n)`: that, plus the acceptance statistics pooled
  over the prompts (per position, alpha, tokens per round);
- `step_costs(...)`: one step of the target over M = 1..8 tokens and one step of the draft, each
  alone (graph-captured on a GPU): the cost ratio c of Leviathan et al.'s formula;
- `hf_speed(...)`: HF `generate`, plain or with `assistant_model`.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from ... import bench
from ...models import llama
from . import pair as P
from . import rules
from .decoder import SpeculativeDecoder
from .steps import rows_step


def prompts(n: int, length: int, folder=None) -> list[list[int]]:
    """n prompts of `length` tokens from the held-out slice, from different windows and offsets."""
    tokens = P.heldout_slice(folder)
    W, T = tokens.shape
    if not 1 <= length <= T - 1:
        raise ValueError(f"prompt length must be in [1, {T - 1}], got {length}")
    return [tokens[i % W, (97 * i) % (T - length):(97 * i) % (T - length) + length].tolist() for i in range(n)]


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def decode_speed(generate: Callable[[list[int], int], list[int]], prompts: list[list[int]], n: int,
                 repeat: int = 3, device="cpu") -> dict:
    """Tokens/s of decoding: sum over prompts of (n - 1) / sum of (median t(n) - median t(1))."""
    if n < 2:
        raise ValueError(f"n must be >= 2 (the speed is measured over n - 1 tokens), got {n}")
    total, outputs = 0.0, []

    def timed(prompt, m):
        _sync(device)
        t0 = time.perf_counter()
        out = generate(prompt, m)
        _sync(device)
        return time.perf_counter() - t0, out

    for prompt in prompts:
        timed(prompt, 2)                                               # warm-up
        t1 = _median([timed(prompt, 1)[0] for _ in range(repeat)])
        runs = [timed(prompt, n) for _ in range(repeat)]
        total += max(_median([t for t, _ in runs]) - t1, 1e-9)
        outputs.append(runs[0][1])
    tokens = (n - 1) * len(prompts)
    return {"tokens_per_s": tokens / total, "ms_per_token": total / tokens * 1e3, "outputs": outputs}


def speculative_run(target: llama.Transformer, draft: llama.Transformer | None, k: int, prompts: list[list[int]],
                    n: int, *, repeat: int = 3, max_seq: int = 512, kernels="torch", temperature: float = 0.0,
                    seed: int = 0) -> dict:
    """The decoder's speed and its acceptance statistics, pooled over one run of n tokens per prompt."""
    dec = SpeculativeDecoder(target, draft, k, max_seq=max_seq, kernels=kernels, temperature=temperature, seed=seed)
    device = target.tok_embeddings.weight.device
    speed = decode_speed(dec.generate, prompts, n, repeat, device)
    kept, rounds, emitted = [0] * k, 0, 0
    for prompt in prompts:                                  # statistics of one clean run per prompt
        dec.generate(prompt, n)
        s = dec.stats()
        kept = [a + b for a, b in zip(kept, s["kept_per_position"])]
        rounds, emitted = rounds + s["rounds"], emitted + s["emitted"]
    reached = [rounds] + kept[:-1]
    return {"k": k, **{key: v for key, v in speed.items() if key != "outputs"}, "outputs": speed["outputs"],
            "rounds": rounds, "tokens_per_round": emitted / rounds if rounds else None,
            "acceptance_per_position": [a / r if r else None for a, r in zip(kept, reached)],
            "alpha": rules.alpha_from_counts(kept, rounds) if k and rounds else None,
            "kernels": dec.kernels, "graphs": dec.graph is not None}


def _step_fn(step, model: llama.Transformer, m: int, position: int, max_seq: int, graphs: bool):
    """One step of `model` over m tokens at `position` with the greedy pick, on its own cache (a
    CUDA graph's replay on a GPU)."""
    cfg, weight = model.config, model.tok_embeddings.weight
    cache = llama.StaticKVCache(cfg, 1, max_seq, weight.dtype, weight.device)
    tokens = torch.ones(m, dtype=torch.long, device=weight.device)
    positions = torch.arange(position, position + m, device=weight.device)
    out = torch.zeros(m, dtype=torch.long, device=weight.device)

    def body():
        step.greedy(step(tokens, positions, cache), out=out)
    if not graphs:
        return body
    from ...cuda_graphs.runner import capture
    with torch.no_grad():
        graph = capture(body)

    # A CUDA graph holds raw addresses, not references. Returning `graph.replay` alone let `body`,
    # and with it the cache, tokens, positions, out and the step's block table and argmax buffers,
    # be freed once this function returned; the next step's tensors then took that memory, and a
    # replay read garbage positions and wrote K/V far outside the cache (the bench's "illegal
    # memory access" on the H200). The replay keeps `body` (so everything it reads) alive.
    def replay():
        graph.replay()
    replay.keep_alive = body
    return replay


def step_costs(target: llama.Transformer, draft: llama.Transformer, *, rows=(1, 2, 3, 4, 5, 6, 7, 8),
               kernels: str = "torch", position: int = 128, max_seq: int = 512, repeat: int = 50,
               passes: int = 3) -> dict:
    """Median time of one target step over M tokens (each M in `rows`) and of one draft step over one,
    with the greedy pick, each alone (in a CUDA graph on a GPU): c = draft / target at M = 1. The
    sweep runs `passes` times, interleaved, and each figure is its lowest median: a burst of other
    work on a shared machine then spoils one pass, not one figure."""
    device = target.tok_embeddings.weight.device
    graphs = device.type == "cuda"
    position = min(position, max_seq - max(rows) - 1)
    fns = {m: _step_fn(rows_step(target, "torch" if kernels == "triton" and m > 8 else kernels), target, m,
                       position, max_seq, graphs) for m in rows}
    fns["draft"] = _step_fn(rows_step(draft, kernels), draft, 1, position, max_seq, graphs)
    best: dict = {}
    with torch.no_grad():
        for _ in range(passes):
            for key, fn in fns.items():
                t = bench.timeit(fn, warmup=2, repeat=max(1, repeat // passes), device=device).median_s * 1e3
                best[key] = min(best.get(key, t), t)
    out = {"target_ms": {m: best[m] for m in rows}, "draft_ms": best["draft"], "kernels": kernels, "graphs": graphs,
           "position": position}
    out["c"] = out["draft_ms"] / out["target_ms"][min(rows)]
    return out


def hf_speed(hf_target, prompts: list[list[int]], n: int, *, assistant=None, num_assistant_tokens: int | None = None,
             repeat: int = 3) -> dict:
    """HF `generate` (greedy) on the same prompts: plain, or assisted by `assistant` (HF's default
    schedule for the number of draft tokens, or a constant `num_assistant_tokens`)."""
    device = next(hf_target.parameters()).device
    kwargs = {"do_sample": False, "pad_token_id": 0}
    if assistant is not None:
        kwargs["assistant_model"] = assistant
        if num_assistant_tokens is not None:
            kwargs.update(num_assistant_tokens=num_assistant_tokens, num_assistant_tokens_schedule="constant")

    @torch.no_grad()
    def generate(prompt, m):
        ids = torch.tensor([prompt], device=device)
        out = hf_target.generate(ids, max_new_tokens=m, min_new_tokens=m, **kwargs)
        return out[0, len(prompt):].tolist()
    return decode_speed(generate, prompts, n, repeat, device)


def live_run(target: llama.Transformer, draft: llama.Transformer, k: int, prompt: list[int], n: int = 32, *,
             repeat: int = 1, kernels="torch", step_repeat: int = 5) -> dict:
    """A small run on this machine: the target alone (the decoder's rounds with k = 0) and speculation
    with `draft` at k on one prompt, the step costs (c), Leviathan et al.'s prediction from this run's
    alpha and c, and which draft proposals each new token came from."""
    device = target.tok_embeddings.weight.device
    alone = SpeculativeDecoder(target, None, 0, max_seq=len(prompt) + n + 16, kernels=kernels)
    base = decode_speed(alone.generate, [prompt], n, repeat, device)
    run = speculative_run(target, draft, k, [prompt], n, repeat=repeat, max_seq=len(prompt) + n + k + 16,
                          kernels=kernels)
    costs = step_costs(target, draft, rows=(1, k + 1), kernels=kernels, position=len(prompt),
                       max_seq=len(prompt) + n + k + 16, repeat=step_repeat)
    dec = SpeculativeDecoder(target, draft, k, max_seq=len(prompt) + n + k + 16, kernels=kernels)
    tokens = dec.generate(prompt, n, trace=True)
    return {"k": k, "tokens": tokens, "provenance": dec.provenance(n), "base_tokens_per_s": base["tokens_per_s"],
            "row": {key: v for key, v in run.items() if key != "outputs"}, "costs": costs,
            "speedup": run["tokens_per_s"] / base["tokens_per_s"],
            "predicted_speedup": rules.predicted_speedup(run["alpha"], k, costs["c"]),
            "same_tokens_as_target": run["outputs"][0] == base["outputs"][0]}

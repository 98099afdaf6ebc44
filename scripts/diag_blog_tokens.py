"""Why do the course engine and HF continuous batching give different greedy tokens on the blog
case's Llama-3-8B shape (h200/async.json: agreement 0.2%)? Compare, on the same seeded weights and
prompts: prefill logits (engine model vs HF forward), the reference loop `llama.generate`, the
engine, HF `generate` and HF continuous batching, first token and all tokens; in bf16 and fp32.
Usage on a GPU: python scripts/diag_blog_tokens.py [N_PROMPTS] [NEW]"""
import sys
import time

import torch

from course_kit.benchmarks import async_blog as ab
from course_kit.benchmarks.async_engine import workload
from course_kit.engine import SamplingParams
from course_kit.streams.async_loop import AsyncEngine
from course_kit.models import llama
from course_kit.models.hf import model_to_hf

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
NEW = int(sys.argv[2]) if len(sys.argv) > 2 else 8
DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu":    # a dry run of this script: the same config, shrunk
    _cfg = dict(ab.LLAMA3_8B, dim=256, n_layers=2, n_heads=8, n_kv_heads=2, ffn_dim=512)
    ab.build_model = lambda name, dt, dev: llama.Transformer.from_config(
        llama.ModelConfig(**_cfg, rope_scaling=dict(llama.LLAMA3_SCALING)), seed=0, dtype=dt, device=dev)


def agree(a, b, first=False):
    if first:
        return sum(x[0] == y[0] for x, y in zip(a, b)) / len(a)
    return ab.agreement(a, b)


import os
PLAN = [(getattr(torch, d), int(n)) for d, n in (x.split(":") for x in
        os.environ.get("DIAG_PLAN", "bfloat16:32,float32:32").split(","))]   # dtype:layers
LOGITS_ONLY = bool(os.environ.get("DIAG_LOGITS_ONLY"))
_build = ab.build_model
for dtype, layers in PLAN:
    t0 = time.time()
    ab.LLAMA3_8B["n_layers"] = layers
    model = _build("llama-3-8b", dtype, DEV)
    prompts = workload(N, 128, 512, model.config.vocab_size, seed=1)
    hf = model_to_hf(model)
    print(f"== {dtype}, {layers} layers: built in {time.time() - t0:.0f} s; HF attn {hf.config._attn_implementation}, "
          f"dtype {next(hf.parameters()).dtype}, rope {getattr(hf.config, 'rope_parameters', None)}", flush=True)
    with torch.no_grad():
        for i in range(min(3, N)):
            ids = torch.tensor([prompts[i]], device=DEV)
            a, b = model(ids)[0, -1].float(), hf(ids).logits[0, -1].float()
            top2 = b.topk(2).values
            print(f"prompt {i} len {len(prompts[i])}: max|diff| {(a - b).abs().max().item():.4g}, logit std "
                  f"{b.std().item():.4g}, HF top1-top2 margin {(top2[0] - top2[1]).item():.4g}, argmax "
                  f"{a.argmax().item()} vs {b.argmax().item()}", flush=True)
    if LOGITS_ONLY:
        del model, hf
        torch.cuda.empty_cache()
        continue
    runs = {"llama.generate": llama.generate(model, prompts, NEW)}
    eng = AsyncEngine(model, mode="sync", policy="continuous", max_num_seqs=N, max_num_batched_tokens=2048,
                      max_model_len=512 + NEW)
    runs["engine"] = [o.tokens for o in eng.generate(prompts, SamplingParams(max_new_tokens=NEW, ignore_eos=True))]
    del eng
    with torch.no_grad():
        runs["HF generate"] = [hf.generate(torch.tensor([p], device=DEV), max_new_tokens=NEW, min_new_tokens=NEW,
                                           do_sample=False)[0, len(p):].tolist() for p in prompts]
    if dtype == torch.bfloat16 and not os.environ.get("DIAG_NO_CB"):
        try:
            run, used = ab.hf_runner(hf, N, False, (512, NEW, N))
            runs["HF CB sync"] = run(prompts, NEW)
            print("HF CB settings", used)
        except Exception as err:  # noqa: BLE001
            print("HF CB failed:", type(err).__name__, err)
    names = list(runs)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            print(f"{x:>15} vs {y:<15} first token {agree(runs[x], runs[y], True):.2f}, all {agree(runs[x], runs[y]):.3f}")
    del model, hf, runs
    torch.cuda.empty_cache()

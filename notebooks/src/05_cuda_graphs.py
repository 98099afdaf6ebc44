# %% [markdown]
# # 05 · CUDA graphs: capture the decode step once, replay it for every token
#
# At batch 1 a decode step of a small language model is hundreds of tiny kernels, each reading a
# few megabytes. The GPU finishes each one in microseconds, and then waits for Python and the
# driver to launch the next. A **CUDA graph** records the whole sequence of launches once and
# replays it with a single call, so the launch cost is paid once per step instead of once per
# kernel. The price is rigidity: a graph replays exactly the shapes, memory addresses and work it
# captured. This notebook measures the launch overhead, builds a graph runner for the course
# model's decode step (one graph per batch size, static buffers, a static KV cache, padding), shows
# the pitfalls by triggering them, and compares with `torch.compile(mode="reduce-overhead")`.
#
# {{BADGES}}
#
# **What you will learn**
# - what a kernel launch costs, eagerly and inside a graph replay;
# - how to capture and replay a decode step: warm-up, static inputs and outputs, a shared memory pool;
# - why a runner captures one graph per batch size and pads to the next one;
# - the four classic pitfalls (host syncs, dynamic shapes, allocations, RNG) and their fixes;
# - how close graph-replayed decode gets to the memory-bandwidth roofline of notebook 00;
# - how hand-written Triton kernels (one matrix-vector kernel with the small ops folded in, and
#   programmatic dependent launch) bring the batch-1 step closer to it.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# On a GPU the course model runs in its `smollm-135m` shape (random weights, the real sizes); on a
# CPU, and in CI, the `tiny` shape. The GPU-only figures then come from the recorded H200 run.

# %% {"tags": ["parameters"]}
P = device.defaults()
GPU = P["device"] == "cuda"
PRESET = "smollm-135m" if GPU and not P["smoke"] else "tiny"
MAX_BATCH = 8 if GPU else 4
MAX_SEQ = 512 if GPU else 64
N_KERNELS = 1000 if GPU else (100 if P["smoke"] else 300)
REPEAT = 5 if P["smoke"] else 30
NEW_TOKENS = 32 if GPU else 8
RUN_COMPILE = GPU and P["size"] == "full"   # one torch.compile of the whole step: about a minute

# %%
import torch

from course_kit import bench, narrate, notebook, reference
from course_kit.benchmarks import lesson_traces
from course_kit.cuda_graphs import buckets, pitfalls, runner as cg
from course_kit.engine import trace
from course_kit.attention import availability
from course_kit.benchmarks.cuda_graphs import agreement
from course_kit.cuda_graphs.explain import (describe_profile, explain_graph_lead, explain_hbm, explain_kernels,
                                            explain_reduce_overhead, explain_reduce_overhead_live, forms_table)
from course_kit.cuda_graphs.trace_step import explain_trace_step, left_out_by_record
from course_kit.models import llama, sampling
from course_kit.notebook import md, show_source
from course_kit.plots import cuda_graphs as cplots, profiling as pplots
from course_kit.profiling import explain as pexplain, files as tfiles, step_table, trace as ptrace
from course_kit.widgets import show
from course_kit.widgets.cuda_graphs import GraphBuckets

if not GPU:
    torch.set_num_threads(1)  # tiny tensors: one thread avoids contention on a shared CPU
DTYPE = P["dtype"]   # bf16 on sm_80+, fp16 on a T4 (whose bf16 is emulated), fp32 on a CPU
REF = notebook.record("cuda_graphs", "h200", quiet=True)   # the H200 record, compared with yours
SAME_GPU = REF if GPU and reference.gpu_slug() == "h200" else None   # a live figure's own record
print(f"model {PRESET} in {device.dtype_name(DTYPE)} on {P['device']}; H200 record: {'yes' if REF else 'not yet'}")

# %% [markdown]
# ## 1. What a launch costs
#
# The microbenchmark launches `N` tiny kernels (an in-place add on one number) one after the
# other from Python, then captures the same `N` launches into one graph and replays it. Each
# kernel does almost nothing, so the time per kernel *is* the launch overhead: Python, the
# PyTorch dispatcher and the driver when eager; only the GPU's own scheduling inside a replay.

# %%
show_source(cg.launch_overhead)

# %%
own_launch = cg.launch_overhead(N_KERNELS, repeat=REPEAT)
own = {"results": [{"name": "launch", **own_launch}], "summary": {}}
text = f"Eagerly, one tiny kernel costs **{own_launch['eager_us_per_kernel']:.2f} µs** here ({P['device']})."
heads = []
if own_launch["ratio"]:
    h = notebook.headline("launch ratio (eager / replayed kernel)", own_launch["ratio"],
                          SAME_GPU["summary"]["launch_ratio"] if SAME_GPU else None, "x", 2)
    heads.append(h)
    text += (f" Inside one graph replay it costs **{own_launch['graph_us_per_kernel']:.2f} µs**: a replayed "
             f"kernel ran **{narrate.ratio_words(own_launch['ratio'])}** an eager one (the ratio: {h.text}).")
if REF:
    r = REF["summary"]
    text += (f" Recorded on the reference {REF['environment']['gpu']}: a replayed kernel ran "
             f"**{narrate.ratio_words(r['launch_ratio'])}** an eager one.")
md(text, headlines=heads)

# %%
records = [("yours", own)] + ([("H200 reference", REF)] if REF else [])
cplots.launch_figure(records)

# %% [markdown]
# ## 2. Capture and replay
#
# `capture` is the whole recipe in a few lines:
# 1. **warm up on a side stream**: the first calls allocate memory, pick cuBLAS algorithms and
#    compile kernels, none of which may happen during capture;
# 2. **capture** one call under `torch.cuda.graph(...)`: nothing runs, the launches are recorded,
#    and memory allocated meanwhile comes from the graph's private **pool**;
# 3. **replay**: the recorded kernels run again, on the same addresses. New inputs must be *copied
#    into* the captured input tensors; results are read from the captured output tensors.

# %%
show_source(cg.capture)

# %%
if GPU:
    static_x = torch.ones(4, device="cuda")
    out = {}
    g = cg.capture(lambda: out.__setitem__("y", static_x * 2 + 1))
    static_x.copy_(torch.arange(4.0, device="cuda"))   # new input: copied into the captured buffer
    g.replay()
    md(f"Replay after copying `[0, 1, 2, 3]` into the static input gives `{out['y'].tolist()}` "
       f"(expected `{(torch.arange(4.0) * 2 + 1).tolist()}`).")
else:
    md("No CUDA GPU here: capture and replay need one. The runner below falls back to running the "
       "same padded step eagerly, so its logic (buffers, padding, sampling) still runs.")

# %% [markdown]
# ## 3. A graph runner for the decode step
#
# The course model's `decode(tokens[B], positions[B], cache)` was written for this: static shapes,
# no host synchronisation (positions stay on the device, the KV cache write is an indexed store,
# attention masks keys past each row's position instead of slicing). `DecodeGraphRunner`
# - owns a `StaticKVCache` and static buffers for tokens, positions, sampling noise and the chosen tokens;
# - captures one graph per batch size in `capture_sizes(max_batch)`, **largest first, into one shared
#   memory pool**, so the smaller graphs reuse the largest one's memory instead of adding their own;
# - pads a batch of `B` rows up to the next captured size (padding rows decode token 0 into cache
#   rows nobody reads);
# - samples inside the graph with the Gumbel-max trick, on noise filled *before* each replay from a
#   seeded generator: no `multinomial`, no sync, and reproducible.

# %%
show_source(cg.DecodeGraphRunner)

# %%
show_source(llama.Transformer.decode)

# %% [markdown]
# Sampling inside a graph cannot call `torch.multinomial` with a fresh generator state, nor look at
# the probabilities on the host. The Gumbel-max trick needs only elementwise operations and an
# argmax: `argmax(logits / T - log(-log(u)))` with `u` uniform picks token `i` with probability
# `softmax(logits / T)[i]`. The runner fills `u` from a seeded generator before each replay.

# %%
show_source(sampling.sample)

# %%
model = llama.Transformer.from_preset(PRESET, seed=0, dtype=DTYPE, device=P["device"])
runner = cg.DecodeGraphRunner(model, max_batch=MAX_BATCH, max_seq=MAX_SEQ)
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(1, model.config.vocab_size, (n,), generator=g).tolist() for n in (5, 17, 9)]
graph_tokens = runner.generate(prompts, NEW_TOKENS)
eager_tokens = cg.eager_generate(model, prompts, NEW_TOKENS, max_seq=MAX_SEQ, max_batch=MAX_BATCH)
same = graph_tokens == eager_tokens
md(f"{len(prompts)} prompts, padded to the graph of size **{cg.pick_graph(len(prompts), runner.sizes)}** "
   f"(captured sizes: {runner.sizes}; graphs {'replayed' if runner.use_graphs else 'not available, eager step'}). "
   f"Greedy tokens of the runner and of the eager step are **{'identical' if same else 'different'}** "
   f"over {NEW_TOKENS} new tokens.")

# %%
cplots.padding_figure(cg.padding_plan(list(range(1, MAX_BATCH + 1)), runner.sizes))

# %% [markdown]
# ### Tokens per second by batch size
#
# Each point is the median time of one decode step (including copying the batch into the static
# buffers), as tokens per second. Below the chart: how the graph's lead over the eager step moves
# from the smallest batch to the largest, and how its batch-1 lead compares with the launch ratio of
# section 1, each computed from the points (this run's, and the record's).

# %%
rows = []
eager_runner = cg.DecodeGraphRunner(model, MAX_BATCH, MAX_SEQ, use_graphs=False, verbose=False)
variants = [("eager", eager_runner)] + ([("graph", runner)] if GPU else [])
for b in runner.sizes:
    for name, r in variants:
        r.generate([[1] * 8] * b, 2)     # prefill rows 0..b-1
        tokens = torch.ones(b, dtype=torch.long, device=P["device"])
        positions = torch.full((b,), 9, device=P["device"])
        t = bench.timeit(lambda: r.step(tokens, positions), warmup=2, repeat=REPEAT)
        rows.append({"variant": name, "batch": b, "tokens_per_s": b / t.median_s, "preset": PRESET,
                     "ms_per_step": t.median_s * 1e3})
mine = {"results": rows, "summary": {"decode_bytes": {"preset": PRESET}}}
cplots.decode_figure([("yours", mine)] + ([("H200 reference", REF)] if REF else []))

# %%
by = {(r["variant"], r["batch"]): r for r in rows}
text = f"This run, batch 1: eager step **{by[('eager', 1)]['ms_per_step']:.2f} ms**"
heads = []
if GPU:
    h = notebook.headline("graph over eager, batch 1", by[("eager", 1)]["ms_per_step"] / by[("graph", 1)]["ms_per_step"],
                          SAME_GPU["summary"].get("graph_vs_eager_b1") if SAME_GPU else None, "x", 2)
    heads.append(h)
    text += (f", graph replay **{by[('graph', 1)]['ms_per_step']:.3f} ms**: the replay ran "
             f"**{narrate.speed(by[('graph', 1)]['ms_per_step'], by[('eager', 1)]['ms_per_step'])}** the eager step "
             f"({h.text})")
text += "."
if REF:
    s = REF["summary"]
    text += (f" Recorded on the reference H200 ({s['decode_bytes']['preset']}, {s['dtype']}), batch 1: the graph "
             f"runner ran **{narrate.ratio_words(s['graph_vs_eager_b1'])}** the eager step, and the best runner "
             f"({s['runner_variant']}) decoded **{s['runner_tokens_per_s_b1']:,.0f} tokens/s**, "
             f"**{narrate.ratio_words(s['runner_vs_hf_generate'])}** HF `generate` "
             f"({s['hf_generate_tokens_per_s_b1']:,.0f} tokens/s) on the same weights.")
md(text, headlines=heads)
md(explain_graph_lead(rows, own_launch["ratio"], "This run") + (
    "\n\n" + explain_graph_lead(REF["results"], REF["summary"]["launch_ratio"], "Recorded on the reference H200",
                                 REF["summary"]["decode_bytes"]["preset"]) if REF else ""))

# %% [markdown]
# ## 4. Fewer kernels: fusing before capturing
#
# A graph removes the *launch* cost of each kernel, not the kernel. Each block of the eager step
# runs a dozen small elementwise kernels (RMSNorm alone is several). `fuse_layers` compiles each
# transformer block with Inductor, which fuses them; since all blocks share code and shapes, one
# compile serves every layer (regional compilation). The fused runner replays those kernels.
# `torch.compile(mode="reduce-overhead")` does both in one call: Inductor fusion plus CUDA graphs
# (its "CUDA graph trees"). The KV cache is mutated in place, so it is marked as a static address.

# %%
show_source(cg.fuse_layers)
show_source(cg.reduce_overhead_step)

# %%
if RUN_COMPILE:
    cache = llama.StaticKVCache(model.config, 1, MAX_SEQ, DTYPE, "cuda")
    model.prefill(torch.ones(1, 8, dtype=torch.long, device="cuda"), cache)
    step = cg.reduce_overhead_step(model, cache)
    tok, pos = torch.ones(1, dtype=torch.long, device="cuda"), torch.full((1,), 9, device="cuda")
    t_ro = bench.timeit(lambda: step(tok, pos).argmax(-1), warmup=3, repeat=REPEAT)
ref = notebook.record("cuda_graphs")
if RUN_COMPILE:
    # like with like: this run's pair, then the record's pair, each labelled (issue 19 item 5)
    rec_rows = {r["variant"]: r for r in (ref["results"] if ref else []) if r.get("batch") == 1
                and r.get("preset") == PRESET and r.get("variant") in ("reduce_overhead", "graph")}
    md("**Live against recorded, each with its own graph runner:** " + explain_reduce_overhead_live(
        t_ro.median_s * 1e3, by[("graph", 1)]["ms_per_step"],
        rec_rows.get("reduce_overhead", {}).get("ms_per_step"), rec_rows.get("graph", {}).get("ms_per_step"),
        gpu=f"the reference {ref['environment'].get('gpu', 'GPU')}" if ref else "the reference GPU"))
if ref:
    s = ref["summary"]
    eager_count = s['profile_eager_b1'].get('kernels_per_step')
    eager_trace = next((r for r in (notebook.record("traces", quiet=True) or {}).get("results", [])
                        if r.get("name") == "05-eager"), None)
    left_out = left_out_by_record(eager_trace, eager_count, tfiles.load("05-eager")) if eager_trace else None
    md(f"Recorded on the reference H200, batch 1: kernels per step, from the profiler: eager step "
       f"**{eager_count if eager_count is not None else float('nan'):.0f}**, fused graph "
       f"**{s['profile_fused_graph_b1'].get('kernels_per_step', float('nan')):.0f}**"
       + (f" (counted by a profile that skips kernels whose names hold a `#`: the H200's kept trace of the same "
          f"eager step has {left_out:.0f} kernels and copies more; section 5 shows it)." if left_out else "."))
    # Computed from the record's own rows and profiles (older records included), as the bench does.
    md("**The recorded comparison, explained from the record:** " + explain_reduce_overhead(s, ref["results"]))

# %% [markdown]
# ## 5. Against the bandwidth roofline
#
# A decode step must read every weight once (for the whole batch) and each row's K/V. Divided by
# the measured copy bandwidth of the same run, that is the fastest a step could possibly be: the
# dashed ceiling. At batch 1 the weights dominate; the runner's distance to the ceiling is what is
# left of overheads. For the `llama-1b` shape the record also states the bytes moved per token
# over the time per token, as a fraction of the copy bandwidth.

# %%
if ref:
    fig = cplots.roofline_decode_figure(ref)
    s = ref["summary"]
    if "hbm_fraction" in s:
        md(f"Reference H200, `llama-1b` at batch 1 ({s['hbm_variant']}): **{s['big_ms_per_token']:.3f} ms** per "
           f"token, **{s['hbm_gbs']:,.0f} GB/s** of weights and K/V read, **{s['hbm_fraction']:.0%}** of the "
           f"**{s['copy_gbs']:,.0f} GB/s** copy bandwidth measured in the same run.")
    if "hbm_fraction" in s:
        md("**Where the llama-1b step's time goes, from the record's profile:** " + explain_hbm(s, ref["results"]))
    if any((s.get(k) or {}).get("top") for k in ("profile_fused_graph_b1", "profile_reduce_overhead_b1",
                                                  "profile_big_b1")):
        md("The costliest kernels per step, from the profiles of the same run:")
        for key in ("profile_fused_graph_b1", "profile_reduce_overhead_b1", "profile_big_b1"):
            prof = s.get(key) or {}
            if prof.get("top"):
                md(describe_profile(key, s, ref["results"]) + " Costliest:\n\n"
                   + "\n".join(f"- `{k['kernel']}`: {pexplain.counted(k['calls_per_step'], 'call')}, {k['us_per_step']:.0f} µs"
                                for k in prof["top"]))
else:
    fig = None
    md("No reference record yet: run `course-kit bench cuda_graphs` on a GPU to create it.")
fig

# %% [markdown]
# ### Fewer, wider kernels: the step written in Triton
#
# After graphs and fusion, what is left is how fast each kernel reads its weights, and how many
# kernels a layer launches (the record above says both for the fused runner).
# `course_kit.cuda_graphs.decode_kernels` rewrites the step for small batches (at most 8 rows):
# - **one matrix-vector kernel**, `gemv`. Each program owns a few rows of W and reads them in 16 KiB
#   tiles, to keep enough bytes in flight on every SM. RMSNorm is folded into its load of x, the
#   residual add into its store, and SwiGLU into w13's store (each program takes a gate row and its
#   up row): those cost no kernel of their own;
# - **the q/k/v product does RoPE and the K/V append in its store**: each program takes RoPE's row
#   pairs (i, i + D/2) of wqkv, so it holds both halves of every pair it rotates. Then notebook 06's
#   paged decode-attention kernel reads the static cache (a cache row is a paged cache with one block);
# - **the logits product keeps each program's largest logit** in its store, so the greedy token
#   costs one small kernel;
# - on Hopper, every kernel is launched with **programmatic dependent launch** (PDL): a kernel starts,
#   and reads its first weights, while the one before it is still finishing.
#
# The step keeps `model.decode`'s signature and reads the same cache, so the runner captures it as
# before: `DecodeGraphRunner(model, kernels="triton")`. Without a GPU the kernels run in Triton's
# interpreter, on a tiny model.

# %%
ok_triton, why_triton = availability.triton_status()
if ok_triton:
    from course_kit.cuda_graphs.decode_kernels import (gemv as dk_gemv, qkv_rope as dk_qkv_rope, step as dk_step)
    show_source(dk_gemv.gemv_rows.fn)
    show_source(dk_gemv._gemv_kernel.fn)
    show_source(dk_qkv_rope._qkv_rope_kernel.fn)
    show_source(dk_step.TritonDecodeStep.__call__)
else:
    md(f"Triton cannot run here ({why_triton}): the sources and the live check are skipped.")

# %%
if ok_triton:
    # one step from the same cache contents: the model's own decode against the Triton step
    caches = [llama.StaticKVCache(model.config, 1, 64, DTYPE, P["device"]) for _ in range(2)]
    prompt = torch.randint(1, model.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(3))
    for c in caches:
        model.prefill(prompt.to(P["device"]), c)
    tok, pos = torch.tensor([5], device=P["device"]), torch.tensor([9], device=P["device"])
    want_logits = model.decode(tok, pos, caches[0])
    got_logits = dk_step.TritonDecodeStep(model)(tok, pos, caches[1])
    gap = (got_logits.float() - want_logits.float()).abs().max().item()
    scale = want_logits.float().abs().max().item()
    md(f"One decode step of `{model.config.name}` ({device.dtype_name(DTYPE)}): the "
       f"Triton step's logits differ from the model's own by at most **{gap:.2e}** (the logits reach {scale:.2f}); "
       f"greedy token **{'the same' if got_logits.argmax(-1).item() == want_logits.argmax(-1).item() else 'different'}**.")
if ok_triton and GPU:
    triton_runner = cg.DecodeGraphRunner(model, max_batch=MAX_BATCH, max_seq=MAX_SEQ, kernels="triton", verbose=False)
    triton_tokens = triton_runner.generate(prompts, NEW_TOKENS)
    triton_runner.generate([[1] * 8], 2)
    one_tok, one_pos = torch.ones(1, dtype=torch.long, device="cuda"), torch.full((1,), 9, device="cuda")
    t_triton = bench.timeit(lambda: triton_runner.step(one_tok, one_pos), warmup=3, repeat=REPEAT)
    same_share = agreement(triton_tokens, graph_tokens)
    md(f"This run, batch 1: the Triton step **{t_triton.median_s * 1e3:.3f} ms**, the graph runner of the model's own "
       f"step **{by[('graph', 1)]['ms_per_step']:.3f} ms**: the Triton step ran "
       f"**{narrate.speed(t_triton.median_s * 1e3, by[('graph', 1)]['ms_per_step'])}** it (PDL "
       f"{'on' if triton_runner.decode.pdl else 'off: this GPU has no programmatic dependent launch'}). "
       f"Greedy tokens agree with the graph runner's at **{same_share:.0%}** of positions "
       f"({device.dtype_name(DTYPE)}: a near-tie can tip either way once the sums are added in another order).")

# %%
if REF and "big_profiles" in REF["summary"]:   # records that time the step in all its forms
    md("**Recorded on the reference H200, the llama-1b step one change at a time:** "
       + explain_kernels(REF["summary"], REF["results"]))
    cell = lambda v, fmt: "n/a" if v is None else format(v, fmt)  # noqa: E731
    md("| form | ms per token | kernels | GPU busy (µs) | GB/s read | of copy |\n|---|---|---|---|---|---|\n" + "\n".join(
        f"| {t['form']} | {t['ms_per_token']:.3f} | {cell(t['kernels'], '.0f')} | {cell(t['gpu_busy_us'], '.0f')} "
        f"| {cell(t['gbs'], ',.0f')} | {cell(t['of_copy'], '.0%')} |" for t in forms_table(REF["summary"], REF["results"]))
       + "\n\n(GPU busy is left out under PDL: there a kernel's profiled time includes its wait for the one before.)")
    fp32 = REF["summary"].get("triton_fp32_vs_hf") or {}
    if fp32:
        md(f"In float32 the Triton step's greedy tokens were **{'identical to' if fp32['identical'] else 'different from'}** "
           f"HF transformers' on the same weights ({fp32['prompts']} prompts, {fp32['new_tokens']} new tokens each).")
    forms_fig = cplots.decode_forms_figure(REF)
else:
    forms_fig = None
    md("The H200 record has no Triton forms of the step yet: run `course-kit bench cuda_graphs` on a GPU.")
forms_fig

# %% [markdown]
# **The same step on int8 and int4 weights:** `DecodeGraphRunner(model, kernels="triton", weights="int4")` runs these kernels on packed codes (`cuda_graphs/quantised.py`).
# Notebook 01's weight-only section measures the bytes it saves per token, what it costs in quality, and the batch at which quantisation stops paying.

# %% [markdown]
# ### What the profiler sees
#
# (This section comes after the Triton cells on purpose: in a Jupyter kernel, once `torch.profiler` has
# run, Triton's CPU interpreter fails on the step's kernels, so on a CPU re-run the cells above first.)
#
# Timings say *how long* a step took; a profiler trace says *where the time went*. `torch.profiler`
# records, from the GPU itself (CUPTI), when every kernel ran; `profiling.profile_steps` runs the
# step a few times unprofiled, then again under the profiler with each call marked `step k`, and
# `profiling.summarize` reads the trace: kernels per step, the **launch gaps** between them (the GPU
# waiting for the host to launch the next kernel), the GPU's idle share of the window, and the
# kernels that cost the most. On a CPU the trace holds CPU operators instead of kernels: the same
# arithmetic then measures the time no operator ran (Python and dispatch overhead).

# %%
show_source(ptrace.summarize)

# %%
own_prof = lesson_traces.profile_lesson("05", P)       # this machine: eager (and a CUDA graph on a GPU)
saved = [lesson_traces.save_row(r, "traces") for r in own_prof]
rec_traces = notebook.record("traces")                  # the H200's kept traces (banner on a CPU)
ref_prof = [r for r in (rec_traces or {}).get("results", []) if r.get("lesson") == "05" and r.get("variant") != "exercise"]
ref_kept = {r["name"]: tfiles.load(r["name"]) for r in ref_prof}
runs = {f"this machine: {r['what']}": ptrace.gantt_rows(r["trace"], steps=2) for r in own_prof}
runs.update({f"H200 record: {r['what']}": ptrace.gantt_rows(ref_kept[r["name"]], steps=2)
             for r in ref_prof if ref_kept.get(r["name"])})
if not ref_prof:
    md("No H200 trace is recorded yet (`course-kit bench traces` on the H200 records it): below is this machine's alone.")
pplots.gantt_pair(runs, "Two decode steps, kernel by kernel (red: gaps inside a step)",
                  thresholds={n: (1.0 if n.startswith("H200") or GPU else 5.0) for n in runs})

# %%
md("\n\n".join([pexplain.describe(r, f"This machine, {r['what']}") for r in own_prof]
                 + [pexplain.describe(r, f"The H200 record, {r['what']}") for r in ref_prof]
                 + ([pexplain.compare(*ref_prof[:2], names=("eager", "the graph"))] if len(ref_prof) >= 2 else [])
                 + [pexplain.how_to_open(p) for p in saved]))
# The record's trace beside the cuda_graphs record, whose kernel count and step time differ from it
ref_by = {r["variant"]: r for r in ref_prof}
if "eager" in ref_by and ref:
    md(explain_trace_step(ref_by["eager"], ref_by.get("graph"), ref["summary"], ref["results"],
                          ref_kept.get(ref_by["eager"]["name"])))

# %%
pplots.top_kernels(ref_prof[0] if ref_prof else own_prof[0],
                   f"Costliest {'kernels' if ref_prof or GPU else 'operators'} per step: "
                   f"{(ref_prof or own_prof)[0]['what']}" + (" (H200 record)" if ref_prof else " (this machine)"))

# %% [markdown]
# ## 6. Pitfalls
#
# Each of these is demonstrated on a GPU in a separate process (a failed capture can leave the
# CUDA context unusable). Without a GPU the table shows what the H200 run found.

# %%
show_source(pitfalls._pitfall_dynamic_shapes)

# %%
pits = pitfalls.run_pitfalls() if GPU else (ref["summary"]["pitfalls"] if ref else pitfalls.run_pitfalls())
cplots.pitfalls_table(pits)

# %% [markdown]
# ## 7. Choosing the buckets for a trace
#
# A runner cannot capture every batch size: each graph costs capture time and memory. Which sizes to
# capture depends on the batches that really arrive. Below, the requests of the recorded trace
# `data/traces/chat_bursty.jsonl` each hold one of `MAX_BATCH` decode slots for their output length
# (10 ms per decode step), which gives the batch size of every step. Tick the sizes to capture: each
# step replays the smallest captured size that holds it (padding the rest), or runs eagerly when it is
# larger than all of them. The step times per batch size are measured ones: this run's on a GPU, the
# H200 record's otherwise.

# %%
trace_reqs = trace.load("chat_bursty", model.config.vocab_size, seed=0)
trace_batches = buckets.batch_trace([r.arrival for r in trace_reqs], [r.max_new_tokens for r in trace_reqs],
                                    max_batch=MAX_BATCH, step_s=0.01)
if GPU:
    times, source = rows, f"this run ({PRESET}, {P['device']})"
elif REF:
    times, source = REF["results"], f"H200 record ({REF['summary']['decode_bytes']['preset']})"
else:
    times, source = rows, f"this run ({PRESET}, eager only: replay assumed equal)"
src_preset = None if times is rows else REF["summary"]["decode_bytes"]["preset"]
eager_ms = buckets.step_times(times, "eager", src_preset)
graph_ms = buckets.step_times(times, "graph", src_preset) or eager_ms
bucket_widget = GraphBuckets(trace_batches, eager_ms, graph_ms, max_batch=MAX_BATCH,
                             chosen=[b for b in (1, 2, 4, 8) if b <= MAX_BATCH], source=source)
show(bucket_widget.widget, bucket_widget.figure, "the bucket widget")

# %% [markdown]
# ## Exercise 05.choose_buckets: the best k graph sizes for a trace
#
# The widget lets you try bucket choices by hand. Write `choose_buckets(batches, k)` that finds the
# best one: `batches` is the batch size of every decode step of a trace (ints >= 1), and you may
# capture at most `k` graphs. Return a list of at most `k` sizes such that every batch fits in one of
# them (no step falls back to eager), with the fewest **padding rows** over the whole trace, each
# step replaying the smallest size that holds it. When several choices tie, any of them is right.
#
# The check runs your function on traces you have not seen (up to a few thousand steps, batch sizes
# up to 32, `k` from 1 to 6) and compares its padding with the best one found by brute force.
# Trying every set of `k` sizes works for small cases, but think of something that scales: sorted
# distinct sizes, their counts, and a choice that only depends on the previous chosen size.

# %% {"course_kit": {"exercise": "05.choose_buckets", "role": "solution", "points": 3}}
def choose_buckets(batches, k):
    ### BEGIN SOLUTION
    from collections import Counter
    counts = Counter(batches)
    sizes = sorted(counts)
    n = len(sizes)
    k = min(k, n)

    def cost(i, j):   # padding when sizes[i..j] all replay the graph of size sizes[j]
        return sum(counts[sizes[t]] * (sizes[j] - sizes[t]) for t in range(i, j + 1))

    inf = float("inf")
    # best[c][j]: least padding covering sizes[0..j] with c graphs, the last one being sizes[j]
    best = [[inf] * n for _ in range(k + 1)]
    back = [[-1] * n for _ in range(k + 1)]
    for j in range(n):
        best[1][j] = cost(0, j)
    for c in range(2, k + 1):
        for j in range(n):
            for i in range(j):
                value = best[c - 1][i] + cost(i + 1, j)
                if value < best[c][j]:
                    best[c][j], back[c][j] = value, i
    c = min(range(1, k + 1), key=lambda c: best[c][n - 1])
    chosen, j = [], n - 1
    while j >= 0 and c >= 1:
        chosen.append(sizes[j])
        j, c = back[c][j], c - 1
    return sorted(chosen)
    ### END SOLUTION

# %% {"course_kit": {"exercise": "05.choose_buckets", "role": "check"}}
from course_kit import grading
grading.check("05.choose_buckets", choose_buckets)

# %% {"course_kit": {"exercise": "05.choose_buckets", "role": "hidden"}}
grading.check("05.choose_buckets_hidden", choose_buckets)

# %% [markdown]
# ## Exercise 05.bucket_waste: predict, measure and explain the padding of powers of two
#
# The widget started from the buckets `[1, 2, 4, 8]`. Here is a trace you have not seen: 300
# requests arriving at 10 per second (Poisson), each decoding 5 to 60 tokens, in 8 slots at 10 ms per
# step (`UNSEEN`, one batch size per step).
#
# 1. **Predict**, before measuring: what share of the rows computed over `UNSEEN` with `SIZES` will
#    be padding? Record `PREDICTED_WASTE` (a fraction) and run the cell once before step 2. The check
#    requires the prediction but does not grade its accuracy.
# 2. **Measure** `WASTE`, the padding waste (`padding rows / (real rows + padding rows)`), with
#    `buckets.bucket_cost`.
# 3. **Explain**: `WORST_BUCKET`, the size in `SIZES` whose steps add the most padding rows, and
#    `EXTRA`, the one size (1 to 8, not in `SIZES`) whose addition removes the most padding rows.

# %% {"course_kit": {"exercise": "05.bucket_waste", "role": "solution", "points": 2, "task": "record PREDICTED_WASTE, then measure WASTE, then answer WORST_BUCKET and EXTRA (see the task above)"}}
arrivals = trace.poisson_arrivals(300, 10.0, seed=5)
lens = [r.max_new_tokens for r in trace.synthetic(300, (1, 1), (5, 60), 100, seed=5)]
UNSEEN = buckets.batch_trace(arrivals, lens, max_batch=8, step_s=0.01)
SIZES = [1, 2, 4, 8]
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTED_WASTE = 0.10
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
cost = buckets.bucket_cost(UNSEEN, SIZES, {1: 1.0}, {1: 1.0})
WASTE = cost["padding_waste"]
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
from collections import Counter
per_bucket = Counter()
for step in cost["steps"]:
    per_bucket[step["graph"]] += step["padding"]
WORST_BUCKET = max(per_bucket, key=per_bucket.get)
EXTRA = min((s for s in range(1, 9) if s not in SIZES),
            key=lambda s: buckets.bucket_cost(UNSEEN, SIZES + [s], {1: 1.0}, {1: 1.0})["padding_rows"])
print(f"waste {WASTE:.1%}, padding rows per bucket {dict(per_bucket)}, best size to add: {EXTRA}")
### END SOLUTION

# %% {"course_kit": {"exercise": "05.bucket_waste", "role": "check"}}
from course_kit import grading
grading.check("05.bucket_waste", PREDICTED_WASTE, WASTE, WORST_BUCKET, EXTRA)

# %% [markdown]
# ## Exercise 05.read_trace: read a step from its trace, and pick the fix
#
# `STEP` is one decode step of a profiler trace, kernel by kernel: the H200's eager step at batch 4
# once the H200 trace is recorded (a step you have not seen above), else a synthetic step of the same
# shape. Each row is `{"name", "kind", "start_us", "end_us"}`; `kind` is `"matmul"` (a GEMM or GEMV
# kernel) or `"other"`; the kernels run one after another on one stream. The step's **span** runs from
# the first kernel's start to the last one's end; a **gap** is a stretch between one kernel's end and
# the next kernel's start. From the table, answer:
#
# 1. `DOMINANT`: the kernel name with the most GPU time in the step (a name's calls add up);
# 2. `GAP_SHARE`: the share of the span in which no kernel runs (the gaps over the span);
# 3. `FIX` and `GAIN`: which fix raises the tokens per second the most, and by what factor (new tokens
#    per second over the old), under these models:
#    - (A) **CUDA graphs**: every gap longer than 1.0 µs shrinks to 1.0 µs; the kernels are unchanged;
#    - (B) **fusion**: each run of two or more consecutive `"other"` kernels becomes one kernel, as long
#      as the run's longest kernel, and the gaps inside the run vanish;
#    - (C) **a batch twice as large**: each step makes twice the tokens; `"matmul"` kernels keep their
#      time (they read the same weights), every other kernel takes twice as long, gaps are unchanged.
#
# The check reads `TRACE_ID` to know which table you answered from. It checks the form of your answers
# here; your instructor's grading checks their values.

# %%
STEP, STEP_SOURCE = step_table.exercise_step()
TRACE_ID = step_table.step_id(STEP)
md(f"`STEP`: {len(STEP)} kernels of one decode step, from {STEP_SOURCE}. `TRACE_ID = {TRACE_ID!r}`. The first rows:\n\n"
   "| name | kind | start (µs) | end (µs) |\n|---|---|---|---|\n"
   + "\n".join(f"| `{r['name'][:60]}` | {r['kind']} | {r['start_us']:.3f} | {r['end_us']:.3f} |" for r in STEP[:6]))
pplots.kernel_gantt([dict(r, lane="the step", step=None) for r in STEP], "The exercise's step", threshold_us=float("inf"))

# %% {"course_kit": {"exercise": "05.read_trace", "role": "solution", "points": 3, "task": "compute DOMINANT, GAP_SHARE, FIX and GAIN from STEP (see the task above)"}}
### BEGIN SOLUTION
rows = sorted(STEP, key=lambda r: r["start_us"])
span = max(r["end_us"] for r in rows) - rows[0]["start_us"]
gaps, end = {}, rows[0]["end_us"]
for i, r in enumerate(rows[1:], start=1):
    if r["start_us"] > end:
        gaps[i] = r["start_us"] - end
    end = max(end, r["end_us"])
per_name = {}
for r in rows:
    per_name[r["name"]] = per_name.get(r["name"], 0.0) + r["end_us"] - r["start_us"]
DOMINANT = max(per_name, key=per_name.get)
GAP_SHARE = sum(gaps.values()) / span
graphs = span - sum(max(0.0, g - 1.0) for g in gaps.values())
saved_us, run = 0.0, []
for i, r in enumerate(rows + [{"kind": None}]):
    if r["kind"] == "other":
        run.append(i)
        continue
    if len(run) >= 2:
        d = [rows[j]["end_us"] - rows[j]["start_us"] for j in run]
        saved_us += sum(d) - max(d) + sum(gaps.get(j, 0.0) for j in run[1:])
    run = []
gains = {"A": span / graphs, "B": span / (span - saved_us),
         "C": 2 * span / (span + sum(r["end_us"] - r["start_us"] for r in rows if r["kind"] != "matmul"))}
FIX = max(gains, key=gains.get)
GAIN = gains[FIX]
print(f"{DOMINANT}: dominant; gaps {GAP_SHARE:.1%} of the span; speed-ups {gains}")
### END SOLUTION

# %% {"course_kit": {"exercise": "05.read_trace", "role": "check"}}
from course_kit import grading
grading.check("05.read_trace", TRACE_ID, DOMINANT, GAP_SHARE, FIX, GAIN)

# %% {"course_kit": {"exercise": "05.read_trace", "role": "hidden"}}
grading.check("05.read_trace_hidden", TRACE_ID, DOMINANT, GAP_SHARE, FIX, GAIN)

# %% [markdown]
# ## Summary
# - A CUDA graph turns hundreds of launches into one. At batch 1 the decode step is launch-bound, so
#   replaying it is worth a large factor; fusing kernels first (Inductor) removes more.
# - Graphs replay fixed shapes and addresses: copy inputs into static buffers, capture one graph per
#   batch size, pad to the next one, and keep the whole step free of host syncs.
# - Share one memory pool between the graphs of a runner; clone any output you keep.
# - Draw random numbers on the device or pass noise in through a buffer; CPU randomness is baked in.
# - `torch.compile(mode="reduce-overhead")` packages fusion and graphs; it needs the same discipline
#   (static KV cache marked static, no syncs).
# - At batch 1 the step is a chain of matrix-vector products: what remains after graphs and fusion
#   is how close each kernel reads at the copy rate, and the gaps between kernels (PDL narrows them).
# - A profiler trace shows where a step's time goes: kernels per step, the gaps between them, the
#   costliest kernels. Open a saved trace in https://ui.perfetto.dev to walk through it yourself.
#
# **Further reading**
# - NVIDIA, *CUDA C++ Programming Guide*, section "CUDA Graphs".
# - PyTorch documentation: *torch.profiler* (and the recipe *PyTorch Profiler*); the Perfetto UI
#   documentation (ui.perfetto.dev) for reading a Chrome/Perfetto trace.
# - PyTorch documentation: *CUDA semantics: CUDA Graphs* (`torch.cuda.graph`, memory pools, partial
#   network capture), and *CUDAGraph Trees*.
# - PyTorch blog, *Accelerating PyTorch with CUDA Graphs* (2021); the gpt-fast repository
#   (pytorch-labs) for decode with a static KV cache and `reduce-overhead`.
# - W. Kwon et al., *Efficient Memory Management for Large Language Model Serving with
#   PagedAttention* (vLLM), SOSP 2023: serving engines capture decode graphs per batch size.
#
# **Next:** `06_batching.ipynb` batches many requests: static, dynamic and continuous batching,
# and the paged KV cache.

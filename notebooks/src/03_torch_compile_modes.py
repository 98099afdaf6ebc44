# %% [markdown]
# # 03 · torch.compile and its modes
#
# Eager PyTorch runs one kernel per operation, chosen and launched from Python. That costs twice:
# every intermediate tensor makes a round trip through memory, and every launch costs microseconds
# of CPU time, which dominates when the kernels are small (a batch-1 decode step). `torch.compile`
# attacks both. TorchDynamo captures the Python code as graphs; Inductor fuses the graph's
# operations into a few generated kernels (Triton on a GPU, C++ on a CPU); `mode="reduce-overhead"`
# records the whole step as a CUDA graph that replays with one launch; `mode="max-autotune"` also
# benchmarks several matmul kernels per shape and keeps the fastest. This notebook measures what each
# mode buys, what it costs to compile, and what stops it (graph breaks, recompiles).
#
# {{BADGES}}
#
# **What you will learn**
# - how Inductor fuses an elementwise chain, read directly in the code it generates;
# - compile time against steady-state time, per mode, and when compiling pays off;
# - graph breaks (`print`, a Python `if` on a tensor value) and how to find them with
#   `torch._dynamo.explain` and `TORCH_LOGS="graph_breaks,recompiles"`;
# - how to read a profiler trace of eager against compiled code: kernels per call, launch gaps;
# - recompiles when shapes change, and how `dynamic=True` or `mark_dynamic` avoid them;
# - on an H200: reduce-overhead on a batch-1 decode step, max-autotune on a training step, and the
#   kernels each mode launches.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# On a CPU (and under `COURSE_KIT_SMOKE=1`, what CI uses) we compile only small functions, since the
# C++ compiler is slow; the GPU-only modes show the recorded H200 results.

# %% {"tags": ["parameters"]}
P = device.defaults()
DEVICE = P["device"]
ROWS, COLS = {"smoke": (64, 128), "cpu": (512, 1024), "small_gpu": (4096, 4096), "full": (8192, 8192)}[P["size"]]
REPEAT = 5 if P["smoke"] else 30
CHAIN_MODES = ["eager", "default"] if DEVICE == "cpu" else ["eager", "default", "reduce-overhead",
                                                             "max-autotune-no-cudagraphs"]

# %%
import re
import tempfile
import time

import torch

from course_kit import compile_modes as cm
from course_kit import narrate, notebook, reference, widgets
from course_kit.benchmarks import lesson_traces
from course_kit.compile_modes import breakeven, graphs, kernels as ckernels
from course_kit.plots import profiling as pplots
from course_kit.profiling import compile_logs, explain as pexplain, files as tfiles, trace as ptrace
from course_kit.widgets.compile_modes import BreakEven
from course_kit.notebook import md, show_source
from course_kit.plots import compile_modes as cplots

if DEVICE == "cpu" and P["smoke"]:
    torch.set_num_threads(1)  # tiny tensors: one thread avoids contention on a shared 2-core CI box
g = torch.Generator().manual_seed(0)
x = torch.randn(ROWS, COLS, generator=g).to(DEVICE)
bias = torch.randn(COLS, generator=g).to(DEVICE)
residual = torch.randn(ROWS, COLS, generator=g).to(DEVICE)
print(f"bias + GELU + residual on {ROWS} x {COLS} fp32 tensors, on {DEVICE}; modes here: {CHAIN_MODES}")

# %% [markdown]
# ## 1. The modes
#
# | mode | what it adds | where it helps |
# |---|---|---|
# | `eager` | nothing: one kernel per op, launched from Python | the reference |
# | `default` | Dynamo graph capture + Inductor fusion | memory-bound chains of ops |
# | `reduce-overhead` | + CUDA graphs: a whole step is one launch; inputs not at fixed addresses are copied into the graph's buffers first | small, launch-bound steps (decode) with static buffers |
# | `max-autotune` | + matmul autotuning (Triton templates vs cuBLAS) + CUDA graphs | matmul-heavy steps, long runs |
# | `max-autotune-no-cudagraphs` | the autotuning only | training steps with dynamic parts |
#
# Compilation happens at the first call, so the first call's time holds the compile; steady state is
# measured after warm-up with `course_kit.bench.timeit`:

# %%
show_source(cm.measure_mode)

# %% [markdown]
# ## 2. Fusion, read in the generated code
#
# `gelu(x + bias) + residual` is three operations. Eager mode runs three kernels, and each one reads
# its inputs from memory and writes a full-size result: the intermediates `x + bias` and
# `gelu(...)` make a round trip through memory. Inductor sees the whole chain and emits one kernel.

# %%
show_source(cm.bias_gelu_residual)
ops = cm.eager_ops(cm.bias_gelu_residual, x, bias, residual)
print("eager runs these ATen ops, one kernel each:", ops)

# %%
# Inductor's on-disk cache for this notebook: empty now, so this first compile is a cold one
COMPILE_CACHE = tempfile.mkdtemp(prefix="course_kit_03_")
with cm.fresh_caches(COMPILE_CACHE) as CACHE_DIR:
    t0 = time.perf_counter()
    out, code = cm.generated_code(cm.bias_gelu_residual, x, bias, residual)
    codegen_s = time.perf_counter() - t0
torch.testing.assert_close(out, cm.bias_gelu_residual(x, bias, residual), rtol=1e-5, atol=1e-5)
summary = cm.fusion_summary(code, cm.bias_gelu_residual, x, bias, residual)
kernel = summary["kernels"][0]
src = cm.kernel_source(code, kernel)
print(src if len(src) < 6000 else src[:6000] + "\n... (truncated)")

# %%
if summary["language"] == "C++":
    loads, stores = len(re.findall(r"loadu?\(", src)), len(re.findall(r"\.store\(|store\(", src))
else:
    loads, stores = src.count("tl.load("), src.count("tl.store(")
tb = summary["traffic_bytes"]
md(f"Inductor generated **{len(summary['kernels'])} {summary['language']} kernel"
   f"{'s' if len(summary['kernels']) != 1 else ''}** (`{'`, `'.join(summary['kernels'])}`) where eager ran "
   f"{len(ops)} ops ({', '.join(ops)}). Its name lists the ops it fused ({', '.join(summary['fused'][kernel])}; "
   f"the second add is the same op name). Inside it, the generated code has {loads} load"
   f"{'s' if loads != 1 else ''} (x, bias, residual) and {stores} store{'s' if stores != 1 else ''} (the "
   f"result): the intermediates stay in registers. Memory traffic drops from {tb['eager'] / 1e6:.2f} MB "
   f"(eager) to {tb['fused'] / 1e6:.2f} MB (fused), {tb['eager'] / tb['fused']:.2f}x less. Generating and "
   f"compiling it took {codegen_s:.1f} s here, from an empty on-disk cache.")

# %% [markdown]
# ## 3. Compile time against steady state
#
# A chain like this is memory-bound. If every kernel moved its bytes at the same rate, fusion could
# gain at most the traffic ratio above; at small sizes the eager kernels may find their data in cache,
# and the gain shrinks. Whether this run stayed within that ratio, and if not what else fusion removed,
# is said after the profile below, which shows whether eager's device waited for its launches. Each
# mode starts from a reset Dynamo, but with the on-disk cache that section 2 filled: a warm compile,
# set beside section 2's cold one. On a GPU, `reduce-overhead` also runs once with its inputs marked as
# static addresses, meant to spare the copy of its inputs into the CUDA graph's buffers before each
# replay: if it runs faster, the difference is what that copy cost.

# %%
with cm.cache_at(CACHE_DIR):            # the cache section 2 filled
    res = cm.measure_modes(cm.bias_gelu_residual, [(x, bias, residual)], CHAIN_MODES, device=DEVICE, repeat=REPEAT)
    if "reduce-overhead" in CHAIN_MODES:
        res["reduce-overhead (static inputs)"] = cm.measure_mode(cm.bias_gelu_residual, [(x, bias, residual)],
                                                                 "reduce-overhead", device=DEVICE, repeat=REPEAT,
                                                                 static_inputs=True)
rows = [dict(r.as_dict(), name=name) for name, r in res.items()]
cplots.first_vs_steady(rows, title=f"bias + GELU + residual on {DEVICE}: first call vs steady state")

# %%
chain = {name: r.as_dict() for name, r in res.items() if r.steady_s}
md(breakeven.explain_chain(chain, input_bytes=sum(t.numel() * t.element_size() for t in (x, bias, residual)))
   + "\n\n" + breakeven.explain_cold_warm(codegen_s, chain["default"], chain["eager"],
                                           f"Inductor's on-disk cache (`{CACHE_DIR}`)"))

# %% [markdown]
# ### What the profiler sees: three kernels against one
#
# The same chain, eager and compiled, under `torch.profiler` (a pass of its own, each call marked
# `step k`): every kernel (on a CPU, every operator) on its own row, the gaps between them in red,
# and the costliest ones. The trace is saved for Perfetto, and the H200's kept trace is shown beside
# this machine's.

# %%
with cm.cache_at(CACHE_DIR):            # the compiled chain is in this cache: no second cold compile
    own_prof = lesson_traces.profile_lesson("03", P)
saved = [lesson_traces.save_row(r, "traces") for r in own_prof]
rec_traces = notebook.record("traces", quiet=True)
ref_prof = [r for r in (rec_traces or {}).get("results", []) if r.get("lesson") == "03"]
ref_kept = {r["name"]: tfiles.load(r["name"]) for r in ref_prof}
runs_g = {f"this machine: {r['what']}": ptrace.gantt_rows(r["trace"], steps=2) for r in own_prof}
runs_g.update({f"H200 record: {r['what']}": ptrace.gantt_rows(ref_kept[r["name"]], steps=2)
               for r in ref_prof if ref_kept.get(r["name"])})
if not ref_prof:
    md("No H200 trace of the chain is recorded yet (`course-kit bench traces` on the H200 records it): "
       "below is this machine's alone.")
pplots.gantt_pair(runs_g, "Two calls of the chain, eager against compiled (red: gaps inside a call)",
                  thresholds={n: (1.0 if n.startswith("H200") or DEVICE == "cuda" else 5.0) for n in runs_g})

# %%
by_p = {r["variant"]: r for r in own_prof}
lines = [pexplain.describe(r, f"This machine, {r['what']}") for r in own_prof]
lines.append("This machine: " + pexplain.compare(by_p["eager"], by_p["default"], ("eager", "the compiled chain")))
if len(ref_prof) >= 2:
    by_r = {r["variant"]: r for r in ref_prof}
    lines += [pexplain.describe(r, f"The H200 record, {r['what']}") for r in ref_prof]
    lines.append("The H200 record: " + pexplain.compare(by_r["eager"], by_r["default"], ("eager", "the compiled chain")))
md("\n\n".join(lines + [pexplain.how_to_open(p) for p in saved]))

# %% [markdown]
# ### Did fusion remove more than traffic?
#
# Section 3 set fusion's gain beside the traffic ratio. Where the gain is larger, the removed launches
# are a candidate, but on a GPU a launch costs a call time only while the GPU waits for it: the
# profile above says how long eager's device sat idle inside each call.

# %%
OP_COST = ckernels.op_cost_s(DEVICE)    # one operator that does nothing: launch and dispatch alone
# the profile explains section 3's timings only if it ran the same chain
PROFILED_CHAIN = tuple(P.get("chain", lesson_traces.SIZES[P["size"]]["chain"]))
eager_profile = by_p["eager"] if PROFILED_CHAIN == (ROWS, COLS) else None
md(breakeven.explain_fusion_bound(chain["eager"]["steady_s"], chain["default"]["steady_s"], tb["eager"] / tb["fused"],
                                  len(ops), len(summary["kernels"]), OP_COST, eager_profile=eager_profile))

# %% [markdown]
# ## 4. Graph breaks
#
# Dynamo captures what it can prove is tensor computation. A `print` of a tensor value, or a Python
# `if` on one, needs the value on the host in the middle of the graph: Dynamo **breaks** the graph
# there, runs that bit in Python, and starts a new graph after it. Each break costs a round trip to
# Python and blocks fusion across it; under `reduce-overhead`, it splits the CUDA graph.
# `torch._dynamo.explain` reports the graphs and the reasons. The compiler also says it itself: run a
# script with `TORCH_LOGS="graph_breaks,recompiles"` and it logs every break and recompile, with the
# line of your code that caused it. In a notebook, `torch._logging.set_logs(graph_breaks=True,
# recompiles=True)` does the same; `profiling.compile_logs.captured()` keeps those lines (and the
# compiler's warnings about the breaks) so that they are shown below as what they are, its log.

# %%
show_source(graphs.forward_with_branch)
show_source(cm.graph_report)

# %%
w = torch.randn(COLS, 256, generator=g).to(DEVICE)
with compile_logs.captured() as break_log:
    report = cm.graph_report(graphs.forward_with_branch, x, w)
    ok, err = cm.compiles_fullgraph(graphs.forward_with_branch, x, w)
md(f"`forward_with_branch`: **{report['graphs']} graphs, {report['graph_breaks']} graph breaks**, "
   f"{report['ops']} ops captured. Reasons:\n" + "\n".join(f"- {r}" for r in report["break_reasons"]) +
   f"\n\nWith `fullgraph=True`, compilation refuses to break the graph and raises instead: `{err}`.")

# %%
key_lines = compile_logs.essentials(break_log)
md(f"What `TORCH_LOGS=\"graph_breaks,recompiles\"` printed for those compiles: {len(break_log)} lines, of which "
   f"these {len(key_lines)} say where and why (each `Graph break in user code at` names the line of "
   f"`forward_with_branch` that broke the graph; `[warning]` lines are the compiler's own warning):"
   "\n\n```text\n" + compile_logs.as_block(key_lines, limit=30) + "\n```")

# %% [markdown]
# ## 5. Recompiles when shapes change
#
# A compiled graph is guarded: it is reused only while its assumptions hold, the input shapes among
# them. A new shape fails the guard and triggers a recompile. By default Dynamo compiles the first
# shape statically and, when a second shape arrives, recompiles once with a symbolic size that fits
# all later ones. `dynamic=False` recompiles for every shape; `dynamic=True`, or
# `torch._dynamo.mark_dynamic(x, 0)` on the input, compiles a dynamic graph from the start. (A
# counting backend that runs the graphs eagerly keeps this fast.)

# %%
shapes = [(8, 64), (12, 64), (20, 64), (33, 64), (64, 64)]
recompiles, recompile_log = [], {}
for d in cm.DYNAMIC_CHOICES:
    with compile_logs.captured() as lines:
        recompiles.append(cm.count_compiles(graphs.mlp_block, shapes, d))
    recompile_log[d] = [line for line in lines if line.startswith("[recompiles]")]
cplots.recompiles(recompiles, title=f"Compilations over {len(shapes)} input shapes (per call: bar labels)")

# %%
c = {r["dynamic"]: r["compiles"] for r in recompiles}
md(f"Over {len(shapes)} different batch sizes: static shapes compiled **{c['static']}** times, the default "
   f"(automatic dynamic) **{c['automatic']}**, `dynamic=True` **{c['dynamic']}**, `mark_dynamic` "
   f"**{c['mark_dynamic']}**. A dynamic graph cannot specialise on the size (and CUDA graphs need one "
   f"recording per shape anyway), which is why servers pad batches to a few fixed sizes.\n\n"
   f"`TORCH_LOGS=\"recompiles\"` says why each recompile happened; with static shapes "
   f"({len(recompile_log['static'])} lines, each guard that failed on a new shape):\n\n```text\n"
   + compile_logs.as_block(compile_logs.essentials(recompile_log["static"]), limit=12)
   + "\n```")

# %% [markdown]
# ## 6. On an H200: decode and training steps in every mode
#
# `course-kit bench compile` compiles two workloads in each mode, each from an empty cache:
# - a **batch-1 decode step** of a 6-layer, width-768 TinyGPT in bf16 with a static KV cache (its
#   in-place cache writes and fixed shapes are what let `reduce-overhead` capture it);
# - a **training step** (bf16 autocast forward and backward, compiled; fused AdamW) of a 4-layer
#   TinyGPT on 8 x 1024 tokens.
# Every mode is checked against eager first (decode logits over 16 positions, first-step loss).

# %% [markdown]
# On a GPU, first a small version on this machine: a 4-layer, width-256 decode step in eager,
# default and reduce-overhead (on a CPU this cell does nothing).

# %%
own_rows = []
SMALL_DECODE = dict(preset="smoke", d_model=256, n_heads=4, n_layers=4, vocab=8192, seq_len=256)
if P["device"] == "cuda":
    from course_kit.benchmarks.compile import measure_decode
    own_rows, _ = measure_decode(["eager", "default", "reduce-overhead"], "cuda", SMALL_DECODE, repeat=REPEAT)
    e_own = next(r for r in own_rows if r["mode"] == "eager")
    for r in own_rows:
        r["speedup_vs_eager"] = e_own["steady_s"] / r["steady_s"]
        r["name"] = f"this GPU: {r['name']}"
    assert all(r["correct"] for r in own_rows), "a compiled decode step disagrees with eager"
cplots.speedups(own_rows, title="This GPU: small decode step, speed-up over eager") if own_rows else None

# %%
if own_rows:
    same = reference.load("compile", reference.gpu_slug())      # this GPU's own record, if any
    ro = next(r for r in own_rows if r["mode"] == "reduce-overhead")
    record_model = (same or {}).get("params", {}).get("decode_model")      # the record's decode model, if any
    h = notebook.headline("reduce-overhead over eager, decode step", ro["speedup_vs_eager"],
                          (same or {}).get("summary", {}).get("decode_speedup", {}).get("reduce-overhead"), "x", 2,
                          why=breakeven.model_difference(SMALL_DECODE, record_model))
    md(f"This GPU, the small decode step: `reduce-overhead` ran **{narrate.ratio_words(ro['speedup_vs_eager'])}** "
       f"eager (the ratio: {h.text}).", headlines=[h])

# %%
ref = notebook.record("compile")
if ref is None:
    print("No H200 reference for `compile` recorded yet: run `course-kit bench compile` on a GPU to create it.")
decode_rows = [r for r in ref["results"] if r["name"].startswith("decode") and "steady_s" in r] if ref else []
train_rows = [r for r in ref["results"] if r["name"].startswith("train") and "steady_s" in r] if ref else []
cplots.first_vs_steady(decode_rows + train_rows, title="Reference GPU: first call vs steady state") if ref else None

# %%
cplots.speedups(decode_rows, title="Decode step (batch 1): speed-up over eager") if ref else None

# %%
cplots.speedups(train_rows, title="Training step: speed-up over eager") if ref else None

# %%
cplots.kernels_per_mode(own_rows + decode_rows + train_rows) if (ref or own_rows) else None

# %%
if ref is not None:
    s = ref["summary"]
    ts = s["train_speedup"]
    ma = max((k for k in ("max-autotune", "max-autotune-no-cudagraphs") if k in ts), key=lambda k: ts[k], default=None)
    md(breakeven.explain_decode({r["mode"]: r for r in decode_rows}, ref["environment"].get("gpu") or "reference GPU"))

# %% [markdown]
# The training step: the record's own profile compares the autotuned mode with `default` kernel by
# kernel (Inductor's numbered kernel names are matched without their counters): if its kernels take
# the same GPU time, the gap lies outside them.

# %%
if ref is not None and ma:
    from course_kit.compile_modes.explain import explain_train
    why = explain_train({r["mode"]: r for r in train_rows}, ma)
    md("**Training step, explained from the record:** " + why["text"])
    if why["kernel_deltas"]:
        md("Top kernels whose GPU time per step changed against the peer (µs; —: not among that run's top "
           f"kernels):\n\n| kernel | peer | `{ma}` | change |\n|---|---|---|---|\n" + "\n".join(
               f"| `{d['kernel'][:60]}` | {'—' if d['status'] == 'new' else format(d['peer_us'], '.0f')} | "
               f"{'—' if d['status'] == 'gone' else format(d['us'], '.0f')} | "
               f"{d['status'] if d['status'] != 'both' else format(d['delta_us'], '+.0f')} |"
               for d in why["kernel_deltas"][:8]))

# %% [markdown]
# What did autotuning choose? Records made with the current bench keep, for each max-autotune mode,
# every op Inductor autotuned: the candidates it benchmarked (cuBLAS through ATen, Triton templates
# with their tile sizes) and the winner.

# %%
from course_kit.compile_modes import autotune
from course_kit.compile_modes.autotune import explain_choices

if DEVICE == "cpu":   # does Inductor autotune anything on this machine? (a few seconds: cold caches)
    md(autotune.explain_probe(autotune.probe(DEVICE)))
tuned = [r for r in train_rows if "autotune_choices" in r] if ref is not None else []
for r in tuned:
    md(explain_choices(r["autotune_choices"], r["mode"]))
if ref is not None and not tuned:
    print("This record predates the autotuning log: run `course-kit bench compile` on a GPU to record the choices.")

# %%
if ref is not None:
    for rows_, label in ((decode_rows, "decode"), (train_rows, "training")):
        for r in rows_:
            if r["mode"] in ("eager", "reduce-overhead", "max-autotune-no-cudagraphs") and r.get("top_kernels"):
                md(f"Top GPU kernels, {label} step, `{r['mode']}`:\n\n"
                   "| kernel | calls per step | µs per step (all its calls) |\n|---|---|---|\n"
                   + "\n".join(f"| `{k['kernel'][:60]}` | {k['count']:.0f} | {k['gpu_us_per_call']:.1f} |"
                               for k in r["top_kernels"][:5]))

# %% [markdown]
# ## 7. When does compiling pay?
#
# Compiling costs seconds to minutes once; it saves a little on every call. The break-even widget
# puts the two together: pick a workload (the chain measured live in section 3 on this machine, or a
# step from the reference record), a mode and a number of calls, and compare the total time of
# eager with the mode's compile time plus its calls.

# %%
workloads = {f"bias + GELU + residual, {ROWS} x {COLS}, live on this {DEVICE}": rows}
if ref is not None:
    gpu = ref["environment"].get("gpu") or "reference GPU"
    workloads[f"decode step (batch 1), {gpu} record"] = decode_rows
    workloads[f"training step, {gpu} record"] = train_rows
break_even = BreakEven(workloads, calls=1000)
widgets.show(break_even.widget, break_even.figure, "the compile break-even widget")

# %% [markdown]
# ## Exercise 03.fullgraph: remove the graph breaks
#
# `forward_with_branch` (section 4) breaks the graph twice: once for the `print` of a tensor value,
# once for the Python `if` on `h.mean()`. Write `fixed(x, w)` that computes the same result (the
# print is only debugging, drop it) and compiles with `fullgraph=True`. Hint: `torch.where` picks
# between two tensors on the device, without asking Python.

# %% {"course_kit": {"exercise": "03.fullgraph", "role": "solution", "points": 2}}
def fixed(x, w):
    ### BEGIN SOLUTION
    h = torch.relu(x @ w)
    m = h.mean()
    h = torch.where(m > 1.0, h / m, h)
    return h @ w.T
    ### END SOLUTION

# %% {"course_kit": {"exercise": "03.fullgraph", "role": "check"}}
from course_kit import grading
grading.check("03.fullgraph", fixed)

# %% [markdown]
# ## Exercise 03.recompiles: how many graphs does each call compile?
#
# `two_graphs` has one graph break in the middle (`torch._dynamo.graph_break()` stands for a `print`
# or a Python `if` on a tensor's value). It is called, compiled with the default settings (automatic
# dynamic shapes), on inputs of these shapes, in this order:

# %%
SHAPES = [(8, 64), (8, 64), (16, 64), (24, 64), (24, 32), (40, 32)]


def two_graphs(x):
    h = torch.tanh(x @ x.T)
    torch._dynamo.graph_break()      # stands for a print or a Python `if` on a tensor's value
    return (h @ x).softmax(-1)

# %% [markdown]
# 1. **Predict** how many graphs Dynamo compiles on each of the six calls: `PREDICTED`, a list of
#    six ints. Run the cell once before writing step 2 (the check needs it, but does not grade it).
# 2. **Measure** with section 5's counter, `cm.count_compiles`: `PER_CALL`, the graphs compiled on
#    each call with automatic dynamic shapes, and `STATIC_TOTAL`, the total with `dynamic=False`.
# 3. **Explain**: why does call 5 compile at all? `WHY` is the letter: (A) its second dimension
#    changed, and so far only the first dimension had been made symbolic; (B) every call after a
#    graph break recompiles once the shape changes; (C) Dynamo's cache evicted the graphs of batch 24;
#    (D) 32 is a power of two, which Dynamo specialises.

# %% {"course_kit": {"exercise": "03.recompiles", "role": "solution", "points": 2, "task": "record PREDICTED, then measure PER_CALL and STATIC_TOTAL, then answer WHY (see the task above)"}}
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTED = [2, 0, 2, 0, 0, 0]       # missing the recompile of call 5: still accepted, only recorded
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
PER_CALL = cm.count_compiles(two_graphs, SHAPES, "automatic")["compiled_on_call"]
STATIC_TOTAL = cm.count_compiles(two_graphs, SHAPES, "static")["compiles"]
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
WHY = "A"
### END SOLUTION

# %% {"course_kit": {"exercise": "03.recompiles", "role": "check"}}
from course_kit import grading
grading.check("03.recompiles", PREDICTED, PER_CALL, STATIC_TOTAL, WHY)

# %% {"course_kit": {"exercise": "03.recompiles", "role": "hidden"}}
grading.check("03.recompiles_hidden", WHY)

# %% [markdown]
# ## Summary
# - Inductor fuses chains of elementwise operations into one kernel: intermediates stay in registers,
#   and memory traffic falls by the number of round trips saved.
# - Compilation costs seconds to minutes at the first call; it pays off only over many calls, so
#   report compile time and steady state separately.
# - `reduce-overhead` removes launch overhead with CUDA graphs, and shines on small static steps like
#   batch-1 decode; it needs static shapes and addresses (a static KV cache).
# - `max-autotune` searches matmul kernels per shape: much slower to compile, and faster only where a
#   candidate beats cuBLAS at those shapes (section 6 checks whether one did).
# - Graph breaks and recompiles silently eat the gains: find them with `torch._dynamo.explain`,
#   `fullgraph=True`, and `dynamic=True` / `mark_dynamic`.
#
# **Further reading**
# - J. Ansel et al., *PyTorch 2: Faster Machine Learning Through Dynamic Python Bytecode
#   Transformation and Graph Compilation*, ASPLOS 2024.
# - PyTorch documentation: *torch.compile*, *torch.compiler troubleshooting* (graph breaks,
#   recompilation, `TORCH_LOGS`), and *CUDAGraph Trees*.
# - P. Tillet et al., *Triton: an intermediate language and compiler for tiled neural network
#   computations*, MAPL 2019.
#
# **Next:** `04_graph_capture.ipynb` compares the ways of capturing a graph (tracing, scripting, FX,
# `torch.export`): what each of them captures and what it misses.

# %% [markdown]
# # 09 · Parallelism: data, tensor, pipeline, expert and context
#
# One GPU eventually runs out: of memory (the weights of a 70B model nearly fill the largest GPU:
# computed below), of bandwidth (a decode step must read every weight once), or of time (training on one GPU would
# take years). Parallelism splits the work over several GPUs, and each way of splitting it pays in
# communication. This notebook builds the five kinds used today (data, tensor, pipeline, expert
# and context parallelism), each one checked against the single-process computation it replaces,
# runs them on real processes that talk through `torch.distributed`, and measures what the
# communication costs.
#
# {{BADGES}}
#
# **What you will learn**
# - how to start N processes from a notebook and make them a process group (gloo on CPU, NCCL on
#   GPUs);
# - the collectives (all-reduce, all-gather, reduce-scatter, all-to-all), their alpha-beta cost and
#   the *bus bandwidth* convention of nccl-tests;
# - data parallelism as one gradient all-reduce, equal to `DistributedDataParallel`;
# - tensor parallelism: column- and row-parallel linears, communication ops named after what they
#   do in the forward and the backward pass, a TP MLP and TP attention with grouped-query heads,
#   and the course model decoding with TP;
# - ZeRO: the training state of data parallelism sharded by stage, and ZeRO-1 run on processes;
# - sequence parallelism: what it shards next to TP, and the activation memory it saves;
# - pipeline parallelism with GPipe, 1F1B and interleaved 1F1B schedules, and the bubble
#   (p-1)/(m+p-1) against what a measured timeline shows;
# - expert parallelism (all-to-all dispatch and combine) and context parallelism (ring attention);
# - when TP pays off, and the memory per GPU of a 70B model at TP 1, 2, 4 and 8.
#
# Memory in this notebook is in GiB (2^30 bytes), the unit PyTorch reports a GPU's memory in.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# The correctness demos run on `WORLD` CPU processes talking through gloo, on every machine. The
# speed measurements (`course-kit bench parallel`) use NCCL with one GPU per process where there are
# GPUs, and small gloo groups on a CPU. `COURSE_KIT_SMOKE=1` (CI) picks the smallest sizes.

# %% {"tags": ["parameters"]}
P = device.defaults()
WORLD = 2                                    # CPU processes for the correctness demos
BENCH_SIZE = P["size"]                       # sizes of the measured run (smoke, cpu, small_gpu, full)
BENCH_MODELS = ["llama-1b"] if P["device"] == "cuda" else ["tiny"]   # decode models measured live
PP_MICRO = [1, 2, 4, 8] if not P["smoke"] else [1, 4]                 # micro-batches for the bubble

# %%
import torch

from course_kit import bench, benchmarks, grading, narrate, notebook, widgets
from course_kit.dtypes import memory
from course_kit.notebook import md, show_source
from course_kit.parallel import explain as pexplain
from course_kit.parallel import (bubble, comm, context, data, expert, launcher, measure, pipeline,
                                 schedules, sequence, sp_run, tensor, tp_llama, tp_model, zero)
from course_kit.plots import parallel as pplots
from course_kit.widgets.parallel import TPTradeoff, ZeroMemory
from course_kit.widgets.pipeline import PipelineSchedules

md(f"Running on **{P['device']}** with dtype **{str(P['dtype']).replace('torch.', '')}**, sizes "
   f"**{P['size']}**{' (smoke: the smallest sizes)' if P['smoke'] else ''}; {WORLD} CPU processes for "
   f"the correctness demos.")

# %%
seventy = memory.PRESETS["70b"]
w70 = memory.weights_bytes(seventy.n_params(), "bf16")
h200 = tp_model.H200_GIB * 2**30       # what the reference H200 exposes to PyTorch
md(f"{seventy.name} has {seventy.n_params() / 1e9:,.1f} billion parameters: its bf16 weights alone are "
   f"**{narrate.gib(w70):,.1f} GiB**, which {narrate.fits(w70, h200)} on one H200, leaving "
   f"{narrate.gib(max(h200 - w70, 0)):,.1f} GiB for the KV cache, activations and everything else.")

# %% [markdown]
# ## 1. Starting processes from a notebook
#
# `launch(fn, n)` starts `n` processes, joins them into one *process group* and calls
# `fn(rank, world_size)` on each, returning every rank's result (or raising with every failed
# rank's traceback). The processes are forked from a server that imported torch once, and they
# stay alive between calls, so later cells do not pay the start-up again. Each rank is an ordinary
# Python process: it sees only its own tensors, and data moves between ranks only through
# collectives such as `dist.all_reduce`.

# %%
show_source(launcher._worker)

# %% [markdown]
# A function defined in a notebook cell cannot be imported by the workers, so `launch` sends its
# source text instead (it must be self-contained; `torch` and `dist` are predefined there). Each
# rank contributes `rank + 1`; the all-reduce leaves the sum on every rank.

# %%
def hello(rank, world_size):
    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x)                       # sum over the ranks, result on every rank
    return {"rank": rank, "world_size": world_size, "sum": x.item()}


answers = launcher.launch(hello, WORLD, backend="gloo")
answers

# %%
md(f"{len(answers)} processes answered; each holds the sum **{answers[0]['sum']:g}** "
   f"= 1 + ... + {WORLD} after one all-reduce.")

# %% [markdown]
# ## 2. What communication costs: the alpha-beta model
#
# A collective over `n` ranks on a ring takes steps; each step pays a latency `alpha` and moves a
# slice of the message at the link's bandwidth (`beta` seconds per byte). For a buffer of `N`
# bytes:
#
# | collective | time |
# |---|---|
# | all-reduce | 2(n-1) alpha + 2(n-1)/n N beta |
# | all-gather, reduce-scatter | (n-1) alpha + (n-1)/n N beta |
# | all-to-all | (n-1) alpha + (n-1)/n N beta |
#
# All-reduce is a reduce-scatter followed by an all-gather. nccl-tests report the *algorithm
# bandwidth* N / time and the *bus bandwidth* = algbw x 2(n-1)/n for all-reduce ((n-1)/n for the
# others): the rate each link really carries, comparable with the hardware's peak for any n.

# %%
show_source(comm.collective_time)

# %% [markdown]
# The measured run below (`course-kit bench parallel`, the same code the reference was recorded
# with) measures the collectives, the TP MLP, TP decode and the pipeline on this machine: NCCL
# over the GPUs here, or small gloo groups on a CPU.

# %%
own = benchmarks.run_topic("parallel", {"size": BENCH_SIZE, "models": BENCH_MODELS, "pp_m": PP_MICRO})
ref2 = notebook.record("parallel", "h200x2", quiet=True)
scaling = {slug: notebook.record("parallel", slug, quiet=True) for slug in ("h200x4", "h200x8")}
scaling = {k: v for k, v in scaling.items() if v is not None}
own_label = f"this machine ({own['environment']['gpu'] or 'CPU'}, {own['summary']['backend']})"
md(f"Measured here over {', '.join(str(n) for n in own['summary']['world_sizes'])} "
   f"{'GPUs' if own['summary']['backend'] == 'nccl' else 'processes'} ({own['summary']['backend']}); "
   f"recorded runs available: {', '.join(sorted(['h200x2'] * (ref2 is not None) + list(scaling))) or 'none'}.")

# %%
series = {own_label: [r for r in own["results"] if r["name"] == "all_reduce"]}
if ref2 is not None:
    series["2x H200 (reference)"] = [r for r in ref2["results"] if r["name"] == "all_reduce"]
for slug, rec in scaling.items():
    series[f"{slug} (reference)"] = [r for r in rec["results"] if r["name"] == "all_reduce"]
fit = None
rows = [r for r in series.get("2x H200 (reference)", series[own_label]) if r.get("n") == 2]
if len(rows) >= 3:
    alpha, bw = comm.fit_alpha_beta([r["bytes"] for r in rows], [r["median_s"] for r in rows],
                                    "all_reduce", 2)
    if 0 < bw < float("inf"):
        fit = {"alpha_s": alpha, "bandwidth_Bps": bw, "n": 2}
pplots.busbw_figure(series, model=fit)

# %%
if ref2 is None:
    notebook.banner("No 2-GPU reference record yet (<code>data/reference/h200x2/parallel.json</code>); "
                    "run <code>course-kit bench parallel</code> on two GPUs to create it. The figure shows "
                    "this machine only.", "warning")
text = []
for label, rows in series.items():
    big = max(rows, key=lambda r: (r["n"], r["bytes"]), default=None)
    if big:
        size = f"{big['bytes'] / 2**20:,.0f} MiB" if big["bytes"] >= 2**20 else f"{big['bytes'] / 2**10:,.0f} KiB"
        text.append(f"- {label}: **{big['busbw_GBps']:,.2f} GB/s** bus bandwidth for an all-reduce of "
                    f"{size} over {big['n']} ranks")
if fit:
    text.append(f"- alpha-beta fit: alpha = **{fit['alpha_s'] * 1e6:.1f} µs** per step, link bandwidth "
                f"**{fit['bandwidth_Bps'] / 1e9:,.1f} GB/s**. These calls are eager, timed one by one from "
                f"Python; §8 sets them beside an all-reduce inside a captured decode step")
md("Small messages are latency-bound (the flat left part), large ones bandwidth-bound:\n" + "\n".join(text))

# %% [markdown]
# ## 3. Data parallelism: one all-reduce of the gradients
#
# Every rank holds the whole model and a slice of the batch. After the backward pass the ranks'
# gradients differ; averaging them with an all-reduce gives every rank the gradient of the whole
# batch, so the optimizer steps keep the replicas identical. `DistributedDataParallel` does exactly
# this, with gradients packed into buckets whose all-reduce overlaps the rest of the backward pass.

# %%
show_source(data.allreduce_gradients)

# %%
dp = launcher.launch(data.check_dp, WORLD, backend="gloo")
md(f"After two SGD steps on {WORLD} ranks, the largest relative difference between the hand-written "
   f"all-reduce and `DistributedDataParallel` is **{max(r['hand_vs_ddp'] for r in dp):.1e}**, between "
   f"bucketed and per-tensor all-reduce **{max(r['bucketed_vs_hand'] for r in dp):.1e}**, and against "
   f"one process training on the whole batch **{max(r['hand_vs_single_process'] for r in dp):.1e}** "
   f"(float32 sums in another order).")

# %% [markdown]
# ### ZeRO: sharding the training state
#
# Plain data parallelism keeps a whole copy of the training state on every GPU: with mixed-precision
# Adam, 2 bytes of 16-bit weights, 2 of gradients and 12 of optimizer state (fp32 master weights,
# momentum, variance) per parameter, 16 bytes (Rajbhandari et al. 2020). ZeRO shards it over the N
# data-parallel GPUs, one part more at each stage: stage 1 the optimizer state (2 + 2 + 12/N bytes),
# stage 2 the gradients too (2 + 14/N), stage 3 the weights too (16/N; PyTorch's FSDP
# `fully_shard`). Stages 1 and 2 move the same bytes as DP's all-reduce (a reduce-scatter of the
# gradients and an all-gather of the updated weights); stage 3 gathers each layer's weights again
# in the forward and backward passes.

# %%
show_source(zero.zero_bytes_per_gpu)

# %%
zero_widget = ZeroMemory(model="70b", gpus=8)
widgets.show(zero_widget, zero_widget.figure, "the ZeRO memory widget")

# %% [markdown]
# A ZeRO-1 step: every rank averages the gradients as in DP, updates only its 1/N slice of the
# flattened parameters with its own Adam state, and an all-gather gives everyone the whole model.
# Adam works element by element, so the result must equal plain DP's exactly.

# %%
show_source(zero.ZeRO1.step)

# %%
z1 = launcher.launch(zero.check_zero1, WORLD, steps=5, backend="gloo")
md(f"After 5 Adam steps on {WORLD} ranks the parameters moved by up to **{z1[0]['moved_from_init']:.1%}** "
   f"from their start; ZeRO-1 differs from plain DP by **{max(r['zero1_vs_dp'] for r in z1):.1e}** and "
   f"torch's `ZeroRedundancyOptimizer` by **{max(r['torch_zero_vs_dp'] for r in z1):.1e}** (relative). "
   f"Each rank holds **{z1[0]['state_bytes_zero1']:,}** bytes of Adam state against DP's "
   f"**{z1[0]['state_bytes_dp']:,}**: {z1[0]['state_bytes_dp'] / z1[0]['state_bytes_zero1']:.2f}x less.")

# %% [markdown]
# ## 4. Tensor parallelism
#
# A linear layer `y = x W^T` can be cut two ways over `n` ranks:
# - **column parallel**: each rank keeps `out/n` rows of `W` and computes a slice of `y`'s features
#   from the whole `x`;
# - **row parallel**: each rank keeps `in/n` columns of `W`, multiplies its slice of `x`'s features
#   and the partial products are summed by an all-reduce.
#
# Column then row (the Megatron-LM MLP) needs no communication in between, and one all-reduce at
# the end. In the backward pass the roles swap, which is why the communication ops are named after
# both passes (as in Megatron-LM and picotron):
#
# | op | forward | backward |
# |---|---|---|
# | `copy_to_tp_region` | identity | all-reduce |
# | `reduce_from_tp_region` | all-reduce | identity |
# | `gather_from_tp_region` | all-gather | split |
# | `split_to_tp_region` | split | all-gather |

# %%
show_source(comm._ReduceFromTP)
show_source(tensor.RowParallelLinear)

# %%
show_source(tensor.TPSwiGLU)

# %% [markdown]
# Attention splits over heads: `q`, `k` and `v` are column parallel with whole heads per rank, the
# output projection row parallel. With grouped-query attention a rank needs only the K/V heads its
# query heads read; with fewer K/V heads than ranks, each K/V head is replicated on the ranks that
# share it.

# %%
show_source(tensor.kv_heads_of_rank)

# %%
md("K/V heads each rank holds (32 query heads, 8 K/V heads):\n\n| TP | " + " | ".join(f"rank {r}" for r in range(16))
   + " |\n|---|" + "---|" * 16 + "\n" + "\n".join(
       f"| {n} | " + " | ".join(",".join(map(str, tensor.kv_heads_of_rank(32, 8, r, n))) if r < n else ""
                               for r in range(16)) + " |" for n in (1, 2, 4, 8, 16)))

# %%
tp = {kv: launcher.launch(tensor.check_tp, WORLD, n_kv_heads=kv, backend="gloo") for kv in (2, 1)}
errors = {k: max(r[k] for r in tp[2]) for k in tp[2][0]}
pplots.bar_figure({k: max(v, 1e-12) for k, v in errors.items()}, log=True,
                  title=f"TP on {WORLD} ranks against the unsharded modules (max relative error)",
                  yaxis="relative error")

# %%
worst = max(max(r.values()) for runs in tp.values() for r in runs)
md(f"Outputs, input gradients and every shard's weight gradients of the column/row linears, the TP "
   f"MLP and TP attention (8 query heads, 2 K/V heads, and 1 K/V head replicated) match the "
   f"unsharded modules to a relative **{worst:.1e}**.")

# %% [markdown]
# ### Sequence parallelism: the activations TP leaves whole
#
# Tensor parallelism splits what lies inside its column/row-parallel pairs. The norms (and a GPT
# layer's dropouts) and the inputs of the first linear of each block sit outside them, so every GPU
# stores them whole. Korthikanti et al. (2022) count what a GPT layer keeps for its backward pass:
# 34 bytes per token and hidden unit, 10 of them outside TP. A Llama layer differs (RMSNorm,
# grouped-query attention, a SwiGLU MLP of three matrices, no dropout), so `sequence.py` derives its
# count with the paper's rules, and a test counts what autograd saves for the course's own Llama
# block against it. Those operations treat each token on its own, so *sequence parallelism* splits
# them along the sequence: the all-reduce that ends a TP region becomes a reduce-scatter (each GPU
# keeps its slice of the tokens), and the next TP region starts with an all-gather. The same bytes
# travel, and every stored activation is divided by t.

# %%
show_source(sequence.layer_activation_parts)

# %%
llama_shape = dict(hidden=seventy.hidden, heads=seventy.heads, kv_heads=seventy.kv_heads, ffn=seventy.intermediate)
sp = sequence.sp_comparison(seq=4096, batch=1, layers=seventy.layers, tp=8, flash=True, **llama_shape)
display(pplots.gib_bars_figure({k: {"activations": v} for k, v in sp.items()},
                               title=f"{seventy.name}: stored activations per GPU, 4k tokens, flash attention",
                               capacity_bytes=h200, capacity_label="H200"))
tp_only, with_sp = sp["TP=8"], sp["TP=8 + sequence parallel"]
parts = sequence.layer_activation_parts(4096, 1, flash=True, **llama_shape)
per_th = {region: sum(r["bytes"] for r in parts if r["region"] == region) / (4096 * seventy.hidden)
          for region in ("seq", "tp")}
gpt = sequence.layer_activation_bytes(4096, 1, seventy.hidden, seventy.heads, flash=True) / (4096 * seventy.hidden)
md(f"A Llama layer of {seventy.name}'s shape keeps **{sum(per_th.values()):.1f}** bytes per token and hidden unit "
   f"({per_th['seq']:.1f} of them outside TP's regions), where a GPT layer of the same width keeps {gpt:.1f}. "
   f"For {seventy.name} at 4,096 tokens (flash attention, so no score matrices are stored): "
   f"{narrate.gib(sp['one GPU']):,.1f} GiB on one GPU, {narrate.gib(tp_only):,.1f} GiB per GPU with TP=8, "
   f"and {narrate.gib(with_sp):,.1f} GiB with sequence parallelism too: "
   f"{narrate.more_or_less(narrate.gib(with_sp), narrate.gib(tp_only), 'GiB')} TP alone.")

# %% [markdown]
# The same on processes: an MLP block (LayerNorm, column-parallel linear, GeLU, row-parallel
# linear, residual) with TP alone and with TP + sequence parallelism, against the unsharded block.
# The first linear keeps only its rank's rows of its input and gathers them again in the backward
# pass, as Megatron-LM does. Autograd's saved tensors are counted on each rank
# (`torch.autograd.graph.saved_tensors_hooks`).

# %%
show_source(sp_run.ParallelBlock.forward)

# %%
spr = launcher.launch(sp_run.check_sp, WORLD, seq=32, hidden=16, backend="gloo")
worst_sp = max(v for r in spr for k, v in r.items() if k.endswith(("_out", "_dx", "_dw1", "_dnorm")))
one_b, tp_b, sp_b = (spr[0][k] for k in ("saved_bytes_one_process", "tp_saved_bytes", "tp_sp_saved_bytes"))
md(f"Outputs and gradients of both sharded blocks match the unsharded one to **{worst_sp:.1e}** (relative). "
   f"Bytes saved for the backward pass: **{one_b:,}** in one process; per rank, **{tp_b:,}** with TP "
   f"({narrate.ratio_words(one_b / tp_b, better='less', worse='more', same='about as much as')} one process) "
   f"and **{sp_b:,}** with TP + sequence parallelism "
   f"({narrate.ratio_words(one_b / sp_b, better='less', worse='more', same='about as much as')} one process), "
   f"on {WORLD} ranks.")

# %% [markdown]
# ### The course model with tensor parallelism
#
# `shard_llama` cuts the course model (`course_kit.models.llama`) the same way and returns the same
# class of model with a smaller config, so its own `prefill`, `decode` and `generate` run unchanged
# on each shard. Two all-reduces per layer (after attention and after the MLP) and an all-gather of
# the vocabulary slices of the logits are all the communication.

# %%
show_source(tp_llama.shard_llama)

# %%
tpm = launcher.launch(tp_llama.check_tp_llama, WORLD, new_tokens=8, backend="gloo")
md(f"Greedy tokens of the sharded model on {WORLD} ranks equal the unsharded model's: "
   f"**{all(r['tokens_equal'] for r in tpm)}** (logits within **{max(r['logits_err'] for r in tpm):.1e}**"
   f" relative).")

# %% [markdown]
# ### Does TP make it faster?
#
# The MLP of a 70B-class layer (hidden 8192, FFN 28672, 4096 tokens) is compute-bound: halving its
# matmuls per GPU nearly halves its time, and one all-reduce of 64 MB is small beside it. A decode
# step at batch 1 is the opposite: it is bound by reading the weights, which TP divides, but every
# layer adds two all-reduces of a few KB whose *latency* does not shrink. Eager PyTorch also pays
# the launch cost of every kernel on every GPU, which TP does not divide; capturing the step in a
# CUDA graph (notebook 05) removes the launches, and `torch.compile` (notebook 03) fuses a step's
# many small element-wise kernels. The measured run times each mode and compares like with like.
#
# The all-reduce itself is the last lever. NCCL's ring is built for bandwidth; for a few kilobytes
# its steps are all latency. On GPUs joined by NVLink, *symmetric memory* lets each GPU read its
# peers' buffers directly, so one kernel can copy its input in, meet the peers at a barrier and
# sum every buffer: a one-shot all-reduce. `comm.all_reduce_sum` sends small tensors to it once
# `oneshot.enable_one_shot_all_reduce()` has been called, and NCCL keeps the large ones.

# %%
from course_kit.parallel import oneshot
show_source(oneshot.OneShotAllReduce)

# %% [markdown]
# With notebook 05's Triton step on each shard, the all-reduce kernel can go as well. The row-parallel
# product stores its partial sums straight into every GPU's symmetric buffer, then its last program
# raises a flag on every GPU; the next product waits for the flag and adds the parts as it loads
# its input (`decode_kernels/exchange.py`). An exchange then costs the trip across NVLink, not a kernel
# of its own. The record times both forms of the Triton step: `triton_graph` with the exchange folded
# in, `triton_graph_all_reduce` with the one-shot all-reduce after each product.

# %%
from course_kit.cuda_graphs.decode_kernels import exchange
show_source(exchange.signal_ranks.fn)
show_source(exchange.wait_for_ranks.fn)

# %%
def speed_rows(rec, label):
    out = []
    for r in rec["results"]:
        if r["name"] == "tp_mlp":
            out.append({"machine": label, "what": "MLP", "GPUs / ranks": r["tp"],
                        "time (ms)": r["median_s"] * 1e3, "speed-up": r.get("speedup")})
        if r["name"] == "decode":
            out.append({"machine": label, "what": f"decode {r['model']} ({r['mode']})",
                        "GPUs / ranks": r["tp"], "time (ms)": r["s_per_token"] * 1e3,
                        "speed-up": r.get("speedup")})
    return out


table = speed_rows(own, own_label) + (speed_rows(ref2, "2x H200 (reference)") if ref2 else [])
pplots.speed_table(table, title="TP MLP and decode against one GPU (same mode at both sizes)")

# %%
if P["device"] == "cpu":
    notebook.record("parallel", "h200x2")     # on a CPU: the banner naming the recorded run
src = ref2 if ref2 is not None else (own if P["device"] == "cuda" else None)
if src is None or 2 not in src["summary"]["world_sizes"]:
    md("No two-GPU record is available here, so there is no GPU speed-up to show; the table above "
       "holds this machine's own figures.")
else:
    md(tp_model.explain_speedups(src))

# %% [markdown]
# ### Scaling to 4 and 8 GPUs
#
# With more GPUs the weights each GPU reads keep shrinking, but the per-layer costs and the
# all-reduces do not. Measured curves need a record from a machine with that many GPUs; the cell
# below lists the records that exist and plots 4 and 8 GPUs only when such records are present.
# §8 models the larger sizes from the 1- and 2-GPU record.

# %%
curves = dict(scaling)
if ref2 is not None:
    curves["h200x2"] = ref2
if P["device"] == "cuda":
    curves["this machine"] = own
if any(k in scaling for k in ("h200x4", "h200x8")):
    display(pplots.scaling_figure(curves, what="decode"))
    display(pplots.scaling_figure(curves, what="mlp"))
else:
    notebook.banner("No 4- or 8-GPU records exist (<code>data/reference/h200x4</code>, "
                    "<code>h200x8</code>): the records here are "
                    + (", ".join(sorted(curves)) or "none") + ". The table shows those only.", "warning")
pplots.tokens_table(curves if curves else {own_label: own})

# %% [markdown]
# ## 5. Pipeline parallelism
#
# Consecutive layers live on consecutive ranks; a batch is cut into `m` micro-batches that flow
# through the stages. While the pipeline fills and drains, ranks wait: with `p` stages and
# forward and backward steps of equal length, the idle *bubble* is (p-1)/(m+p-1) of the time.
# - **GPipe** runs all forwards, then all backwards: each rank keeps `m` micro-batches of
#   activations.
# - **1F1B** alternates one forward and one backward after a short warm-up: the same bubble, but rank
#   `r` keeps at most `p-r` micro-batches of activations.
# - **Interleaved 1F1B** (Narayanan et al. 2021) gives each rank `v` smaller chunks of the model
#   (rank r holds virtual stages r, r+p, ...), so each step is 1/v as long and the pipeline fills
#   v times faster: the bubble becomes (p-1)/(v·m+p-1), paid for with more messages (each
#   micro-batch crosses every rank v times) and more activations held during the warm-up.
#
# The schedules are pure functions (`schedules.actions`); `simulate` runs them with fixed step
# costs and free messages. The widget draws any of them; its bubble is read from the simulated
# timeline and set beside the formula.

# %%
show_source(schedules.actions)

# %%
schedule_widget = PipelineSchedules(p=4, m=8, kind="1f1b")
widgets.show(schedule_widget, schedule_widget.figure, "the pipeline-schedule widget")

# %%
md(schedules.explain_simulation("gpipe", 4, 8) + "\n\n" + schedules.explain_simulation("1f1b", 4, 8))

# %% [markdown]
# The real pipeline (`run_pipeline`) sends activations forward and gradients backward with
# point-to-point messages, paired the way Megatron-LM pairs them so that two neighbours never wait
# on each other. Its loss and every stage's gradients equal one process running the whole model:

# %%
show_source(pipeline._P2P)

# %%
pp = launcher.launch(pipeline.check_pp, WORLD, n_layers=4, m=4, backend="gloo")
md(f"GPipe and 1F1B on {WORLD} stages: loss within **{pp[-1]['gpipe_loss']:.1e}** / "
   f"**{pp[-1]['1f1b_loss']:.1e}**, gradients within "
   f"**{max(max(r['gpipe_grads'], r['1f1b_grads']) for r in pp):.1e}** of one process.")

# %%
pp_rows = [r for r in own["results"] if r["name"] == "pipeline"]
if ref2 is not None and ref2.get("timelines"):
    ref_pp = [r for r in ref2["results"] if r["name"] == "pipeline"]
    display(pplots.bubble_figure(ref_pp, 2, title="Bubble on 2x H200 (reference) against (p-1)/(m+p-1)"))
    m_top = max(r["m"] for r in ref_pp)
    g, f = ref2["timelines"][f"gpipe_p2_m{m_top}"], ref2["timelines"][f"1f1b_p2_m{m_top}"]
    display(pplots.timeline_figure(g, title=f"2x H200 (reference): GPipe, m={m_top}", unit="ms"))
    display(pplots.timeline_figure(f, title=f"2x H200 (reference): 1F1B, m={m_top}", unit="ms"))
    md(bubble.explain_bubble(g, "2x H200 (GPipe)") + "\n\n" + bubble.explain_bubble(f, "2x H200 (1F1B)")
       + "\n\n" + bubble.explain_schedules(g, f, "2x H200"))
if pp_rows:
    display(pplots.bubble_figure(pp_rows, 2, title=f"Bubble on this machine ({own_label})"))
    key = sorted(own.get("timelines", {}))[-1]
    display(pplots.timeline_figure(own["timelines"][key], title=f"This machine: {key}", unit="ms"))
    md(bubble.explain_bubble(own["timelines"][key], own_label))

# %% [markdown]
# ## 6. Expert parallelism
#
# A mixture-of-experts layer sends each token to its top-k experts (out of E) and sums their
# outputs, weighted by the router. With expert parallelism rank `r` holds E/n experts and its own
# tokens; an **all-to-all** sends every (token, expert) pair to the rank holding the expert
# (dispatch), and a second all-to-all brings the results back (combine). The number of rows each
# rank receives changes every step, so the ranks first exchange their counts.

# %%
show_source(expert.EPMoE.forward)

# %%
ep = launcher.launch(expert.check_ep, WORLD, n_experts=8, top_k=2, backend="gloo")
load = ep[0].pop("tokens_per_expert")
for r in ep[1:]:
    r.pop("tokens_per_expert")
display(pplots.bar_figure({f"expert {i} (rank {i // (8 // WORLD)})": v for i, v in enumerate(load)},
                          title="Tokens routed to each expert (top-2 of 8)", yaxis="tokens"))
md(f"Outputs and gradients (input, router, experts) equal the single-process MoE to "
   f"**{max(max(r.values()) for r in ep):.1e}** relative. " + pexplain.explain_load(load))

# %% [markdown]
# Timed by `course-kit bench parallel` (the run of §2): the MoE layer over the group's ranks against
# one rank holding every expert and routing every token; then the 2-GPU record, where it has them.

# %%
md(pexplain.explain_ep_cp_speed(own, own_label, "ep_moe") + "\n\n"
   + (pexplain.explain_ep_cp_speed(ref2, "the 2x H200 record", "ep_moe") if ref2 is not None else ""))

# %% [markdown]
# ## 7. Context parallelism: ring attention
#
# For very long sequences even one layer's activations do not fit. Context parallelism cuts the
# *sequence*: rank `r` holds chunk `r` of the queries, keys and values. Its queries must see every
# chunk's keys and values, so the K/V blocks travel around a ring while each rank attends to the
# block it holds, merging the partial results exactly with the online softmax of flash attention
# (notebook 08).

# %%
show_source(context.ring_attention)

# %%
cp = launcher.launch(context.check_cp, WORLD, backend="gloo")
md(f"Ring attention on {WORLD} ranks equals attention over the full sequence to "
   f"**{max(r['full'] for r in cp):.1e}** (no mask) and **{max(r['causal'] for r in cp):.1e}** (causal). "
   + pexplain.explain_causal_blocks([r['causal_blocks'] for r in cp]))

# %% [markdown]
# How much faster can `n` ranks be? The fair one-rank peer runs the *same* kernel on the *same*
# blocks (`blockwise_attention`: the sequence cut into `n` chunks, the blocks above the diagonal
# skipped when causal). Counting computed scores, one rank does `n²` blocks without a mask and
# `n(n+1)/2` with one, while the busiest ring rank, the last, does `n`: the split allows at most
# `n`x, and `(n+1)/2`x causal (1.5x at 2 ranks), until the chunks are reordered (zigzag). Against
# one whole `S x S` block on one rank the ratio would also count the block size.

# %%
show_source(context.speedup_bound)

# %%
md(pexplain.explain_ep_cp_speed(own, own_label, "ring_attention") + "\n\n"
   + (pexplain.explain_ep_cp_speed(ref2, "the 2x H200 record", "ring_attention") if ref2 is not None else ""))

# %% [markdown]
# ## 8. When does TP pay? Memory per GPU and time per token
#
# TP divides a model's weights and KV cache over the GPUs, and the bytes each GPU reads per
# decode step. What it does not divide: the fixed cost of each layer's small kernels, and the
# collectives (two all-reduces per layer, after attention and after the MLP, and one all-gather of
# the logits). An all-reduce of a few kilobytes is all latency. NCCL's ring pays a fixed cost plus
# one hop per step, 2(n-1) steps (NCCL's own tuning model has this form); the one-shot all-reduce
# pays one barrier whatever n is, then reads n-1 peer buffers.
#
# The model below takes its fixed parts from the records: two model sizes at TP=1 give the
# effective read bandwidth and the per-layer cost (two equations, two unknowns: solved exactly),
# TP=2 gives each algorithm's base latency inside a captured step. To test it on points it was not
# fitted to, each model's TP=2 times are also predicted from bases fitted on the other model alone.
# Only the hop latency and the bus bandwidth are assumptions, and they are sliders. (An eager call's alpha from §2 would be the wrong figure here: it holds the host's
# launch, which a captured step does not pay.)

# %%
show_source(tp_model.step_s)
show_source(tp_model.collective_s)

# %%
shapes = {n: tp_model.shape_of_config(measure.model_config(n)) for n in ("llama-1b", "llama3-8b")}
costs_src = ref2 if ref2 is not None else None
try:
    costs = tp_model.fit_costs(costs_src, shapes) if costs_src else None
except ValueError as err:       # a record without two models at TP=1 and 2
    print(f"No fit from the record: {err}")
    costs = None
if costs is not None:
    fit_rows = tp_model.predict_record(costs_src, shapes, costs)
    held = tp_model.held_out(costs_src, shapes)
    display(pplots.fit_table(fit_rows, held, title="2x H200 record: measured decode step (CUDA graph) against the model"))
    md(tp_model.explain_fit(fit_rows, held) + f" Fitted: read bandwidth **{costs.hbm_Bps / 1e12:.2f} TB/s**, "
       f"**{costs.per_layer_s * 1e6:.0f} µs** of fixed cost per layer, a captured all-reduce "
       f"**{costs.ring_base_s * 1e6:.1f} µs** (NCCL ring) and **{costs.one_shot_base_s * 1e6:.1f} µs** (one-shot) "
       f"at 2 GPUs.\n\n" + tp_model.explain_mode_choice(costs_src))
    try:
        tri = tp_model.fit_costs(costs_src, shapes, "triton_graph")
    except (ValueError, KeyError) as err:       # a record without the Triton step at both sizes
        print(f"No fit of the Triton step: {err}")
    else:
        tri_rows, tri_held = (tp_model.predict_record(costs_src, shapes, tri, "triton_graph"),
                              tp_model.held_out(costs_src, shapes, "triton_graph"))
        display(pplots.fit_table(tri_rows, tri_held, title="The same model fitted on the Triton step (one-shot all-reduce)"))
        md("Fitted on the Triton step: " + tp_model.explain_fit(tri_rows, tri_held)
           + f" Read bandwidth **{tri.hbm_Bps / 1e12:.2f} TB/s**, **{tri.per_layer_s * 1e6:.1f} µs** per layer, "
           f"a one-shot all-reduce **{tri.one_shot_base_s * 1e6:.1f} µs** at 2 GPUs.")
    small = min((r for r in ref2["results"] if r["name"] == "all_reduce" and r["n"] == 2), key=lambda r: r["bytes"])
    md(f"In the 2x H200 record, the smallest eager all-reduce of §2 ({small['bytes']:,} bytes) took **{small['median_s'] * 1e6:.1f} µs** "
       f"per call; the captured one in the decode step, about {costs.ring_base_s * 1e6:.1f} µs: the eager call is "
       f"{narrate.speed(small['median_s'], costs.ring_base_s).replace('than', 'than the captured one')}. "
       f"Same collective, same GPUs: one is launched by the host call by call, the other replayed from a graph. "
       f"So the model uses the captured figure, not the eager alpha.")

# %%
gpu_bytes = (torch.cuda.get_device_properties(0).total_memory if P["device"] == "cuda"
             else ((ref2 or {}).get("summary") or {}).get("gpu_memory_bytes", h200))
explorer = TPTradeoff(model="70b", seq=8192, batch=1, capacity_bytes=gpu_bytes,
                      capacity_label="this GPU" if P["device"] == "cuda" else "H200",
                      **({"costs": costs} if costs is not None else {}))
widgets.show(explorer, explorer.figures["time"], "the TP trade-off widget")

# %%
md("For Llama-2-70B with an 8k context at batch 1, NCCL's ring (memory in GiB):\n"
   + "\n".join(f"- {line}" for line in tp_model.explain_tradeoff(explorer.result, gpu_bytes)))

# %% [markdown]
# ## 9. Training: trading memory for time
#
# Sections 3-8 split a model over GPUs. A learner who *trains* meets three tools first, each of
# which trades memory for time or communication, and which combine:
#
# - **sharded data parallelism** (FSDP2, `torch.distributed.fsdp.fully_shard`): ZeRO-3 as PyTorch
#   ships it; each rank keeps 1/N of the weights, gradients and optimizer state, and gathers a
#   block's weights just before it runs;
# - **activation recomputation** (`torch.utils.checkpoint`): keep only each block's input and run
#   its forward again in the backward pass;
# - **gradient accumulation**: take a large batch's step in k micro-batches.
#
# Each is checked against what it replaces, and measured. Memory in MiB (2^20 bytes) here: the
# course model is small.

# %%
from course_kit.parallel import accumulate, fsdp, recompute
from course_kit.plots import train_parallel as tplots

TRAIN_PRESET = {"smoke": "smoke", "cpu": "cpu"}.get(P["size"], "small_gpu")   # TinyGPT
TRAIN_BATCH = {"smoke": 8, "cpu": 4}.get(P["size"], 8)
TRAIN_MICROS = tuple(k for k in (1, 2, 4, 8) if TRAIN_BATCH % k == 0)
TRAIN_DEVICE = P["device"]
show_source(fsdp.shard)

# %% [markdown]
# ### FSDP2 against plain data parallelism
#
# `fully_shard` turns every parameter into a DTensor sharded on its first dimension. Wrapping each
# block, then the root, gives one all-gather per block before its forward (and again before its
# backward), after which the block's full weights are freed, and one reduce-scatter of its
# gradients: each rank keeps the averaged gradient of its own shard, and AdamW, which sees only the
# shards, keeps only their state. Trained side by side with §3's plain DP on each rank's slice of
# the same batches, the two must end with the same parameters:

# %%
show_source(fsdp.check_fsdp)
fs = launcher.launch(fsdp.check_fsdp, WORLD, backend="gloo", steps=3)
md("**What just happened.** " + fsdp.explain_fsdp(fs[0]))
tplots.fsdp_bytes(fs[0])

# %%
fsdp_ref = notebook.record("train_parallel", "h200x2")
if fsdp_ref is None or not fsdp_ref.get("fsdp"):
    md(f"**{fsdp.PENDING}.** `measure_fsdp` is ready for it: FSDP2 against DDP over NCCL, one GPU per "
       f"rank, step time and peak memory (`course-kit bench train_parallel` on a machine with 2 GPUs).")
else:
    md(fsdp.explain_nccl(fsdp_ref["fsdp"][0]))

# %% [markdown]
# ### Activation recomputation
#
# A training step keeps, for the backward pass, the activations each operation needs for its
# gradient. Korthikanti et al. (2023, §4.1; §4's table in `parallel.sequence`) count them per
# transformer layer: $34\,sbh + 5as^2b$ bytes with 16-bit values ($s$ sequence, $b$ batch, $h$
# width, $a$ heads). The course model has no dropout (2 of the 34 are dropout masks) and its
# attention keeps no scores, so a layer keeps 16 values per $sbh$. With a checkpoint around each of
# the $L$ blocks it keeps only the block's input, 1 value per $sbh$, and recomputes one block at a
# time in the backward pass: $L\,sbh + 16\,sbh$ values instead of $16\,L\,sbh$, for one more forward
# pass per step.

# %%
show_source(recompute.enable)
show_source(recompute.activation_formula)

# %%
rc = recompute.check_grads("smoke")          # on the CPU, where kernels are deterministic
rc_plain = recompute.measure(TRAIN_PRESET, TRAIN_BATCH, recompute=False, device=TRAIN_DEVICE, repeat=7)
rc_with = recompute.measure(TRAIN_PRESET, TRAIN_BATCH, recompute=True, device=TRAIN_DEVICE, repeat=7)
md("**What just happened.** " + recompute.explain_grads(rc) + " " + recompute.explain_recompute(rc_plain, rc_with))
tplots.recompute(rc_plain, rc_with)

# %% [markdown]
# ### Gradient accumulation
#
# A batch's loss is the mean over its tokens. Cut the batch into k equal micro-batches, backpropagate
# each one's loss divided by k, and `.grad` adds up to the whole batch's gradient: one optimizer step
# afterwards is the large batch's step, with one micro-batch's activations alive at a time.

# %%
show_source(accumulate.accumulate_grads)
acc_check = accumulate.check_accumulation("smoke", batch=8, micro=4, steps=2)
acc_rows = accumulate.cost(TRAIN_PRESET, TRAIN_BATCH, TRAIN_MICROS, device=TRAIN_DEVICE, repeat=7)
md("**What just happened.** " + accumulate.explain_accumulation(acc_rows, acc_check))
tplots.accumulation(acc_rows)

# %%
train_ref = notebook.record("train_parallel")
if train_ref is not None and train_ref["recompute"].get("with") and train_ref["recompute"].get("without"):
    tr_gpu = train_ref["environment"].get("gpu") or "reference GPU"
    md(f"**On the {tr_gpu}** ({train_ref['params']['preset']} preset, batch {train_ref['params']['batch']}): "
       + recompute.explain_recompute(train_ref["recompute"]["without"], train_ref["recompute"]["with"])
       + ("\n\n" + accumulate.explain_accumulation(train_ref["accumulation"]) if train_ref.get("accumulation") else ""))
    fig = tplots.recompute(train_ref["recompute"]["without"], train_ref["recompute"]["with"],
                           title=f"Activation recomputation on {tr_gpu}")
else:
    fig = None
fig

# %% [markdown]
# ## Exercise 09.column_backward: the backward pass of a column-parallel linear
#
# §4 showed the row-parallel linear's code; the column-parallel one, `y_r = x W_r^T + b_r` on rank
# `r` (rank `r` holds rows `W_r` of the weight and the slice `b_r` of the bias, and the *whole* input
# `x`), was only checked. Write its backward pass, with the ranks simulated in one process as lists
# (item `r` of a list is what rank `r` holds):
#
# `column_parallel_backward(x, weight_shards, grad_out_shards)` gets the input `x` (shape
# `[..., in]`, any number of leading token dimensions, possibly none), every rank's weight shard
# (`[out_r, in]`) and every rank's slice of the output's gradient (`[..., out_r]`). Return
# `(grad_input, grad_weight_shards, grad_bias_shards)`: the gradient of `x` (`[..., in]`, what every
# rank holds once the backward pass's communication is done), and one `[out_r, in]` and one
# `[out_r]` tensor per rank, in float32 like the inputs. The shards need not be of equal sizes
# (`torch.tensor_split` cuts them). The check compares with `torch.autograd` on the unsharded
# linear, on rank counts and shapes you do not see.

# %% {"course_kit": {"exercise": "09.column_backward", "role": "solution", "points": 3, "task": "return (grad_input, grad_weight_shards, grad_bias_shards) of a column-parallel linear (see the task above)"}}
def column_parallel_backward(x, weight_shards, grad_out_shards):
    ### BEGIN SOLUTION
    x2 = x.reshape(-1, x.shape[-1])                        # every token contributes to the weight grads
    grad_w, grad_b, partials = [], [], []
    for w, g in zip(weight_shards, grad_out_shards):       # what each rank computes alone
        g2 = g.reshape(-1, g.shape[-1])
        grad_w.append(g2.t() @ x2)
        grad_b.append(g2.sum(0))
        partials.append(g @ w)                             # this rank's part of x's gradient
    grad_input = torch.stack(partials).sum(0)              # the all-reduce (sum) of copy_to_tp_region's backward
    return grad_input, grad_w, grad_b
    ### END SOLUTION

# %% {"course_kit": {"exercise": "09.column_backward", "role": "check"}}
from course_kit import grading
grading.check("09.column_backward", column_parallel_backward)

# %% {"course_kit": {"exercise": "09.column_backward", "role": "hidden"}}
grading.check("09.column_backward_hidden", column_parallel_backward)

# %% [markdown]
# ## Exercise 09.interleaved_bubble: predict, measure and explain the bubble of interleaved 1F1B
#
# Take `p = 5` stages, `m = 10` micro-batches and `v = 2` model chunks per rank, with the
# simulation's step costs (a backward twice a forward, messages free).
#
# 1. **Predict**, before running anything: the idle fraction (the bubble, between 0 and 1) of
#    interleaved 1F1B at these values. Record `PREDICTED_BUBBLE` and run the cell once before
#    step 2. The check requires the prediction but does not grade its accuracy.
# 2. **Measure** with the course's schedule simulation: `schedules.simulate("interleaved", p, m, v)`
#    gives the timeline, `schedules.bubble_of(events)` its idle fraction (`BUBBLE`) and
#    `schedules.peak_in_flight(events, 0)` the most activations rank 0 holds at once, in
#    micro-batches of a whole stage (`PEAK_RANK0`). Compare both with plain 1F1B at the same p and m.
# 3. **Explain**: `WHY`, the letter of the reason interleaving shrinks the bubble:
#    - `"a"`: each forward and backward step lasts 1/v as long, so filling and draining the pipeline
#      (p-1 steps each way) takes 1/v of the time while the useful work stays the same;
#    - `"b"`: the messages between stages are free in the simulation only when the model is cut in
#      chunks;
#    - `"c"`: each micro-batch is cut into v smaller micro-batches, so there are v times more of them;
#    - `"d"`: each rank holds fewer activations, so its steps run faster.

# %% {"course_kit": {"exercise": "09.interleaved_bubble", "role": "solution", "points": 2, "task": "record PREDICTED_BUBBLE, then measure BUBBLE and PEAK_RANK0 with the schedule simulation, then answer WHY (see the task above)"}}
p_, m_, v_ = 5, 10, 2
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTED_BUBBLE = (p_ - 1) / (v_ * m_ + p_ - 1)
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
events = schedules.simulate("interleaved", p_, m_, v_)
BUBBLE, PEAK_RANK0 = schedules.bubble_of(events), schedules.peak_in_flight(events, 0)
plain = schedules.simulate("1f1b", p_, m_)
print(f"interleaved: idle {BUBBLE:.3f}, rank 0 holds up to {PEAK_RANK0:g}; "
      f"1F1B: idle {schedules.bubble_of(plain):.3f}, rank 0 holds up to {schedules.peak_in_flight(plain, 0):g}")
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
WHY = "a"
### END SOLUTION

# %% {"course_kit": {"exercise": "09.interleaved_bubble", "role": "check"}}
from course_kit import grading
grading.check("09.interleaved_bubble", PREDICTED_BUBBLE, BUBBLE, PEAK_RANK0, WHY)

# %% {"course_kit": {"exercise": "09.interleaved_bubble", "role": "hidden"}}
grading.check("09.interleaved_bubble_hidden", WHY)

# %% [markdown]
# ## Summary
# - Data parallelism replicates the model and all-reduces gradients: equal to DDP, one all-reduce
#   per bucket. ZeRO shards its 16 bytes per parameter of training state by stage (optimizer
#   state, gradients, weights); ZeRO-1 gives exactly DP's parameters.
# - Sequence parallelism splits along the sequence the activations TP leaves whole (the norms, a GPT
#   layer's dropouts, the first linears' inputs), so all stored activations are divided by t.
# - Tensor parallelism splits matrices: column then row parallel needs one all-reduce per MLP and one
#   per attention; the communication ops are transposes of each other in the backward pass. It pays
#   for compute-bound work and, at batch 1, only once kernel launches are gone (CUDA graphs) and the
#   all-reduce latency is small beside the weight reads.
# - Pipeline parallelism splits layers; with equal steps and free messages its bubble is
#   (p-1)/(m+p-1) for GPipe and 1F1B (1F1B holding fewer activations), and (p-1)/(v·m+p-1) for
#   interleaved 1F1B. A measured timeline adds what the formula leaves out: unequal step times and
#   the time between steps.
# - Expert parallelism moves tokens to experts with two all-to-alls; context parallelism moves K/V
#   blocks around a ring and merges with the online softmax.
# - The alpha-beta model and bus bandwidth say what each collective costs on the link at hand.
# - Training trades memory for time three ways: FSDP2 shards parameters, gradients and optimizer
#   state (ZeRO-3) and gathers each block's weights when it runs; recomputation keeps a block's input
#   and recomputes its activations in the backward pass; gradient accumulation runs a large batch as
#   several small ones, with the same gradient.
#
# **Further reading**
# - M. Shoeybi et al., *Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
#   Parallelism* (2019); D. Narayanan et al., *Efficient Large-Scale Language Model Training on GPU
#   Clusters Using Megatron-LM* (SC 2021), for 1F1B and interleaving.
# - S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*
#   (SC 2020); V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer
#   Models* (MLSys 2023), for sequence parallelism.
# - NVIDIA NCCL, `src/graph/tuning.cc`: the latency model (base + steps x per-hop latency).
# - Y. Huang et al., *GPipe: Efficient Training of Giant Neural Networks using Pipeline Parallelism*
#   (NeurIPS 2019).
# - S. Li et al., *PyTorch Distributed: Experiences on Accelerating Data Parallel Training* (VLDB 2020).
# - PyTorch documentation: *FSDP2* (`torch.distributed.fsdp.fully_shard`) and *torch.utils.checkpoint*;
#   T. Chen et al., *Training Deep Nets with Sublinear Memory Cost* (2016), for recomputation.
# - D. Lepikhin et al., *GShard* (2020) and W. Fedus et al., *Switch Transformers* (2021), for MoE.
# - H. Liu et al., *Ring Attention with Blockwise Transformers for Near-Infinite Context* (2023).
# - NVIDIA, *nccl-tests* `doc/PERFORMANCE.md`, for algorithm and bus bandwidth.
# - Hugging Face *picotron* and PyTorch's *gpt-fast*, for compact TP code and tokens/s tables.
#
# **Next:** `10_capstone.ipynb` puts the course engine together and measures it against HF
# transformers on one workload.

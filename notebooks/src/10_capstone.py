# %% [markdown]
# # 10 · Capstone: the course engine against HF transformers
#
# Every notebook so far built one piece of a fast inference stack and measured it alone: dtypes
# (01), kernel fusion with torch.compile (03), CUDA graphs (05), continuous batching over a paged KV cache (06), the async step loop (07),
# fast attention kernels (08). Here they run together, on one workload, against the two ways most
# people serve a model with HF transformers: `generate` (static, padded batches) and `generate_batch`
# (transformers' own continuous batching). One technique is added at a time, so each one's share
# of the result is visible.
#
# {{BADGES}}
#
# **What you will learn**
# - how the techniques of the course add up on one workload, and which ones matter most where;
# - how to compare serving systems honestly: same requests, same lengths, same clock, correctness
#   first;
# - how to read the recorded H200 comparison when no GPU is at hand;
# - how to read one engine step in a profiler trace: kernels per step, the gaps between them, GPU idle.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# On a GPU the workload is `smollm-135m`-shaped in bf16 (random weights: the speed of a model does
# not depend on what it learned). On a CPU, the tiny model and a handful of requests show the same
# pipeline working; the H200 record shows the real comparison. `COURSE_KIT_SMOKE=1` (CI) is smallest.

# %% {"tags": ["parameters"]}
P = device.defaults()
ON_GPU = P["device"] == "cuda"
SIZE = P["size"]

# %%
import plotly.graph_objects as go
import torch

from course_kit import bench, benchmarks, notebook, reference, widgets
from course_kit.capstone import ladder
from course_kit.benchmarks import capstone, lesson_traces
from course_kit.notebook import md, show_source
from course_kit.plots import profiling as pplots, streams as splots
from course_kit.profiling import explain as pexplain, files as tfiles, trace as ptrace
from course_kit.widgets.capstone import TechniqueLadder

SAME_GPU = reference.load("capstone", reference.gpu_slug()) if ON_GPU else None   # a live figure's own record
md(f"Running on **{P['device']}** with dtype **{str(P['dtype']).replace('torch.', '')}**, sizes "
   f"**{SIZE}**{' (smoke: the smallest sizes)' if P['smoke'] else ''}.")

# %% [markdown]
# ## 1. The contestants
#
# | Variant | What it adds | Notebook |
# |---|---|---|
# | HF `generate` | static batches, left-padded to the longest prompt, each batch running until its longest request is done | — |
# | HF `generate_batch` | transformers' continuous batching with a paged cache, CUDA graphs on, its best attention | — |
# | engine: continuous + paged KV | requests admitted and retired every step, chunked prefill, KV in blocks; no CUDA graphs; the sync step loop | 06 |
# | engine: + CUDA graphs | each decode step replayed as one graph per padded batch size | 05, 06 |
# | engine: + fused blocks | the norms, RoPE, SwiGLU and residuals around attention compiled into a few kernels | 03, 06 |
# | engine: + async loop | step N+1 scheduled and prepared while step N runs; tokens carried on the GPU | 07 |
#
# On a GPU the engine's attention is Triton kernels that read the paged cache directly, for
# decodes and prefill chunks alike (06, built like 08's), and the weights are bf16 where the GPU
# has bf16 units (01).
# The benchmark checks correctness first: in fp32, each engine variant must produce HF `generate`'s
# greedy tokens. Then every variant runs the same requests, timed by the same synchronised clock.

# %%
show_source(capstone.engine_variants)
show_source(capstone._run)

# %% [markdown]
# ## 2. On this machine

# %%
own = benchmarks.run_topic("capstone", {"size": SIZE})
rows = [r for r in own["results"] if "throughput_tok_s" in r]

def table(rows_, title):
    peer = next((r["throughput_tok_s"] for r in rows_ if r["name"] == "HF generate"), None)
    # GPU idle: the profiler's (kernel intervals, a profiled pass); the step brackets' gaps are the host's
    # picture, shown apart and never called GPU idle
    cols = ["variant", "throughput (tok/s)", "vs HF generate", "TTFT p50 (ms)", "TPOT p50 (ms)",
            "GPU idle (profiler)", "between step brackets (host)"]
    fmt = lambda v, f: "—" if v is None or v != v else f.format(v)  # noqa: E731
    vals = [[r["name"] for r in rows_],
            [fmt(r["throughput_tok_s"], "{:,.0f}") for r in rows_],
            [fmt(r["throughput_tok_s"] / peer if peer else None, "{:.2f}x") for r in rows_],
            [fmt(r.get("ttft_p50_s", None) and r["ttft_p50_s"] * 1e3, "{:.1f}") for r in rows_],
            [fmt(r.get("tpot_p50_s", None) and r["tpot_p50_s"] * 1e3, "{:.2f}") for r in rows_],
            [fmt(r.get("gpu_idle_fraction"), "{:.1%}") for r in rows_],
            [fmt(r.get("host_step_gap_fraction"), "{:.1%}") for r in rows_]]
    fig = go.Figure(go.Table(columnwidth=[2.6, 1.2, 1.1, 1.1, 1.1, 1.2, 1.4],
                             header=dict(values=cols, align="left"), cells=dict(values=vals, align="left", height=28)))
    fig.update_layout(title=title, height=150 + 34 * len(rows_), margin=dict(t=40, b=10, l=10, r=10))
    return fig

table(rows, f"This machine ({own['environment'].get('gpu') or 'CPU'}), "
            f"{own['params']['n_requests']} requests, {own['summary']['output_tokens']} output tokens")

# %%
splots.bars(rows, "name", "throughput_tok_s", title="Throughput on this machine", y_title="output tokens / s")

# %%
s = own["summary"]
skipped = [r["name"] for r in own["results"] if "skipped" in r]
heads = []
if ON_GPU and "engine_vs_HF_generate_batch" in s:
    heads.append(notebook.headline("full engine over HF generate_batch", s["engine_vs_HF_generate_batch"],
                                   (SAME_GPU or {}).get("summary", {}).get("engine_vs_HF_generate_batch"), "x", 2))
text = (f"All engine variants matched HF `generate`'s greedy tokens in fp32: "
        f"**{all(s['correct_fp32'].values())}**. "
        + ladder.explain_summary(s, f"this machine ({own['environment'].get('gpu') or 'CPU'})"))
if heads:
    text += f" The full engine over HF `generate_batch` in this run: **{heads[0].text}**."
if skipped:
    text += f" Not run here: {', '.join(skipped)}."
if not ON_GPU:
    text += (f" This run is the `{own['params']['preset']}` model on a CPU with {s['output_tokens']} output tokens; "
             "the record below is the GPU workload.")
md(text, headlines=heads)

# %% [markdown]
# ## 3. The recorded H200 comparison

# %%
ref = notebook.record("capstone")
if ref:
    ref_rows = [r for r in ref["results"] if "throughput_tok_s" in r]
    fig = table(ref_rows, f"Reference: {ref['environment'].get('gpu', 'H200')}, {ref['params']['preset']} "
                          f"{ref['params']['dtype']}, {ref['params']['n_requests']} requests")
else:
    print("No reference record of `course-kit bench capstone` yet: it is made on the H200 with that command.")
    fig = None
fig

# %%
if ref:
    fig = go.Figure()
    fig.add_bar(x=[r["name"] for r in ref_rows], y=[r["throughput_tok_s"] for r in ref_rows],
                name=ref["environment"].get("gpu", "reference"))
    if ON_GPU:
        fig.add_bar(x=[r["name"] for r in rows], y=[r["throughput_tok_s"] for r in rows],
                    name=own["environment"].get("gpu", "this GPU"))
    fig.update_layout(barmode="group", yaxis_type="log", yaxis_title="output tokens / s (log)",
                      title="Throughput by variant", height=420)
else:
    fig = None
fig

# %%
if ref:
    md(ladder.explain_summary(ref["summary"], f"the reference {ref['environment'].get('gpu', 'GPU')}"))
    if not any(r.get("gpu_idle_fraction") is not None for r in ref_rows):
        md("The table's GPU idle is the profiler's (kernel intervals, from a profiled pass); this record predates "
           "it, so that column is empty until `course-kit bench capstone` is re-recorded on the H200. The last "
           "column is the host's picture: the share of the run outside the CUDA events around each whole step.")

# %% [markdown]
# ### The technique ladder
#
# Switch techniques off and on: the waterfall shows each one's gain over the step below it, from
# the record. The record measured the ladder in order, so a set that keeps the techniques from the
# bottom up is measured; any other set is composed from the recorded step gains, and says so. The
# Run button measures the variants that run on this machine with the tiny model (a few seconds;
# CUDA graphs and fused blocks need a GPU).

# %%
ladder_widget = TechniqueLadder(ref, where=f"the reference {ref['environment'].get('gpu', 'GPU')}" if ref else "")
widgets.show(ladder_widget, ladder_widget.figure, "the technique ladder")

# %%
show_source(ladder.waterfall)

# %% [markdown]
# ## 4. Where the time goes in the full engine
#
# The timeline of the full engine's run (the async loop of notebook 07): host work on `cpu`, input
# copies on `copy`, model steps on `gpu`. Look for the first steps, which prefill many prompts at
# once, and for how much of the host's work lies under the `gpu` spans. Its `gpu` spans are CUDA events
# around whole steps: the host's picture. The profiler's view of one step follows.

# %%
tl_source = own if ON_GPU or not ref else ref
if tl_source and tl_source.get("timeline"):
    recs = tl_source["timeline"]
    lanes = [l for l in ("cpu", "copy", "gpu") if any(r["lane"] == l for r in recs)]
    fig = splots.gantt(recs, f"Full engine, first steps ({tl_source['environment'].get('gpu') or 'CPU'})", lanes=lanes)
else:
    fig = None
fig

# %% [markdown]
# ### One engine step, kernel by kernel
#
# The full engine, profiled in a pass of its own (`torch.profiler`, each step marked `step k`). The
# chart shows one step: every kernel and copy on its stream (on a CPU, every operator on its thread),
# and in red the gaps inside the step, where the GPU waited for the next kernel. With CUDA graphs and
# fused blocks the host no longer launches each kernel, but the gaps between the kernels of a graph
# remain: that is what fusing further (fewer, larger kernels) would remove.

# %%
own_prof = lesson_traces.profile_lesson("10", {**P, "size": SIZE})
saved = [lesson_traces.save_row(r, "traces", steps=1) for r in own_prof]
rec_traces = notebook.record("traces", quiet=True)
ref_prof = [r for r in (rec_traces or {}).get("results", []) if r.get("lesson") == "10"]
ref_kept = {r["name"]: tfiles.load(r["name"]) for r in ref_prof}
runs_g = {f"this machine: {r['what']}": ptrace.gantt_rows(r["trace"], steps=1) for r in own_prof}
runs_g.update({f"H200 record: {r['what']}": ptrace.gantt_rows(ref_kept[r["name"]], steps=1)
               for r in ref_prof if ref_kept.get(r["name"])})
if not ref_prof:
    md("No H200 trace of the full engine is recorded yet (`course-kit bench traces` on the H200 records it): "
       "below is this machine's alone.")
pplots.gantt_pair(runs_g, "One step of the full engine (red: gaps inside the step)",
                  thresholds={n: (1.0 if n.startswith("H200") or ON_GPU else 5.0) for n in runs_g})

# %%
md("\n\n".join([pexplain.describe(r, f"This machine, {r['what']}") for r in own_prof]
                 + [pexplain.describe(r, f"The H200 record, {r['what']}") for r in ref_prof]
                 + [pexplain.how_to_open(p) for p in saved]))
pplots.top_kernels((ref_prof or own_prof)[0], "Costliest per step: " + (ref_prof or own_prof)[0]["what"]
                   + (" (H200 record)" if ref_prof else " (this machine)"))

# %% [markdown]
# ## 5. Speculative decoding: a third answer to the memory bound
#
# Notebook 05 measured why decoding one sequence is slow: each step reads every weight of the model
# (and launches every kernel) to produce **one** token. Notebook 06 answered by batching: one read of
# the weights serves many sequences. Speculative decoding answers for **one** sequence: a small
# *draft* model guesses the next $k$ tokens, one cheap step each; the large *main* model then
# scores all $k$ guesses in **one** pass, at positions $P, P+1, \dots, P+k$, reading its weights once.
# The longest prefix of guesses that the main model agrees with is kept, plus one token of the main model's
# own (the correction after the first wrong guess, or a bonus token when all $k$ were right). Every
# round yields between 1 and $k+1$ tokens for one pass of the main model.
#
# - **Greedy:** a guess is kept when it is the main model's own argmax there, so the output is the
#   main model's greedy output, token for token.
# - **Sampling** (Leviathan et al. 2023; Chen et al. 2023): keep guess $d_i$ with probability
#   $\min(1, p_i(d_i)/q_i(d_i))$ ($p$ the main model's distribution, $q$ the draft's); at the first
#   rejection draw from the normalised residual $\max(0, p_i - q_i)$. Every token is then distributed
#   exactly as the main model alone would draw it.
#
# If each guess is kept with probability $\alpha$, a round yields on average
# $E = (1 - \alpha^{k+1})/(1 - \alpha)$ tokens; if a draft step costs $c$ main-model steps, the expected
# speed-up is $E / (1 + k c)$ (Leviathan et al., theorem 3.8). It needs a draft that agrees often
# (high $\alpha$) and costs little (small $c$), and a verify pass over $k+1$ tokens that costs about
# one step.
#
# A random draft never agrees with a random main model, so this section needs **trained** models, and
# nothing may be downloaded. The course trains its own pair on text every Python install carries:
# the standard library's sources, with a byte-level BPE of 2,048 tokens. The main model is deep and
# narrow (16 layers); the draft is one layer of the same width, so at batch 1 on a GPU, where a step
# costs about its kernel launches, a draft step should cost about a tenth of a main-model step (measured
# below). After its own training the draft is trained once more on the main model's next-token
# distributions (distillation): agreeing with the main model is its whole job, so it gives up some of its
# own perplexity on the data for a higher $\alpha$.

# %%
from IPython.display import HTML, display

from course_kit import device
from course_kit.attention.registry import triton_kernels
from course_kit.models import llama
from course_kit.plots import speculative as spec_plots
from course_kit.capstone.speculative import at_batch, explain as spec_explain, measure, pair, rules
from course_kit.capstone.speculative.decoder import SpeculativeDecoder
from course_kit.widgets.speculative import SpeculationExplorer, tokens_html

SPEC_DTYPE = P["dtype"] if ON_GPU else torch.float32
SPEC_KERNELS = "triton" if triton_kernels(torch.device(P["device"])) else "torch"
SPEC_TOKENS = {"smoke": 12, "cpu": 24}.get(SIZE, 128)      # new tokens of the live decodes
main_model, draft = pair.load_pair(SPEC_DTYPE, P["device"])
tok = pair.tokenizer()
trained = pair.record()
prompt = measure.prompts(1, 48)[0]
def stage(m, name):
    return (f"{m[name]['tokens_seen'] / 1e6:.1f}M tokens, {m[name]['cpu_s'] / 60:.0f} min of one CPU core"
            if name in m else "")


rows_md = "".join(
    f"| {pair.ROLE_LABELS.get(role, role)} | {m['shape']['n_layers']} x {m['shape']['dim']} | {m['params'] / 1e6:.2f}M | {stage(m, 'train')} | "
    f"{stage(m, 'distill') or '-'} | {m['heldout_ppl']:.1f} |\n" for role, m in trained["models"].items())
md("| model | layers x width | parameters | trained on the data | distilled from the main model | held-out perplexity |\n"
   "|---|---|---|---|---|---|\n"
   + rows_md + f"\nTrained with `{trained['command'].strip()}` on Python {trained['python']}'s standard library "
   f"({trained['corpus']['train_files']} files; {trained['corpus']['heldout_files']} held out by a hash of their path). "
   f"The draft has {trained['models']['draft']['params'] / trained['models'][pair.MAIN_ROLE]['params']:.2f} of the "
   f"main model's parameters.")

# %% [markdown]
# ### One round, as the decoder runs it
#
# The decoder keeps the sequence, its length and the positions on the device, so a whole round (the
# draft's $k$ steps, the main model's verify pass, the acceptance, the rollback of rejected K/V) is one
# CUDA graph on a GPU, replayed without the host waiting in between. Rolling back costs nothing: the
# K/V that rejected tokens left in the caches sit past the sequence's length, where attention never
# reads, and the next round writes over them first.

# %%
show_source(SpeculativeDecoder._round_body)
show_source(rules.accept_greedy)
show_source(rules.accept_sampled)

# %% [markdown]
# The main model's verify pass is the batch-1 decode step of notebook 05 with one change: its $k+1$ rows
# all read and write the **same** cache row, each at its own position, so each token attends to
# those before it.

# %%
from course_kit.capstone.speculative import steps as spec_steps
show_source(spec_steps._rows_attend)

# %% [markdown]
# ### Live: the draft guesses, the main model decides
#
# A prompt from the held-out files (never seen in training), decoded greedily with $k = 3$. Green
# tokens were guessed by the draft and kept; orange ones are the main model's own, one per round.

# %%
live_dec = SpeculativeDecoder(main_model, draft, 3, max_seq=len(prompt) + SPEC_TOKENS + 16, kernels=SPEC_KERNELS)
live_tokens = live_dec.generate(prompt, SPEC_TOKENS, trace=True)
# the main model alone, through the same kernels (k = 0: one main-model step a round)
plain_tokens = SpeculativeDecoder(main_model, None, 0, max_seq=len(prompt) + SPEC_TOKENS + 16,
                                  kernels=SPEC_KERNELS).generate(prompt, SPEC_TOKENS)
st = live_dec.stats()
display(HTML(tokens_html([tok.decode([t]) for t in live_tokens], live_dec.provenance(SPEC_TOKENS))))
md(f"{st['rounds']} rounds of the main model gave {st['emitted'] + 1} tokens (the first from the prefill); each "
   f"draft position was kept at a rate alpha = **{st['alpha']:.2f}**. The tokens are "
   + ("**the same** as the main model's own greedy decoding." if live_tokens == plain_tokens
      else "**not** the same as the main model's own greedy decoding: a bug, or two logits within rounding of each other."))

# %% [markdown]
# ### Why verifying $k$ tokens costs about one step
#
# One pass of the main model over $M$ tokens, for $M$ from 1 to 8, and one draft step, each alone (on a
# GPU, each in its own CUDA graph). At batch 1 on a GPU the pass costs what reading the weights and
# launching the kernels costs, whatever $M$ is. A CPU computes the $M$ tokens' arithmetic one core's
# worth at a time, so there the cost grows with $M$.

# %%
spec_costs = measure.step_costs(main_model, draft, rows=(1, 4) if P["smoke"] else (1, 2, 4, 8), kernels=SPEC_KERNELS,
                                max_seq=256, repeat=10 if P["smoke"] else 20)
spec_ref = notebook.record("speculative")
ref_gpu = spec_ref["environment"].get("gpu", "the reference GPU") if spec_ref else None
here = f"this run ({P['device']})"
md(spec_explain.explain_verify_cost(spec_costs, here))
if spec_ref and spec_ref["summary"].get("step_costs"):
    md(spec_explain.explain_verify_cost(spec_ref["summary"]["step_costs"], f"the record ({ref_gpu})"))
    fig = spec_plots.verify_cost_figure(spec_ref["summary"]["step_costs"], title=f"The main model's pass on {ref_gpu}")
else:
    fig = spec_plots.verify_cost_figure(spec_costs, title=f"The main model's pass in {here}")
fig

# %% [markdown]
# ### Predicted against measured
#
# The record times, in one run on one GPU: the main model alone (notebook 05's fastest runner, the Triton
# decode step in a CUDA graph), speculation for $k = 1 \dots 8$, and HF transformers' assisted
# generation (`generate(..., assistant_model=...)`) on the same two checkpoints. For each $k$, the
# bars are the measured speed-up; the markers are Leviathan et al.'s prediction from that run's
# $\alpha$ and $c$.

# %%
if spec_ref:
    spec_rows = spec_plots.spec_rows(spec_ref)
    spec_sum = spec_ref["summary"]
    best = max(spec_rows, key=lambda r: r["tokens_per_s"])
    md(spec_explain.explain_best(spec_rows, spec_sum["target_alone_tokens_per_s"],
                                 spec_sum.get("hf_assisted_tokens_per_s"), f"the record ({ref_gpu})") + " "
       + spec_explain.explain_speedup(best, spec_sum["target_alone_tokens_per_s"], spec_sum["step_costs"],
                                      f"the record ({ref_gpu})"))
    fig = spec_plots.speedup_figure(spec_rows, title=f"Speculation over the main model alone, {ref_gpu}",
                                    selected_k=best["k"])
else:
    print("No record of `course-kit bench speculative` yet: it is made on the H200 with that command.")
    fig = None
fig

# %% [markdown]
# ### Why speculation pays less as the batch grows
#
# The same roofline as notebooks 00 and 05. At batch 1 a pass is bound by reading the weights, so
# $k+1$ tokens cost what one does. A batch of $B$ sequences already shares that read among $B$
# tokens; verifying $k+1$ guesses per sequence makes it $B(k+1)$ tokens, and once that passes the
# ridge point (peak FLOP/s over bandwidth, in tokens a pass: computed below) the pass is
# compute-bound: the guesses cost as much as computing the tokens plainly, and the rejected ones are
# pure waste. Below: the model of a round for a `llama-1b`-shaped main model and a `smollm-135m`-shaped
# draft, sequences of 256 tokens, with the H200's measured bandwidth and bf16 matmul rate and the
# record's $\alpha$.

# %%
from course_kit import reference
roof = reference.load("roofline") or {}
mm = reference.load("dtypes") or {}
gbs = (roof.get("summary") or {}).get("copy_gbs") or device.peaks("H200").hbm_gbs
tflops = (mm.get("summary") or {}).get("bf16_tflops") or device.peaks("H200").bf16
alpha_ref = (spec_ref or {}).get("summary", {}).get("alpha_best_k") or live_dec.stats()["alpha"]
big_t = at_batch.PassModel.of(llama.ModelConfig.from_preset("llama-1b"))
big_d = at_batch.PassModel.of(llama.ModelConfig.from_preset("smollm-135m"))
points = at_batch.curve(alpha_ref, 4, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], big_t, big_d, context=256, gbs=gbs,
                        tflops=tflops)
md(spec_explain.explain_batch(points, at_batch.ridge_tokens(2.0, gbs, tflops)))
spec_plots.batch_figure(points, title=f"Predicted speed-up of speculation (k = 4) against the batch")

# %% [markdown]
# ### Explore: $k$ and the draft
#
# Choose $k$ and the draft. The record's bars and sentence are redrawn at once: how often each draft
# position was kept, and the predicted beside the recorded speed-up. The record also ran two other
# drafts once each: an **untrained** draft of the same shape (it is almost never right) and **the
# main model itself** as its own draft (always right, and as costly as the main model). The Run button decodes
# live on this machine with the shipped checkpoints, with the chosen draft and $k$ (at most 3 on a
# CPU: a few seconds), and colours the tokens as above.

# %%
spec_drafts = {"trained": draft, "random": pair.random_draft(SPEC_DTYPE, P["device"]), pair.MAIN_ROLE: main_model}


def spec_live(which, k):
    out = measure.live_run(main_model, spec_drafts[which], k, prompt, SPEC_TOKENS, kernels=SPEC_KERNELS,
                           step_repeat=3)
    out["pieces"] = [tok.decode([t]) for t in out["tokens"]]
    return out


explorer = SpeculationExplorer(spec_ref, where=f"the record ({ref_gpu})" if spec_ref else "", live=spec_live, live_max_k=7 if ON_GPU else 3)
explorer.k.value = 3
widgets.show(explorer, explorer.figures.get("speedup"), "the speculation explorer")

# %% [markdown]
# **In short:** at batch 1 a pass of the main model costs about the same for one token or for a few, so a
# cheap draft's guesses can be checked almost for free; what speculation buys is $E/(1 + kc)$, set by
# how often the draft is right ($\alpha$) and what it costs ($c$); greedy output is unchanged and
# sampled output keeps the main model's distribution; and it pays less as the batch grows, because
# batching already spends the same spare compute.
#
# **Further reading (speculative decoding)**
# - Y. Leviathan, M. Kalman, Y. Matias, *Fast Inference from Transformers via Speculative Decoding*,
#   ICML 2023.
# - C. Chen et al., *Accelerating Large Language Model Decoding with Speculative Sampling*, 2023.
# - Hugging Face transformers documentation: *Assisted decoding* (`assistant_model`).

# %% [markdown]
# ## Exercise 10.first_rung: the ladder's first rung, counted
#
# The first rung replaces HF `generate`'s static batches with the engine's continuous batching. Its
# gain in tokens/s depends on the machine; the number of forward passes each makes does not. Where a
# step's time depends little on how many requests it holds, the ratio of the counts is close to the
# ratio of the throughputs.
#
# Eight requests arrive at once (prompt lengths `PROMPT_LENS`, new tokens `NEW_TOKENS`, greedy, EOS
# ignored). HF `generate` runs them as the benchmark does, in left-padded batches of 4
# (`hf_generate_static(hf, prompts, NEW_TOKENS, 4)`); the engine runs them with 4 slots and a budget
# of 64 tokens per step (`RUNG_OPTS`).
#
# 1. **Predict**, before running anything: how many steps (`engine.step()` calls) will the engine
#    take to finish every request? Record `PREDICTED_ENGINE_STEPS` (an int) and run the cell once
#    before step 2. The check requires the prediction but does not grade its accuracy.
# 2. **Measure** `HF_FORWARDS`, the number of forward passes of the HF model (count the calls of
#    `rung_hf`'s forward with `register_forward_hook`), and `ENGINE_STEPS`, the steps the course
#    engine takes (`Engine(rung_model, **RUNG_OPTS)`, `add_request` for each prompt, then `step()`
#    until `has_unfinished()` is False).
# 3. **Explain**: `WHY`, the letter of the reason the engine needs fewer forward passes here:
#    - `"a"`: a static batch runs until its longest request is done, so the slots of finished
#      requests compute padding and the next requests wait for the whole batch to end;
#    - `"b"`: the paged KV cache makes each forward pass of the engine cheaper;
#    - `"c"`: the engine's prefix cache skips the prompts' forward passes;
#    - `"d"`: HF generate recomputes the whole sequence at every step, without a KV cache.

# %% {"course_kit": {"exercise": "10.first_rung", "role": "solution", "points": 2, "task": "record PREDICTED_ENGINE_STEPS, then measure HF_FORWARDS and ENGINE_STEPS, then answer WHY (see the task above)"}}
from course_kit.benchmarks.batching import hf_generate_static
from course_kit.engine import Engine, SamplingParams
from course_kit.models import llama
from course_kit.models.hf import model_to_hf

PROMPT_LENS, NEW_TOKENS = [12, 30, 7, 22, 16, 9, 28, 5], [3, 40, 6, 33, 2, 38, 5, 30]
RUNG_OPTS = dict(policy="continuous", max_num_seqs=4, max_num_batched_tokens=64)
rung_model = llama.Transformer.from_preset("tiny", seed=0)
rung_hf = model_to_hf(rung_model)
gen = torch.Generator().manual_seed(10)
RUNG_PROMPTS = [torch.randint(1, rung_model.config.vocab_size, (n,), generator=gen).tolist() for n in PROMPT_LENS]
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTED_ENGINE_STEPS = 45
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
calls = []
hook = rung_hf.register_forward_hook(lambda module, args, out: calls.append(1))
hf_generate_static(rung_hf, RUNG_PROMPTS, NEW_TOKENS, 4)
hook.remove()
HF_FORWARDS = len(calls)
engine = Engine(rung_model, **RUNG_OPTS)
for p, n in zip(RUNG_PROMPTS, NEW_TOKENS):
    engine.add_request(p, SamplingParams(max_new_tokens=n, ignore_eos=True))
ENGINE_STEPS = 0
while engine.has_unfinished():
    engine.step()
    ENGINE_STEPS += 1
print(f"HF generate: {HF_FORWARDS} forward passes; the engine: {ENGINE_STEPS} steps")
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
WHY = "a"
### END SOLUTION

# %% {"course_kit": {"exercise": "10.first_rung", "role": "check"}}
from course_kit import grading
grading.check("10.first_rung", PREDICTED_ENGINE_STEPS, HF_FORWARDS, ENGINE_STEPS, WHY)

# %% {"course_kit": {"exercise": "10.first_rung", "role": "hidden"}}
grading.check("10.first_rung_hidden", WHY)


# %% [markdown]
# ## Summary
# - On one workload, with the same requests and the same clock, each technique of the course shows
#   its share: continuous batching and the paged cache remove padding and waiting; CUDA graphs
#   remove launch overhead from decode steps; fusing the blocks cuts the kernels each graph replays;
#   the async loop hides the host's work under the GPU's.
# - A profiler trace of one step shows what is left: kernels per step and the gaps between them,
#   GPU idle read from kernel intervals rather than from events around whole steps.
# - Correctness comes first: every engine variant reproduces HF `generate`'s greedy tokens in fp32.
# - Which technique gains most depends on the machine and the model: the ladder shows it for the
#   record at hand, and the live run for this machine.
#
# **Further reading**
# - W. Kwon et al., *Efficient Memory Management for Large Language Model Serving with
#   PagedAttention*, SOSP 2023 (vLLM).
# - G.-I. Yu et al., *Orca: A Distributed Serving System for Transformer-Based Generative Models*,
#   OSDI 2022 (continuous batching).
# - Hugging Face transformers documentation: *Continuous batching* (`generate_batch`).
# - T. Dao, *FlashAttention-2*, 2023.
#
# **Next:** the course ends here; notebook 09 (parallelism) shows how the same engine spreads over
# several GPUs when one is not enough.

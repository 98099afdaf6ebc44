# %% [markdown]
# # 07 · Async streams: keeping the GPU busy while the CPU prepares the next step
#
# A GPU runs what the host has queued, in order, and nothing else. An inference engine's step loop
# alternates host work (scheduling, building input tensors, reading back tokens) with GPU work (the
# model). Done one after the other, the GPU waits during every host stage: with fast kernels and CUDA
# graphs (notebook 05) those waits can become a large share of the time. This notebook shows the
# tools that let host and device work overlap (CUDA streams, events, pinned memory), the bugs they
# invite (races), and then applies them to the engine of notebook 06: while the GPU runs step N, the
# CPU schedules and prepares step N+1.
#
# {{BADGES}}
#
# **What you will learn**
# - what a CUDA stream is, why work on one stream is serialised and work on several can overlap;
# - how events and `wait_stream` order work across streams, and the two classic races (a missing
#   wait, a missing `record_stream`) with their fixes;
# - why host-to-device copies need pinned memory to overlap compute;
# - how to read a timeline: idle fraction, and the bound on what overlap can gain;
# - how to read a profiler trace of the engine: GPU idle from kernel intervals, split into the time
#   between steps (what async removes) and the time inside a step, which is itself two things: host
#   work the GPU waits for inside the step, and the short gaps between kernels (what fusion removes);
# - the engine's async mode: placeholders for tokens the host does not have yet, filled on the GPU.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# On a CPU the stream demonstrations show the recorded H200 runs, and the sync/async loops run with a
# worker thread standing in for the GPU. `COURSE_KIT_SMOKE=1` (CI) picks the smallest sizes.

# %% {"tags": ["parameters"]}
P = device.defaults()
SMOKE = P["smoke"]
ON_GPU = P["device"] == "cuda"
# the toy decode loop (section 5)
LOOP = dict(batch=8, steps=12 if SMOKE else 32, hidden=256, layers=4, prep_work=1500,
            repeat=2 if SMOKE else 3)   # best of `repeat` runs per mode
DEVICE_MS = 2.0                     # section 5: a "device" whose kernels take time but no host core
# the engine (sections 6 and 7)
ENGINE_MODEL = "smollm-135m" if ON_GPU else "tiny"
ENGINE_BATCH = 32 if ON_GPU else 4
ENGINE_REQUESTS = 2 * ENGINE_BATCH
NEW_TOKENS = 64 if ON_GPU else (6 if SMOKE else 16)
SWEEP_BATCHES = [4, 16, 64] if ON_GPU else ([2] if SMOKE else [2, 8])

# %%
import os

import torch

from course_kit import bench, benchmarks, narrate, notebook, reference, streams
from course_kit.benchmarks import async_blog, async_engine as async_bench, lesson_traces
from course_kit.engine import Engine, SamplingParams
from course_kit.streams.async_loop import AsyncEngine
from course_kit.models import llama
from course_kit.notebook import md, show_source
from course_kit.plots import profiling as pplots, streams as splots
from course_kit.profiling import explain as pexplain, files as tfiles, trace as ptrace
from course_kit.profiling import step_gaps
from course_kit.streams import gpu, sweep
from course_kit.streams.explain import explain_blog, explain_pair, overlap_figures, which_mattered
from course_kit.widgets import show
from course_kit.widgets.streams import OverlapExplorer

SAME_GPU_STREAMS = reference.load("streams", reference.gpu_slug()) if ON_GPU else None   # a live figure's own record
print(f"device {P['device']}, dtype {device.dtype_name(P['dtype'])}, size {P['size']}, "
      f"toy loop: batch {LOOP['batch']}, {LOOP['steps']} steps; engine: {ENGINE_MODEL}, batch {ENGINE_BATCH}")

# %% [markdown]
# ## 1. A stream is a queue
#
# Every CUDA kernel and copy is *enqueued* on a **stream** and the host returns at once. Work on one
# stream runs in order; work on different streams may run at the same time when the GPU has room.
# PyTorch puts everything on the current stream, which is the **default stream** unless you pick
# another with `torch.cuda.stream(s)`. So independent pieces of work launched one after another from
# PyTorch are serialised, even if each one leaves most of the GPU idle.
#
# To make this visible we use a kernel that occupies a single GPU thread for a set time
# (`torch.cuda._sleep`, a spin loop): four of them on one stream take four times as long; on four
# streams they overlap. The timeline is read from CUDA events recorded around each piece of work.

# %%
show_source(gpu.concurrency_demo)

# %%
if ON_GPU:
    conc = gpu.concurrency_demo(n_streams=4, kind="spin", kernel_ms=2.0)
    conc_tls = {m: conc[m]["timeline"] for m in ("one stream", "one stream each")}
    conc_speedup = conc["speedup"]
else:
    rec_streams = notebook.record("streams")
    conc_tls = ({m: rec_streams["timelines"][f"spin: {m}"] for m in ("one stream", "one stream each")}
                if rec_streams else None)
    conc_speedup = rec_streams["summary"]["spin_concurrency_speedup"] if rec_streams else None


def here(text: str) -> str:
    """A sentence about this section's streams run, labelled when it is the reference GPU's record."""
    if ON_GPU or not rec_streams:
        return text
    return f"Recorded on the reference {rec_streams['environment'].get('gpu', 'GPU')}: {text[0].lower()}{text[1:]}"


fig = splots.gantt_pair(conc_tls, "4 spin kernels: one stream, then one stream each") if conc_tls else None
fig

# %%
if conc_speedup is not None:
    words = narrate.ratio_words(conc_speedup, better="sooner", worse="later", same="at about the same time as")
    h = notebook.headline("four spin kernels, one stream each over one stream", conc_speedup,
                          (SAME_GPU_STREAMS or {}).get("summary", {}).get("spin_concurrency_speedup") if ON_GPU else None,
                          "x", 2)
    md(here(f"The same four kernels finish **{words}** on one stream when each has its own stream "
            f"(the ratio: {h.text}). Nothing about the kernels changed: only the queue they were put on."),
       headlines=[h] if ON_GPU else None)
else:
    md("No GPU here and no recorded run yet: run `course-kit bench streams` on a GPU to fill this in.")

# %% [markdown]
# ### The legacy default stream
# The default stream has one more rule, inherited from CUDA's early days: it synchronises with every
# *blocking* stream. Work queued on it waits for everything already queued on blocking streams, and
# later work on those streams waits for it. PyTorch creates its streams *non-blocking*, so they
# escape this rule; streams created by plain `cudaStreamCreate` (as a C++ library might) do not.
# Below: a spin on stream A, a tiny op on the default stream, a spin on stream B.

# %%
show_source(gpu.legacy_default_stream_demo)

# %%
if ON_GPU:
    legacy = gpu.legacy_default_stream_demo(kernel_ms=2.0)
    legacy_tls = {n: v["timeline"] for n, v in legacy.items() if n != "blocking_available"}
    legacy_ms = {n: v["ms"] for n, v in legacy.items() if n != "blocking_available"}
else:
    legacy_tls = ({k.split(": ", 1)[1]: v for k, v in rec_streams["timelines"].items() if k.startswith("legacy: ")}
                  if rec_streams else None)
    legacy_ms = ({r["name"].split(": ", 1)[1]: r["ms"] for r in rec_streams["results"]
                  if r["name"].startswith("legacy default stream: ")} if rec_streams else None)
fig = splots.gantt_pair(legacy_tls, "A tiny op on the legacy default stream between two streams") if legacy_tls else None
fig

# %%
if legacy_ms:
    text = "; ".join(f"{n}: **{ms:.2f} ms**" for n, ms in legacy_ms.items()) + ". "
    if len(legacy_ms) > 1:
        ratio = legacy_ms["blocking streams (cudaStreamCreate)"] / legacy_ms["non-blocking streams (PyTorch's)"]
        text += (f"With blocking streams the same work ran **{narrate.ratio_words(1 / ratio)}** with non-blocking "
                 "ones" + (": in the timelines the tiny default-stream op turned two overlapping kernels into a "
                           "sequence." if ratio > 1.5 else " (compare the two timelines)."))
    else:
        text += "Blocking streams could not be created here (the CUDA runtime library was not reachable)."
    md(here(text))

# %% [markdown]
# ## 2. Ordering across streams: events, `wait_event`, `wait_stream`
#
# Concurrency has a price: the GPU no longer orders work for you. If stream B reads what stream A
# writes, B must wait. An **event** is a marker recorded on a stream; `B.wait_event(e)` makes B's
# later work wait until A reaches the marker (the host does not wait), and `B.wait_stream(A)` is the
# same with an event recorded for you. Below, the producer spins (a long kernel) and then writes
# `x = 1`; the consumer computes `y = 2 * x`. Without a wait, the consumer reads `x` before it is
# written.

# %%
show_source(gpu.missing_wait_demo)

# %%
def race_table(result):
    import plotly.graph_objects as go
    names = list(result)
    cells = [names, [f"{result[n]['y_mean']:g}" for n in names], [f"{result[n]['expected']:g}" for n in names],
             ["✅" if result[n]["correct"] else "❌ wrong" for n in names]]
    fig = go.Figure(go.Table(header=dict(values=["variant", "mean of y", "expected", "result"]),
                             cells=dict(values=cells)))
    fig.update_layout(height=80 + 30 * len(names), margin=dict(t=10, b=10))
    return fig

if ON_GPU:
    wait = gpu.missing_wait_demo()
else:
    rec_streams = notebook.record("streams")
    wait = None
    if rec_streams:
        rows = {r["name"]: r for r in rec_streams["results"]}
        wait = {n: {**rows[n], "timeline": rec_streams["timelines"][n]}
                for n in ("racy (no wait)", "fixed (wait_event)", "fixed (wait_stream)")}
race_table(wait) if wait else None

# %%
(splots.gantt_pair({n: wait[n]["timeline"] for n in ("racy (no wait)", "fixed (wait_event)")},
                   "Producer and consumer streams") if wait else None)

# %% [markdown]
# The racy timeline shows the consumer's kernel running *during* the producer's spin: it read the
# zeros that were there before. With the wait, it starts only when the producer is done.
#
# ## 3. The other race: memory freed while another stream still reads it
#
# PyTorch's caching allocator remembers which stream each block was allocated on. When a tensor
# dies on the host, its memory may be handed out again to the *next allocation on that stream* at
# once: work on that stream runs in order, so it is safe *for that stream*. But if a side stream was
# still going to read the tensor, the new owner may overwrite it first. `x.record_stream(side)` tells
# the allocator to wait for the side stream's queued work before reusing the memory.

# %%
show_source(gpu.missing_record_stream_demo)

# %%
if ON_GPU:
    rs = gpu.missing_record_stream_demo()
else:
    rs = None
    if rec_streams:
        rows = {r["name"]: r for r in rec_streams["results"]}
        rs = {n: {**rows[n], "timeline": rec_streams["timelines"][n]}
              for n in ("racy (no record_stream)", "fixed (record_stream)")}
race_table(rs) if rs else None

# %%
if rs:
    racy = rs["racy (no record_stream)"]
    md(here(f"Without `record_stream`, the new tensor {'reused' if racy['memory_reused'] else 'did not reuse'} "
            f"the freed memory and the side stream read **{racy['y_mean']:g}** where 2 was expected "
            f"(7, the new tensor's value, doubled). With it, the result is "
            f"**{rs['fixed (record_stream)']['y_mean']:g}**."))

# %% [markdown]
# ## 4. Copies that overlap compute need pinned memory
#
# A host-to-device copy is done by the GPU's copy engines, which run beside the compute units, but
# only from **pinned** (page-locked) host memory: the engine reads it directly. From ordinary
# (pageable) memory, the driver first copies the data into a pinned staging buffer on the CPU, and
# the call returns only when that is done, so the host is blocked and cannot queue the compute in the
# meantime. With pinned memory, `copy_(src, non_blocking=True)` on a side stream returns at once, and
# the copy and the matmuls run together.

# %%
show_source(gpu.copy_overlap_demo)

# %%
if ON_GPU:
    copy = gpu.copy_overlap_demo(mbytes=256 if P["size"] == "full" else 64)
    copy_rows = [{"name": n, "ms": v["total_ms"], "host_blocked_ms": v["host_blocked_ms"],
                  "speedup_vs_serial": v["speedup_vs_serial"], "timeline": v["timeline"]}
                 for n, v in copy["variants"].items()]
else:
    copy_rows = None
    if rec_streams:
        copy_rows = [{**r, "timeline": rec_streams["timelines"][r["name"]]} for r in rec_streams["results"]
                     if r["name"].startswith(("serial", "copy stream"))]
(splots.gantt_pair({r["name"]: r["timeline"] for r in copy_rows}, "Copy and compute", shared_x=True)
 if copy_rows else None)

# %%
if copy_rows:
    by = {r["name"]: r for r in copy_rows}
    pin, page = by["copy stream: pinned, non_blocking"], by["copy stream: pageable, non_blocking"]
    h = notebook.headline("pinned copy beside compute over copy-then-compute", pin["speedup_vs_serial"],
                          (SAME_GPU_STREAMS or {}).get("summary", {}).get("pinned_overlap_speedup") if ON_GPU else None,
                          "x", 2)
    md(here(f"Pinned + `non_blocking` on a copy stream: **{narrate.ratio_words(pin['speedup_vs_serial'])}** "
            f"copy-then-compute ({h.text}), and the host was held for **{pin['host_blocked_ms']:.2f} ms**. From pageable "
            f"memory the host was held **{page['host_blocked_ms']:.2f} ms**, and the copy stream ran "
            f"**{narrate.ratio_words(page['speedup_vs_serial'])}** copy-then-compute."),
       headlines=[h] if ON_GPU else None)

# %% [markdown]
# ## 5. The step loop, sync and async, on any machine
#
# The same ideas without a GPU: `HostDevice` is a worker thread executing submitted work in order,
# like one stream. The "model" is real torch matmuls (which release Python's GIL, so they can run
# beside the host thread); the host's part of a step is Python bookkeeping, as a scheduler's is.
#
# - **sync**: prepare step N, submit it, wait for its tokens, postprocess, repeat.
# - **async**: prepare step N+1 while the device runs step N. Step N's tokens are not known yet, so
#   step N+1's inputs carry a placeholder (-1); the device fills it from the tokens it produced
#   itself. The host postprocesses step N after it has queued step N+1.

# %%
show_source(streams.HostDevice)
show_source(streams.decode_loop)

# %%
cpu_cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
real = streams.compare(**LOOP)
ideal = streams.compare(**LOOP, device_ms=DEVICE_MS)
assert real["sync"]["outputs"] == real["async"]["outputs"]
splots.gantt_pair({"sync": real["sync"]["timeline"], "async": real["async"]["timeline"]},
                  "Worker-thread device, real matmuls")

# %%
splots.gantt_pair({"sync": ideal["sync"]["timeline"], "async": ideal["async"]["timeline"]},
                  f"A device whose steps last at least {DEVICE_MS} ms without using a host core")

# %% [markdown]
# In the first run the "device" is a thread of this Python process doing real matmuls, so it competes
# with the host thread for the machine's cores and for Python's interpreter lock; in the second, each
# device step lasts at least `DEVICE_MS` while sleeping, as a GPU's kernels take time without using a
# host core. Which of these mattered in *this* run is read from the timelines: the explanation below
# compares each lane's busy time in the two modes.

# %%
def loop_explained(name, r):
    return f"- **{name}**: " + explain_pair(r["sync"]["timeline"], r["async"]["timeline"],
                                            lanes=("cpu", "device"), device_lane="device", device_name="device")

figs = {name: overlap_figures(r["sync"]["timeline"], r["async"]["timeline"], lanes=("cpu", "device"),
                              device_lane="device") for name, r in (("real", real), ("ideal", ideal))}
md("\n".join([f"Tokens identical in both modes. This process may use {cpu_cores or '?'} CPU cores.",
              loop_explained("real matmuls on a worker thread", real),
              loop_explained(f"device steps of at least {DEVICE_MS} ms", ideal), "",
              which_mattered(figs["real"], figs["ideal"])]))

# %% [markdown]
# ### Reading a timeline
# Two numbers summarise a timeline. The **idle fraction** of a lane is the share of the wall time in
# which nothing ran on it. The **bound on the speed-up from overlap**: once host and device work
# overlap perfectly, a step can be no shorter than its busiest lane, so the best speed-up is
# `wall time / max(GPU busy, CPU busy)`. When the GPU is the busier lane this is `1 / (1 - idle)`:
# if every lane stays busy exactly as long as before, a GPU idle 20% of the time can gain at most
# `1 / 0.8 = 1.25x`. That "if" matters: the bound is read from the sync timeline, and the async run
# has busy times of its own (a step queued behind another may run a little faster, host work beside
# a busy thread a little slower). So a measured gain can land above the bound as well as below it; to
# know which lane changed, compare the busy times of the two timelines, as the explanations in this
# notebook do. The exercises at the end predict the async run from a sync timeline.
#
# A timeline is only as fine as its spans. Here the device lane holds the work itself. The engine of
# section 6 records its GPU lane with two CUDA events around each *whole step*: every gap between two
# kernels inside a step counts as busy there. That timeline is the host's picture of the loop. What
# the GPU did, and when it waited, is read from a profiler trace instead: **GPU idle** = 1 − (union of
# the kernels' and copies' execution intervals) / (the window's wall time), measured in a profiled pass
# of its own (section 6 shows one).

# %%
show_source(streams.Timeline.idle_fraction)
show_source(streams.Timeline.overlap_speedup_bound)

# %% [markdown]
# ### Try it: host work per step against device time
# The widget reruns the step loop above (the toy model, a device whose steps last at least the chosen
# time) each time a control moves, and draws the CPU and device lanes of its timeline with their idle
# share. Give the host more work per step and watch the device lane empty in sync mode; switch to
# async and see how much of that idle time the overlap hides.

# %%
overlap = OverlapExplorer(prep_work=LOOP["prep_work"], device_ms=DEVICE_MS)
show(overlap.widget, overlap.figure, "the overlap widget")

# %% [markdown]
# ## 6. The engine's async mode
#
# Now the real engine of notebook 06. `AsyncEngine` keeps its four stages (schedule, prepare, run,
# postprocess) but reorders them across steps:
#
# 1. schedule step N+1 and build its inputs in **pinned** buffers, copied on a **copy stream**;
# 2. launch it: the compute stream waits on the copy's event, then, on the device, the
#    **placeholders** for step N's tokens are filled from step N's sampled tokens (`index_copy`);
# 3. only then wait for step N's tokens and postprocess them (append, detect EOS, free blocks);
# 4. advance every sequence of step N+1 by a placeholder, so that step N+2 can be scheduled.
#
# A request that reaches `max_new_tokens` is retired as soon as its last step is launched, since
# its length is known. An EOS is seen one step late: the extra token computed for that request is
# dropped, so the outputs are identical to the sync engine's. On a CPU, a worker thread plays the GPU.

# %%
show_source(AsyncEngine.step)
show_source(AsyncEngine._fill_rows)
show_source(AsyncEngine._device_step)

# %%
dtype = P["dtype"]   # bf16 where the GPU has bf16 units, fp16 on a T4, fp32 on a CPU
model = llama.Transformer.from_preset(ENGINE_MODEL, seed=0, dtype=dtype, device=P["device"])
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(0, model.config.vocab_size, (int(n),), generator=g).tolist()
           for n in torch.randint(8, 128 if ON_GPU else 32, (ENGINE_REQUESTS,), generator=g)]
sp = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
max_len = max(map(len, prompts)) + NEW_TOKENS
engines = {mode: AsyncEngine(model, mode=mode, max_num_seqs=ENGINE_BATCH, max_model_len=max_len)
           for mode in ("sync", "async")}
runs, tokens = {}, {}
for _ in range(2):                      # best of two runs per mode, alternating
    for mode, eng in engines.items():
        outs = eng.generate(prompts, sp)
        tokens.setdefault(mode, [o.tokens for o in outs])
        t = eng.timing()
        if mode not in runs or t["wall_s"] < runs[mode][0]["wall_s"]:
            runs[mode] = (t, eng.timeline.shifted())
assert tokens["async"] == tokens["sync"], "async outputs differ from sync outputs"
base = Engine(model, max_num_seqs=ENGINE_BATCH, max_model_len=max_len).generate(prompts, sp)
print(f"{len(prompts)} requests: async and sync outputs are token-identical; identical to notebook 06's "
      f"Engine as well: {[o.tokens for o in base] == tokens['sync']}")
splots.gantt_pair({m: tl for m, (t, tl) in runs.items()}, f"Engine steps ({ENGINE_MODEL}, batch {ENGINE_BATCH})",
                  lanes=["cpu", "copy", "gpu"] if ON_GPU else ["cpu", "gpu"])

# %%
ts, ta = runs["sync"][0], runs["async"][0]
md(f"On this machine ({'GPU' if ON_GPU else 'CPU, worker thread as the device'}): throughput "
   f"**{ts['tokens_per_s']:,.0f}** → **{ta['tokens_per_s']:,.0f}** tokens/s. Median per step in sync: CPU "
   f"**{ts['cpu_step_s_median'] * 1e3:.2f} ms**, GPU **{ts['gpu_step_s_median'] * 1e3:.2f} ms**. "
   + explain_pair(runs["sync"][1], runs["async"][1]))

# %% [markdown]
# ### What the GPU did: the profiler's view of the engine
#
# The same engine, run again under `torch.profiler` (a pass of its own, so the timed runs above stay
# unprofiled). Each step is marked with `record_function("step k")`; every kernel and copy is
# attributed to the step whose host call launched it. The idle time then splits in two: **between
# steps** (the GPU waits for the host to prepare the next step: what the async loop removes) and
# **inside steps**, from a step's first GPU activity to its last. Inside a step there are two kinds of
# wait: host work the GPU waits for while the step is under way (a step's input copies can run
# before the host has launched the rest of it), which shows as one long gap, and the many short gaps
# between kernels (launch latency, even inside a CUDA graph: what fusion and megakernels remove).
# Which of the two dominates is read from the trace below: each step's largest gap against the rest,
# and the host call that was running during it. On a CPU the "device" is the worker thread, and the
# trace holds operators.

# %%
show_source(AsyncEngine.step, span="with record_function")

# %%
own_prof = lesson_traces.profile_lesson("07", P)          # sync and async, profiled on this machine
saved = [lesson_traces.save_row(r, "traces") for r in own_prof]
rec_traces = notebook.record("traces", quiet=True)
ref_prof = [r for r in (rec_traces or {}).get("results", []) if r.get("lesson") == "07"]
ref_kept = {r["name"]: tfiles.load(r["name"]) for r in ref_prof}
runs_g = {f"this machine, {r['variant']}": ptrace.gantt_rows(r["trace"], steps=3) for r in own_prof}
runs_g.update({f"H200 record, {r['variant']}": ptrace.gantt_rows(ref_kept[r["name"]], steps=3)
               for r in ref_prof if ref_kept.get(r["name"])})
if not ref_prof:
    md("No H200 trace of the engine is recorded yet (`course-kit bench traces` on the H200 records it): "
       "below is this machine's alone.")
pplots.gantt_pair(runs_g, "Three engine steps, operator by operator or kernel by kernel (red: gaps inside a step)",
                  thresholds={n: (1.0 if n.startswith("H200") or ON_GPU else 5.0) for n in runs_g})

# %%
by_p = {r["variant"]: r for r in own_prof}
lines = [pexplain.describe(r, f"This machine, {r['what']}") for r in own_prof]
lines.append("This machine: " + pexplain.compare(by_p["sync"], by_p["async"], ("sync", "async")))
if ref_prof:
    by_r = {r["variant"]: r for r in ref_prof}
    lines += [pexplain.describe(r, f"The H200 record, {r['what']}") for r in ref_prof]
    lines.append("The H200 record: " + pexplain.compare(by_r["sync"], by_r["async"], ("sync", "async")))
# inside-step idle: each step's largest gap (and the host call under it) against the short gaps
lines += [step_gaps.explain_step_gaps(step_gaps.from_trace(r["trace"]), f"This machine, {r['variant']} loop")
          for r in own_prof]
lines += [step_gaps.explain_step_gaps(step_gaps.from_trace(ref_kept[r["name"]]),
                                      f"The H200 record's kept steps, {r['variant']} loop")
          for r in ref_prof if ref_kept.get(r["name"])]
lines += [pexplain.how_to_open(p) for p in saved]
md("\n\n".join(lines))

# %% [markdown]
# ## 7. Across batch sizes and model sizes
#
# The gain depends on the ratio of host time to device time per step. A larger batch or a larger
# model lengthens the GPU's part of a step, but the host's part grows with the batch too (more
# sequences to schedule, more inputs to build, more tokens to read back), so which way the idle share
# moves with the batch is a measurement, not a rule: it is read below from the sweep's own rows.
# `course-kit bench async` runs the batch sizes and models of its size class; here it runs at this
# machine's size, and the H200 record is shown beside it, with the cases it holds.

# %%
show_source(async_bench.headline)

# %%
own = benchmarks.run_topic("async", {"size": P["size"], "batches": SWEEP_BATCHES, "blog": False,   # minutes on a GPU: a bar
                                "models": [ENGINE_MODEL], "new_tokens": NEW_TOKENS})
md("This machine's sweep: " + sweep.sweep_words(own["results"]))
splots.idle_and_throughput(own["results"], x="batch", group="model",
                           title=f"This machine ({own['environment'].get('gpu') or 'CPU'})")

# %%
# on a GPU every row carries both figures: the step brackets' (host) and the profiler's (GPU idle)
gpu_rows = [r for r in own["results"] if r.get("gpu_idle_fraction") is not None]
if gpu_rows:
    r = max(gpu_rows, key=lambda r: abs(r["gpu_idle_fraction"] - r["host_step_gap_fraction"]))
    md("This machine, the case where they differ most: " + pexplain.event_vs_profiler(
        r["host_step_gap_fraction"], r["gpu_idle_fraction"], r.get("gpu_idle_within_steps"),
        f"{r['model']} at batch {r['batch']}, {r['mode']} loop"))

# %%
ref_async = notebook.record("async", quiet=True)
if ref_async is None:
    notebook.banner("No H200 record of <code>course-kit bench async</code> yet; it will appear here once recorded.",
                    "warning")
else:
    md(f"The {ref_async['environment'].get('gpu', 'H200')} record of `course-kit bench async` is drawn below. "
       + sweep.describe_record(ref_async["results"]))
fig = (splots.idle_and_throughput(ref_async["results"], x="batch", group="model",
                                  title=f"Reference: {ref_async['environment'].get('gpu', 'H200')}")
       if ref_async else None)
fig

# %%
head = ref_async["summary"].get("headline") if ref_async else None
if head:
    key = f"{head['model']}/b{head['batch']}"
    fig = splots.gantt_pair({m: ref_async["timelines"][f"{key}/{m}"] for m in ("sync", "async")},
                            f"Reference timelines, {head['model']} at batch {head['batch']}",
                            lanes=["cpu", "copy", "gpu"])
    # both modes' busy times, computed from the recorded timelines (the bound read from sync
    # assumes they stay the same; the explanation says whether they did)
    rows_h = {r["mode"]: r for r in ref_async["results"] if r["model"] == head["model"] and r["batch"] == head["batch"]}
    # the speed-up is the record's (tokens/s over the whole run, as plotted above), not the ratio of
    # the timelines' windows, which leave out each run's start and drain
    md(f"On the reference GPU, at {head['model']} batch {head['batch']}: "
       + explain_pair(ref_async["timelines"][f"{key}/sync"], ref_async["timelines"][f"{key}/async"],
                      throughput=(rows_h["sync"]["tokens_per_s"], rows_h["async"]["tokens_per_s"])))
    if all(rows_h[m].get("gpu_idle_fraction") is not None for m in ("sync", "async")):
        md(" ".join(pexplain.event_vs_profiler(rows_h[m]["host_step_gap_fraction"], rows_h[m]["gpu_idle_fraction"],
                                               rows_h[m].get("gpu_idle_within_steps"), f"The {m} loop")
                    for m in ("sync", "async"))
           + f" Of the async loop's GPU idle, {rows_h['async']['gpu_idle_between_steps']:.1%} of the window lies "
             f"between steps and {rows_h['async']['gpu_idle_within_steps']:.1%} inside them; the profiler slowed "
             f"that pass by {rows_h['async']['profiler_overhead']:.0%}.")
    else:
        md("This record was made before the profiler measured the GPU's idle fraction: its figures are the step "
           "brackets' (the host's picture). `course-kit bench async` on the H200 records both.")
else:
    fig = None
fig

# %% [markdown]
# ### The lecture's figure: an 8B model at batch 32, against HF's async batching
# The lecture quotes Hugging Face's post *Unlocking asynchronicity in continuous batching* (2026): with
# synchronous continuous batching an 8B model at batch 32 left the GPU idle about a quarter of the
# time, and that the asynchronous mode of transformers' continuous batching cut both the idle time and
# the run's time. Less idle time and less time do not always go together (a mode can idle less and
# still run longer, when the GPU's own work grows), so below each system's idle change is stated
# next to its time change.
# `course-kit bench async` on a full-size GPU reproduces the set-up at a size that fits a few minutes:
# the Llama-3-8B shape with seeded random weights, 32 requests in 32 slots, and in one run on the same
# prompts the course engine sync and async, and transformers' continuous batching (the machinery of
# `generate_batch`) with `use_async_batching` off and on. The GPU idle fraction of all four is read the
# same way, from a profile: the share of the run in which no kernel or copy ran on the GPU.

# %%
show_source(async_blog.run_blog_case)

# %%
blog_rows = ref_async.get("blog_results") if ref_async else None
if ref_async and "blog" in ref_async["summary"]:
    md(explain_blog(blog_rows, ref_async["summary"]["blog"]))
else:
    md("The reference record has no run of this case yet (it is part of `course-kit bench async` on a "
       "full-size GPU). The claim it will be held against: " + async_blog.CLAIM["source"] + ".")

# %% [markdown]
# The two numbers of a timeline, read with `Timeline`, for the engine runs of section 6 (the host's
# picture: the share of the window outside the step brackets, and the bound read from it):

# %%
for mode, (t, tl) in runs.items():
    two = streams.Timeline([sp for sp in tl.spans if sp.lane in ("cpu", "gpu")])
    print(f"{mode:5s}: outside the step brackets {two.idle_fraction('gpu'):.1%}, bound read from this timeline "
          f"{two.overlap_speedup_bound(['cpu', 'gpu']):.2f}x")

# %% [markdown]
# ## Exercise 07.async_bound: the speed-up when the host slows down in async
#
# The bound `window / busiest lane` assumes every lane keeps its busy time, and that the two lanes
# overlap perfectly. Neither holds in a real loop: host work running beside a busy device thread
# often takes longer, and the async loop runs the host at most one step ahead. Write
# `async_bound(spans, slowdown)` that predicts the async run from a *sync* timeline:
#
# - `spans`: the sync timeline, a list of dicts `{"lane", "name", "start_s", "end_s"}` in no
#   particular order: `"prepare k"` on lane `"cpu"` is the host's work for step `k`, `"step k"` on
#   lane `"gpu"` the device's (`k` = 0, 1, ...); the sync run may have idle gaps;
# - in async, the host's work for each step takes `slowdown` times as long as in sync, and the
#   device's the same time;
# - the async loop (section 5): the host prepares step `k` and queues it; from step 1 on, it then
#   waits for step `k-1`'s tokens before it prepares step `k+1`. The device runs a queued step as
#   soon as it has finished the previous one. The host starts preparing step 0 at time 0.
#
# Return `(async_wall_s, speedup)`: the time at which the device finishes the last step, and the sync
# timeline's window (last end - first start) divided by it. The check replays such loops, step by
# step, on timelines you have not seen.

# %% {"course_kit": {"exercise": "07.async_bound", "role": "solution", "points": 3}}
def async_bound(spans, slowdown):
    ### BEGIN SOLUTION
    host, dev = {}, {}
    for s in spans:
        k = int(s["name"].split()[-1])
        (host if s["lane"] == "cpu" else dev)[k] = s["end_s"] - s["start_s"]
    prepared, done = 0.0, []          # when the host finished preparing the last step; device ends
    for k in range(len(dev)):
        start = prepared if k < 2 else max(prepared, done[k - 2])   # one step ahead at most
        prepared = start + slowdown * host[k]
        done.append(max(done[-1] if done else 0.0, prepared) + dev[k])
    window = max(s["end_s"] for s in spans) - min(s["start_s"] for s in spans)
    return done[-1], window / done[-1]
    ### END SOLUTION

# %% {"course_kit": {"exercise": "07.async_bound", "role": "check"}}
from course_kit import grading
grading.check("07.async_bound", async_bound)

# %% {"course_kit": {"exercise": "07.async_bound", "role": "hidden"}}
grading.check("07.async_bound_hidden", async_bound)

# %% [markdown]
# ## Exercise 07.overlap_predict: predict, measure and explain a sync/async pair
#
# A synthetic loop of 10 steps. In sync, each step is 0.6 ms of host work, then 1.0 ms on the GPU. In
# async, the host's work takes 0.75 ms (it now shares the machine with the device thread) and runs
# one step ahead, as in the exercise above. `SYNC` and `ASYNC` are the two timelines.
#
# 1. **Predict**, before measuring: the GPU idle fraction in sync and in async, the bound read from the
#    sync timeline, and the speed-up of async over sync. Record them in `PREDICTED` (a dict) and run
#    the cell once before step 2. The check requires the prediction but does not grade its accuracy.
# 2. **Measure** with `streams.Timeline`: `IDLE_SYNC`, `IDLE_ASYNC` (GPU idle fractions), `BOUND`
#    (the bound of the sync timeline over lanes cpu and gpu) and `SPEEDUP` (sync window / async
#    window).
# 3. **Explain**: `CAUSE`, the letter of the reason `SPEEDUP` falls short of `BOUND`:
#    (A) the GPU steps take longer in async;
#    (B) the host work grew by 25% and became the busiest lane;
#    (C) nothing overlaps the first step's preparation: the GPU waits for it once, and the bound
#    assumes even that is hidden;
#    (D) in async the GPU idles between steps, waiting for the host.

# %% {"course_kit": {"exercise": "07.overlap_predict", "role": "solution", "points": 2, "task": "record PREDICTED, then measure IDLE_SYNC, IDLE_ASYNC, BOUND and SPEEDUP, then answer CAUSE (see the task above)"}}
ms, SYNC, ASYNC = 1e-3, [], []
for k in range(10):
    t = 1.6 * k
    SYNC += [{"lane": "cpu", "name": f"prepare {k}", "start_s": t * ms, "end_s": (t + 0.6) * ms},
             {"lane": "gpu", "name": f"step {k}", "start_s": (t + 0.6) * ms, "end_s": (t + 1.6) * ms}]
    start = 0.0 if k == 0 else k - 0.25
    ASYNC += [{"lane": "cpu", "name": f"prepare {k}", "start_s": start * ms, "end_s": (start + 0.75) * ms},
              {"lane": "gpu", "name": f"step {k}", "start_s": (k + 0.75) * ms, "end_s": (k + 1.75) * ms}]
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTED = {"idle_sync": 0.4, "idle_async": 0.0, "bound": 1.6, "speedup": 1.6}
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
tl_sync, tl_async = streams.Timeline.from_records(SYNC), streams.Timeline.from_records(ASYNC)
IDLE_SYNC, IDLE_ASYNC = tl_sync.idle_fraction("gpu"), tl_async.idle_fraction("gpu")
BOUND = tl_sync.overlap_speedup_bound(["cpu", "gpu"])
SPEEDUP = (tl_sync.window()[1] - tl_sync.window()[0]) / (tl_async.window()[1] - tl_async.window()[0])
print(f"GPU idle {IDLE_SYNC:.1%} -> {IDLE_ASYNC:.1%}; bound {BOUND:.3f}x, speed-up {SPEEDUP:.3f}x")
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
CAUSE = "C"   # GPU busy 10 ms in both; host 7.5 ms < 10 ms; async = 0.75 ms fill + 10 ms of steps
### END SOLUTION

# %% {"course_kit": {"exercise": "07.overlap_predict", "role": "check"}}
from course_kit import grading
grading.check("07.overlap_predict", PREDICTED, IDLE_SYNC, IDLE_ASYNC, BOUND, SPEEDUP, CAUSE)

# %% {"course_kit": {"exercise": "07.overlap_predict", "role": "hidden"}}
grading.check("07.overlap_predict_hidden", CAUSE)

# %% [markdown]
# ## Summary
# - A stream is an ordered queue. Work on one stream is serialised; on several it may overlap, and
#   then ordering is your job: events, `wait_event`, `wait_stream`.
# - Two races to remember: reading before the producer is done (missing wait), and memory reused
#   while another stream still reads it (missing `record_stream`).
# - Copies overlap compute only from pinned memory, with `non_blocking=True`, on another stream.
# - A timeline gives a lane's idle fraction and the bound `window / busiest lane` on what overlap
#   can gain; overlap hides the smaller of host and device time per step, never the larger.
# - GPU idle comes from a profiler trace (kernel and copy intervals), not from events around whole
#   steps: what is left after async lies inside the steps, and the trace splits it further: host work
#   the GPU waits for inside a step (one long gap, during a host call) and the short gaps between
#   kernels, which fusion attacks. Read which one dominates before choosing the remedy.
# - The engine's async mode schedules and prepares step N+1 while step N runs, carrying tokens it
#   does not know yet as placeholders filled on the GPU: same tokens, less idle time.
#
# **Further reading**
# - NVIDIA, *CUDA C++ Programming Guide*, sections "Asynchronous Concurrent Execution" and "Streams".
# - PyTorch documentation, *CUDA semantics*: "Asynchronous execution", "CUDA streams", "Memory
#   management" (`record_stream`).
# - M. Harris, *How to Overlap Data Transfers in CUDA C/C++*, NVIDIA Technical Blog, 2012.
# - vLLM and SGLang documentation on asynchronous (overlap) scheduling.
# - PyTorch documentation, *torch.profiler*; NVIDIA *Nsight Systems* user guide (the same timeline, for
#   the whole process).
#
# **Next:** notebook 08 makes the GPU part itself faster, from naive attention to a flash-attention
# kernel in Triton.

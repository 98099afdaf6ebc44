# %% [markdown]
# # 00 · Start here: your machine, honest timing, and the roofline
#
# Every speed-up in this course is a claim about hardware: a kernel is fast when it keeps the GPU's
# memory system or its math units busy. Before optimising anything we measure the two ceilings of
# the machine at hand (how many bytes per second it can move, and how many FLOP/s its matrix units
# can do) and draw them as a **roofline**. Every later notebook places its kernels on this figure.
#
# {{BADGES}}
#
# **What you will learn**
# - what your GPU (or CPU) can do, and which choices the course makes for it;
# - how to time GPU code honestly: warm-up, CUDA events, medians, inputs larger than the cache;
# - the measured memory bandwidth and matmul FLOP/s of this machine, against the datasheet;
# - how to read a roofline, and the arithmetic intensity at which a kernel stops being memory-bound.

# %%
{{SETUP}}

# %% [markdown]
# ## How the exercises work
#
# Every notebook ends with exercises: **predict** a result, **measure** it with the course's own
# functions, **explain** it, or implement what the notebook did not show.
# - An **exercise cell** is a code cell that raises `NotImplementedError("Exercise NN.name: ...")`
#   until you replace that line with your answer. Run All stops there, which is expected: everything
#   above it has run.
# - The **check cell** below it calls `grading.check("NN.name", ...)` on your answer: one or two lines
#   saying what is right or wrong (never the expected value). Run it as often as you like.
# - Stuck? Run `grading.hint("NN.name")` in a new cell (`from course_kit import grading` first): a hint
#   written for that exercise, not the answer.
# - For self-study, the **solved build** holds every solution: `make solved` writes it to
#   `build/solved/` in your checkout. Try first; the check is the better teacher.
#
# The first one is at the end of this notebook, `00.decode_batch`.

# %% [markdown]
# ## Parameters
# Sizes come from the device: small on a CPU, full size on a large GPU. `COURSE_KIT_SMOKE=1` (what
# CI uses) picks the smallest. Papermill can override any of them.

# %% {"tags": ["parameters"]}
P = device.defaults()
COPY_MIB = P["copy_mib"]      # size of the buffer copied, in MiB
MATMUL_N = P["matmul_n"]      # n of the n x n x n matmul
REPEAT = P["repeat"]          # timed repeats (the median is reported)

# %%
import plotly.graph_objects as go
import torch

from course_kit import bench, benchmarks, notebook, plots, reference, widgets
from course_kit.roofline import ceilings as roofline
from course_kit.dtypes.explain import explain_dtype_rates
from course_kit.notebook import md, show_source
from course_kit.widgets.roofline import RooflineExplorer

md(f"Parameters: device **{P['device']}**, compute dtype **{device.dtype_name(P['dtype'])}**, size "
   f"**{P['size']}**{' (smoke)' if P['smoke'] else ''}; copy buffers of {COPY_MIB} MiB, matmul n = {MATMUL_N}, "
   f"{REPEAT} timed repeats.")

# %% [markdown]
# ## 1. The machine, and what the course will do on it
#
# The course makes *capability-aware* choices. A Colab T4 (sm_75) has fp16 tensor cores but no bf16
# units (`torch.cuda.is_bf16_supported()` still says True there, because bf16 is emulated), and
# PyTorch's flash-attention backend needs sm_80. The table shows the decisions for the GPUs learners
# usually have, next to this machine; they are the same functions the notebooks call.

# %%
show_source(device.capabilities)

# %%
machines = {"T4 (sm_75)": (7, 5), "A100 (sm_80)": (8, 0), "L4 (sm_89)": (8, 9), "H100/H200 (sm_90)": (9, 0),
            "this machine": device.capabilities().capability}
flags = ["bf16_tensor_cores", "tf32", "fp8", "sdpa_flash", "sdpa_cudnn", "cuda_graphs"]
rows = {name: device.capabilities(cap) for name, cap in machines.items()}
notebook.table(["capability"] + list(rows),
               [[f] + ["yes" if getattr(c, f) else "—" for c in rows.values()] for f in flags]
               + [["preferred half dtype"] + [device.dtype_name(device.compute_dtype(c)) for c in rows.values()]],
               fills=[[None] + ["#d1f0d6" if getattr(c, f) else None for c in rows.values()] for f in flags]
               + [[None] * (len(rows) + 1)])

# %% [markdown]
# ## 2. Timing honestly
#
# GPU work is *asynchronous*: `torch.matmul` returns as soon as the kernel is queued. A host clock
# around it measures the launch, not the work. `course_kit.bench.timeit` therefore
# - runs a few **warm-up** calls first (allocator, cuBLAS heuristics, compilation are not counted);
# - on a GPU brackets each call with **CUDA events**, which are timestamps taken *on the GPU*;
# - reports the **median** of many repeats, with the p10-p90 spread as a noise check;
# - **rotates inputs**, so that data larger than the L2 cache is not read hot from cache.

# %%
show_source(bench.timeit)

# %% [markdown]
# Two pitfalls, measured: the first call pays for allocation and library set-up, and on a GPU a host
# clock with no synchronise times only the kernel *launch*.

# %%
x = torch.randn(MATMUL_N, MATMUL_N, device=P["device"])
cold = bench.timeit(lambda: x @ x, warmup=0, repeat=1)
warm = bench.timeit(lambda: x @ x, warmup=2, repeat=REPEAT)
md(roofline.explain_timing(cold.median_s, warm.median_s, warm.spread, REPEAT,
                          bench.unsynchronised_time(lambda: x @ x, repeat=REPEAT) if P["device"] == "cuda" else None))

# %% [markdown]
# ## 3. Memory bandwidth
#
# A device-to-device copy reads every byte once and writes it once, so it moves `2 x size` bytes and
# does no arithmetic: it is the purest measure of the memory system. (Datasheets quote the same
# read-plus-write figure.)

# %%
show_source(roofline.copy_bandwidth)

# %%
own = benchmarks.run_topic("roofline", {"copy_mib": COPY_MIB, "matmul_n": MATMUL_N, "repeat": REPEAT})
ref = notebook.record("roofline", "h200", quiet=True)   # the reference record, compared with yours
spec = device.peaks()
md(roofline.explain_copy(own["summary"]["copy_gbs"], ref["summary"]["copy_gbs"] if ref else None,
                         ref["environment"]["gpu"] if ref else "", spec.hbm_gbs if spec else None,
                         spec.name if spec else ""))

# %% [markdown]
# ## 4. Matmul FLOP/s by dtype
#
# An `n x n x n` matmul does `2 n^3` FLOPs. At large `n` it is compute-bound, so its rate approaches
# the math units' peak. On a GPU we measure strict fp32 (TF32 off), TF32, bf16 and fp16: tensor
# cores run the smaller formats, and how far apart bf16 and strict fp32 are on this machine and on
# the reference is printed below the figure. (On a CPU without matrix units only fp32 is measured,
# and only the reference's gap is printed.)

# %%
show_source(roofline.matmul_rate)

# %%
def rate_bars(record, label):
    rates = record["summary"]["matmul_tflops"]
    return go.Bar(x=list(rates), y=list(rates.values()), name=label,
                  text=[f"{v:.3g}" for v in rates.values()], textposition="outside")

fig = go.Figure([rate_bars(r, lab) for lab, r in reference.own_and_reference("roofline", own)])
if spec:
    fig.add_scatter(x=[d for d in own["summary"]["matmul_tflops"]],
                    y=[spec.tflops(d) for d in own["summary"]["matmul_tflops"]], mode="markers",
                    marker=dict(symbol="line-ew-open", size=40), name=f"{spec.name} spec peak")
fig.update_layout(barmode="group", yaxis_type="log", yaxis_title="TFLOP/s", height=400,
                  title=f"Matmul rate at n = {MATMUL_N} (yours) and the reference")
fig

# %%
r = ref["summary"]["matmul_tflops"] if ref else None
md(explain_dtype_rates(own["summary"]["matmul_tflops"], MATMUL_N, r, ref["environment"]["gpu"] if ref else "",
                       ref["params"]["matmul_n"] if ref else None))

# %% [markdown]
# ## 5. The roofline
#
# A kernel that performs `I` FLOPs per byte it moves (its *arithmetic intensity*) can reach at most
# `min(peak FLOP/s, I x bandwidth)`. Below the **ridge point** `peak / bandwidth` it is
# memory-bound: a faster math unit would not help, moving fewer bytes would. Decoding one token of an
# LLM (notebooks 05-07) sits far to the left; a large matmul sits far to the right.
#
# Two kernels measured above are placed on it: the copy (no FLOPs, so we plot an elementwise add,
# 1 FLOP per 12 bytes, which moves data at the copy's rate) and the largest matmul.

# %%
def kernels_on(record):
    s = record["summary"]
    dtype = "bf16" if "bf16" in s["matmul_tflops"] else "fp32"
    n = record["params"]["matmul_n"]
    bytes_per = 2 if dtype == "bf16" else 4
    return [{"name": "vector add", "intensity": 1 / 12, "tflops": s["copy_gbs"] / 12 / 1e3},
            {"name": f"matmul {dtype} n={n}", "intensity": 2 * n**3 / (3 * n * n * bytes_per),
             "tflops": s["matmul_tflops"][dtype]}]

plots.roofline_from_record(own, kernels_on(own), title=f"Roofline of this machine ({own['environment']['gpu'] or 'CPU'})")

# %%
ref = notebook.record("roofline")
if ref:
    fig = plots.roofline_from_record(ref, kernels_on(ref))
else:
    fig = None
    print("No reference roofline recorded yet (run `course-kit bench roofline` on a GPU).")
fig

# %%
if ref:
    s = ref["summary"]
    ridge = s["matmul_tflops"]["bf16"] * 1e3 / s["copy_gbs"]
    md(f"On the reference {ref['environment']['gpu']}, a bf16 kernel needs about **{ridge:.0f} FLOP per byte** "
       f"before compute, not memory, limits it. A decode step of an LLM does about 1 FLOP per byte of "
       f"weights it reads (2 FLOPs per bf16 weight of 2 bytes): it sits about {ridge:.0f}x to the left of the "
       f"ridge, deep in the memory-bound region.")

# %% [markdown]
# ### The roofline explorer
#
# Pick an operation, its size and dtype. The explorer counts its FLOPs and the bytes it must move
# (each input read once, each output written once), and places it under the measured ceilings of
# this machine and of the reference GPU: left of a machine's ridge, memory bandwidth limits it; right
# of it, the math units do. Watch the matrix-vector product of a decode step cross the ridge as the
# batch grows: every weight read from memory then serves more rows.

# %%
roof = RooflineExplorer(own, notebook.record("roofline", quiet=True), own_name="this machine",
                        ref_name=f"the reference {ref['environment']['gpu']}" if ref else "")
widgets.show(roof.widget, roof.figure, "the roofline explorer")

# %% [markdown]
# ## Exercise 00.decode_batch: when does a decode step become compute-bound?
#
# A decode step multiplies the activations of `batch` sequences (one row each) by every `n x n`
# weight matrix: the explorer's "matrix-vector" operation. Take `n = 8192`, bf16, and the **H200's
# datasheet** roofline (`device.peaks("H200")`: its bf16 peak and its HBM bandwidth).
#
# 1. **Predict**, without running anything, the smallest batch at which this product becomes
#    compute-bound: `PREDICTED_BATCH` (an int). Run the cell once before writing step 2; the check
#    needs the prediction but does not grade it.
# 2. **Measure** it with the course's functions (`roofline.op_cost` and `roofline.place`, what the
#    explorer above runs): `BATCH`, the smallest compute-bound batch.
# 3. **Explain**: with fp8 weights and activations (1 byte per element, and the H200's fp8 peak),
#    what happens to that batch? `FP8` is the letter: (A) it about halves; (B) it stays the same;
#    (C) it about doubles; (D) it about quadruples.

# %% {"course_kit": {"exercise": "00.decode_batch", "role": "solution", "points": 2, "task": "record PREDICTED_BATCH, then measure BATCH, then answer FP8 (see the task above)"}}
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTED_BATCH = 206      # the ridge in FLOP per byte: close, but not the answer
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
h200 = device.peaks("H200")


def bound(batch, dtype="bf16"):
    cost = roofline.op_cost("matrix-vector (decode, n x n weights)", 8192, dtype, batch)
    return roofline.place(cost, h200.hbm_gbs, {dtype: h200.tflops(dtype)})["bound"]


BATCH = next(b for b in range(1, 10_000) if bound(b) == "compute")
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
FP8 = "B"   # half the bytes doubles the intensity, and the fp8 peak doubles the ridge too
### END SOLUTION

# %% {"course_kit": {"exercise": "00.decode_batch", "role": "check"}}
from course_kit import grading
grading.check("00.decode_batch", PREDICTED_BATCH, BATCH, FP8)

# %% [markdown]
# ## Summary
# - `course_kit.device` says what this machine can do, and the notebooks size themselves from it.
# - Timing GPU code needs warm-up, CUDA events, medians and inputs rotated past the cache.
# - The copy bandwidth and the matmul rate are the two ceilings of the roofline; their ratio, the
#   ridge point, says whether a kernel is limited by memory or by math.
#
# **Further reading**
# - S. Williams, A. Waterman, D. Patterson, *Roofline: an insightful visual performance model for
#   multicore architectures*, CACM 2009.
# - PyTorch documentation, *CUDA semantics* (asynchronous execution, streams and events).
# - NVIDIA H200 and T4 datasheets, for the spec peaks in `course_kit.device.PEAKS`.
#
# **Next:** `01_dtypes_and_overflow.ipynb` looks inside the number formats that make the tensor-core
# bars above so tall, and at what they cost in range and precision.

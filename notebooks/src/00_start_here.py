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

from course_kit import bench, notebook, plots, reference, roofline
from course_kit.notebook import md, show_source

P

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
fig = go.Figure(go.Table(
    header=dict(values=["capability"] + list(rows)),
    cells=dict(values=[flags + ["preferred half dtype"]] + [
        ["✅" if getattr(c, f) else "—" for f in flags] + [device.dtype_name(device.compute_dtype(c))]
        for c in rows.values()])))
fig.update_layout(height=330, margin=dict(t=10, b=10))
fig

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
text = (f"First call: **{cold.median_s * 1e3:.2f} ms**; median of {REPEAT} warm calls: "
        f"**{warm.median_s * 1e3:.2f} ms** (p10-p90 spread {warm.spread:.0%}).")
if torch.cuda.is_available():
    wrong = bench.unsynchronised_time(lambda: x @ x, repeat=REPEAT)
    text += (f" A host clock with no synchronise says **{wrong * 1e6:.0f} µs**: it timed the launch, "
             f"{warm.median_s / wrong:.0f}x less than the work really takes.")
md(text)

# %% [markdown]
# ## 3. Memory bandwidth
#
# A device-to-device copy reads every byte once and writes it once, so it moves `2 x size` bytes and
# does no arithmetic: it is the purest measure of the memory system. (Datasheets quote the same
# read-plus-write figure.)

# %%
show_source(roofline.copy_bandwidth)

# %%
own = bench.run_topic("roofline", {"copy_mib": COPY_MIB, "matmul_n": MATMUL_N, "repeat": REPEAT})
ref = notebook.record("roofline", "h200", quiet=True)   # the reference record, compared with yours
spec = device.peaks()
copy_gbs = own["summary"]["copy_gbs"]
text = f"This machine copies at **{copy_gbs:,.0f} GB/s** (read + write, {COPY_MIB} MiB buffers)."
if spec:
    text += f" The {spec.name} datasheet promises {spec.hbm_gbs:,.0f} GB/s: **{copy_gbs / spec.hbm_gbs:.0%}** of it."
if ref:
    text += (f" The reference {ref['environment']['gpu']} measured **{ref['summary']['copy_gbs']:,.0f} GB/s**, "
             f"{ref['summary']['copy_gbs'] / copy_gbs:,.0f}x this machine.")
md(text)

# %% [markdown]
# ## 4. Matmul FLOP/s by dtype
#
# An `n x n x n` matmul does `2 n^3` FLOPs. At large `n` it is compute-bound, so its rate approaches
# the math units' peak. On a GPU we measure strict fp32 (TF32 off), TF32, bf16 and fp16; the
# tensor-core dtypes are an order of magnitude faster than fp32, which is why the rest of the
# course cares so much about dtypes.

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
rates = own["summary"]["matmul_tflops"]
best = max(rates, key=rates.get)
text = f"Fastest dtype here: **{best}** at **{rates[best]:.3g} TFLOP/s** (n = {MATMUL_N})."
if ref:
    r = ref["summary"]["matmul_tflops"]
    text += (f" The reference {ref['environment']['gpu']} at n = {ref['params']['matmul_n']}: bf16 "
             f"**{r.get('bf16', float('nan')):.0f} TFLOP/s**, strict fp32 **{r.get('fp32', float('nan')):.0f} TFLOP/s** "
             f"({r.get('bf16', float('nan')) / r.get('fp32', float('nan')):.0f}x apart).")
md(text)

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
# ## Exercise 00.attainable: read the roofline
#
# Write `attainable_tflops(intensity, bandwidth_gbs, peak_tflops)`: the best TFLOP/s a kernel of
# arithmetic intensity `intensity` (FLOP/byte) can reach on a machine with the given bandwidth
# (GB/s) and compute peak (TFLOP/s).

# %% {"course_kit": {"exercise": "00.attainable", "role": "solution", "points": 1}}
def attainable_tflops(intensity, bandwidth_gbs, peak_tflops):
    ### BEGIN SOLUTION
    return min(peak_tflops, intensity * bandwidth_gbs / 1e3)
    ### END SOLUTION

# %% {"course_kit": {"exercise": "00.attainable", "role": "check"}}
from course_kit import grading
grading.check("00.attainable", attainable_tflops)

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

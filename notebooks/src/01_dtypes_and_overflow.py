# %% [markdown]
# # 01 · Number formats: range, precision, overflow and memory
#
# Every speed-up of modern training and inference leans on smaller number formats: bf16 and fp16
# instead of fp32, fp8 on Hopper, int8 and int4 for weights. Each of them trades *range* (how large
# and how small a value can be) and *precision* (how many significant bits it keeps) for bytes and
# tensor-core throughput. This notebook takes the formats apart bit by bit, lets you push a value
# until it overflows or underflows, shows which operations break first, and measures what the
# smaller formats buy in memory and in matmul speed.
#
# {{BADGES}}
#
# **What you will learn**
# - the bit layout of fp32, tf32, bf16, fp16, fp8 (e4m3fn, e5m2), int8 and int4, and the limits that
#   follow from it (checked against `torch.finfo` and the published IEEE 754 and OCP fp8 tables);
# - what happens when a value does not fit: rounding, subnormals, flush to zero, overflow to inf,
#   saturation, NaN (and what *your* PyTorch does with fp8 e4m3fn beyond 448);
# - where fp16 overflows and bf16 does not, and where bf16 loses precision that fp16 keeps;
# - int8 and int4 quantisation: symmetric or asymmetric, per tensor or per channel, and its error;
# - how much memory a model needs for inference and for training, and per GPU under tensor
#   parallelism;
# - the matmul throughput of each format on a GPU.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# `COURSE_KIT_SMOKE=1` (CI) and CPUs use small sizes; the matmul benchmark runs at full size only on
# a large GPU.

# %% {"tags": ["parameters"]}
P = device.defaults()
N_RANDOM = 2_000 if P["smoke"] else 200_000      # random values compared against torch's casts
QUANT_SHAPE = (64, 256) if P["smoke"] else (1024, 4096)   # the weight matrix we quantise
RUN_GPU_BENCH = P["device"] == "cuda"            # measure matmul throughput live on a GPU

# %%
import math

import plotly.graph_objects as go
import torch

from course_kit import benchmarks, dtypes, narrate, notebook, widgets
from course_kit.dtypes import memory
from course_kit.benchmarks import dtypes as bench_dtypes
from course_kit.dtypes import ops
from course_kit.dtypes.explain import (explain_capacity, explain_e4m3_overflow, explain_range_precision,
                                       explain_throughput, explain_weight_only)
from course_kit.notebook import md, show_source
from course_kit.plots import dtypes as dplots
from course_kit.plots import memory as mplots
from course_kit.plots.tables import Table
from course_kit.widgets.dtypes import OpExplorer, OverflowExplorer
from course_kit.widgets.memory import MemoryEstimator

md(f"Parameters: device **{P['device']}**, size **{P['size']}**{' (smoke)' if P['smoke'] else ''}; "
   f"{N_RANDOM:,} random values per cast check, a {QUANT_SHAPE[0]} x {QUANT_SHAPE[1]} weight matrix to quantise.")

# %% [markdown]
# ## 1. The formats, from their bits
#
# A floating-point number is stored as a **sign** bit `s`, an **exponent** field `e` of `E` bits
# and a **mantissa** (fraction) field `m` of `M` bits. With the bias `B = 2^(E-1) - 1`:
#
# - a *normal* number (`0 < e < all ones`) is `(-1)^s × 1.m × 2^(e - B)`: `M + 1` significant bits;
# - a *subnormal* number (`e = 0`) is `(-1)^s × 0.m × 2^(1 - B)`: it fills the gap down to zero
#   with fewer significant bits;
# - `e = all ones` encodes inf (`m = 0`) and NaN (`m ≠ 0`) in the IEEE-style formats. fp8 **e4m3fn**
#   ("finite") gives that exponent to ordinary numbers instead and keeps only `S.1111.111` for NaN,
#   so it has no infinity and its max is `1.75 × 2^8 = 448`.
#
# So the exponent width sets the **range**, the mantissa width the **precision** (`eps = 2^-M`,
# the gap between 1 and the next number). Every limit in `course_kit.dtypes` is derived from the
# widths, not typed in:

# %%
show_source(dtypes.Format)

# %%
rows = [dtypes.FORMATS[n].limits() for n in dtypes.FORMAT_NAMES]
cols = ["format", "bits", "sign", "exponent", "mantissa", "bias", "max", "smallest normal",
        "smallest subnormal", "eps", "inf"]
fmt_cell = lambda v: "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
Table(cols, [[fmt_cell(r[c]) for c in cols] for r in rows])   # an HTML table: it wraps, never cuts a word

# %% [markdown]
# The derivation agrees with PyTorch's own `torch.finfo` for every format torch has:

# %%
agree = {}
for name in dtypes.FORMAT_NAMES:
    f = dtypes.FORMATS[name]
    if f.kind == "float" and f.torch_dtype is not None:
        fi = torch.finfo(f.torch_dtype)
        agree[name] = (f.max, f.smallest_normal, f.eps) == (fi.max, fi.smallest_normal, fi.eps)
assert all(agree.values()), agree
md("`torch.finfo` agrees on max, smallest normal and eps for: "
   + ", ".join(f"**{k}**" for k in agree) + ".")

# %%
dplots.range_figure()

# %%
md("- " + explain_range_precision("fp16", "bf16") + "\n- At 8 bits: "
   + explain_range_precision("fp8_e4m3fn", "fp8_e5m2"))

# %% [markdown]
# ## 2. Rounding exactly as PyTorch does
#
# `dtypes.classify(x, format)` stores `x` in a format and says what happened. Where torch has the
# dtype, the rounding **is** torch's own cast (`tensor.to(dtype)`), so the explorer below can never
# disagree with torch. tf32 (a tensor-core input format with no torch dtype) is rounded from fp32
# by integer arithmetic on the bits, and integers use a scale of 1 (round half to even, then
# saturate, which is what `torch.fake_quantize_per_tensor_affine` does).

# %%
show_source(dtypes.classify)

# %%
show_source(dtypes.tf32_round_bits)

# %% [markdown]
# The possible outcomes: **exact**; **rounded** (to the nearest representable value, ties to the
# even mantissa); **underflow to subnormal** (stored below the smallest normal, with fewer
# significant bits); **flushed to zero**; **overflow to inf**; **saturated** (clamped to ±max where
# rounding would have gone beyond it); **NaN**. Some edge cases in every format:

# %%
probe = [1.0, 0.1, 1 + 2 ** -8, 300.0, 464.0, 500.0, 65520.0, 1e5, 1e39, 1e-6, 1e-8, 1e-40]
table = {name: [dtypes.classify(x, name) for x in probe] for name in dtypes.FORMAT_NAMES}
# an HTML table: each cell's value and outcome wrap inside its column and the rows take the height
# they need, so no outcome is cut mid-word at any width
Table(["x"] + list(table), [[f"{x:.6g}"] + [f"{table[n][i].stored:.5g}<br><i>{table[n][i].outcome}</i>" for n in table]
                            for i, x in enumerate(probe)], raw_html=True)

# %% [markdown]
# ### What does PyTorch do with fp8 e4m3fn beyond 448?
#
# e4m3fn has no infinity, so an overflowing cast must produce either NaN or the max. The OCP
# specification allows both (a "saturating" and a "non-saturating" mode), and PyTorch changed its
# answer: its cast returned NaN for magnitudes above 464 and for ±inf until pull request
# pytorch/pytorch#178817 (merged in April 2026) made it saturate to ±448, infinities included
# (torch 2.11 returns NaN; torch 2.13 saturates). Rather than trust a version table, ask the torch
# you are running (`fp8_overflow.overflow_mode()` casts 10000 and looks):

# %%
from course_kit.dtypes import fp8_overflow

beyond = [448.0, 464.0, 465.0, 480.0, 1e4, math.inf, -1e4, math.nan]
got = torch.tensor(beyond, dtype=torch.float32).to(torch.float8_e4m3fn)
bits = got.view(torch.uint8).tolist()
got = got.float()
for x, v, b in zip(beyond, got.tolist(), bits):
    print(f"{x:>8} -> {v:>6}   bits {b:08b}   {dtypes.classify(x, 'fp8_e4m3fn').outcome}")
print(f"fp8_overflow.overflow_mode() = {fp8_overflow.overflow_mode()!r}")

# %%
md(explain_e4m3_overflow(got[4].item(), got[5].item(), torch.__version__)
   + " 464 is exactly halfway between 448 and the next step (480, which would be the NaN pattern); "
   "the tie goes to the even mantissa, 448, so it is an ordinary rounding in every version. "
   "Either way the lesson is the same: scale fp8 tensors so that they never get near the max.")

# %% [markdown]
# The explorer's values are torch's; here is the check over many random values of every magnitude,
# compared bit for bit with independent casts:

# %%
g = torch.Generator().manual_seed(0)
xs = torch.randn(N_RANDOM, generator=g) * torch.exp2(torch.randint(-50, 50, (N_RANDOM,), generator=g).float())
mismatches = {}
for name in ["bf16", "fp16", "fp8_e4m3fn", "fp8_e5m2"]:
    f = dtypes.FORMATS[name]
    ours = dtypes.round_to(xs, name)
    theirs = xs.to(f.torch_dtype).double()
    mismatches[name] = int((~((ours == theirs) | (ours.isnan() & theirs.isnan()))).sum())
assert not any(mismatches.values()), mismatches
md(f"{N_RANDOM:,} random values per format: **{sum(mismatches.values())} mismatches** with torch.")

# %% [markdown]
# ## 3. The overflow explorer
#
# Drag the magnitude slider (log scale, 1e-10 to 1e40), flip the sign, pick the format whose bits
# you want to see. For every format the table shows the stored value, the bit pattern coloured by
# field (<span style="color:#d62728">sign</span>, <span style="color:#1f77b4">exponent</span>,
# <span style="color:#2ca02c">mantissa</span>), the relative error and the outcome. The figure marks
# `|x|` (dashed) and each format's stored value (diamonds, coloured by outcome) on the ranges.
#
#
# On Colab, the next cell enables Colab's custom widget manager, which the widgets need there.

# %%
if device.on_colab():
    from google.colab import output
    output.enable_custom_widget_manager()

# %%
show_source(OverflowExplorer.update)

# %%
explorer = OverflowExplorer(value=300.0, fmt="fp8_e4m3fn")
widgets.show(explorer.widget, explorer.figure, "the overflow explorer")

# %% [markdown]
# The explorer is a Python object: what it shows for a value can be read back. Setting the slider
# from code does exactly what dragging it does:

# %%
explorer.slider.value = 7e4
md("At x = 70,000: " + "; ".join(f"**{r.format}** {r.outcome}" for r in explorer.results) + ".")

# %% [markdown]
# ## 4. Operations: overflow in fp16, lost precision in bf16
#
# A single value that fits can still produce one that does not. Four operations, each computed in
# the format itself (every intermediate rounded, as the hardware does) and compared with float64:
# `x²`, `exp(x)`, a running **sum** of `n` copies of `x`, and a naive **softmax** of `n` logits
# spread over `[0, x]` (largest probability shown).

# %%
show_source(ops.evaluate)

# %%
ops_explorer = OpExplorer(op="exp", x=12.0)
widgets.show(ops_explorer.widget, ops_explorer.figure, "the operation explorer")

# %%
exp_fp16 = ops.evaluate("exp", 12.0, "fp16")
exp_bf16 = ops.evaluate("exp", 12.0, "bf16")
sum_bf16 = ops.evaluate("sum", 1.0, "bf16", n=1000)
sum_fp16 = ops.evaluate("sum", 1.0, "fp16", n=1000)
sm = {f: ops.evaluate("softmax", 30.0, f, n=16) for f in ops.OP_FORMATS}
md(f"- **Range:** exp(12) is {exp_fp16.reference:,.0f}; fp16 gives **{exp_fp16.value}** "
   f"({exp_fp16.outcome}), bf16 gives **{exp_bf16.value:,.0f}** (relative error "
   f"{exp_bf16.rel_error:.1e}). A naive softmax over logits spread to 30 gives "
   f"**{sm['fp16'].value}** in fp16 (exp overflowed, then inf/inf), **{sm['bf16'].value:.3f}** in "
   f"bf16, against {sm['fp32'].reference:.3f}. `torch.softmax` subtracts the max first and avoids it.\n"
   f"- **Precision:** adding 1.0 a thousand times gives **{sum_bf16.value:.0f}** in bf16 but "
   f"**{sum_fp16.value:.0f}** in fp16. bf16 has 8 significant bits: once the sum reaches 256, "
   f"adding 1 is a tie at half a unit in the last place and rounds back to 256. This is why "
   f"reductions (sums, norms, softmax denominators, optimizer updates) accumulate in fp32.")

# %%
dplots.ops_figure("sum", 1.0, 1000)

# %% [markdown]
# ## 5. int8 and int4 quantisation
#
# Integers have no exponent: a tensor is stored as integer codes `q` and a **scale** (and, for
# asymmetric schemes, a **zero point**): `x ≈ (q - zero_point) × scale`. Symmetric scales map
# `max|x|` to the largest code; asymmetric ones map `[min x, max x]` onto the whole code range.
# One scale per tensor is cheapest; one per output channel (row) follows rows of very different
# magnitude, which real weight matrices have.

# %%
show_source(dtypes.quantize)

# %%
g = torch.Generator().manual_seed(1)
W = torch.randn(*QUANT_SHAPE, generator=g) * torch.logspace(-1.5, 0.5, QUANT_SHAPE[0]).unsqueeze(1)
W[0, 0] = 12.0      # one outlier, as in real LLM weights
schemes = [(b, s, ax) for b in (8, 4) for s in (True, False) for ax in (None, 0)]
qres = [dtypes.quantize(W, b, symmetric=s, axis=ax) for b, s, ax in schemes]
fig = go.Figure(go.Bar(x=[r.scheme for r in qres], y=[r.rel_error for r in qres],
                       text=[f"{r.sqnr_db:.1f} dB" for r in qres], textposition="outside"))
fig.update_layout(title=f"Quantisation error of a {QUANT_SHAPE[0]}x{QUANT_SHAPE[1]} weight matrix "
                  "(bar: ||W - Ŵ|| / ||W||, label: SQNR)", yaxis_type="log", height=420,
                  yaxis_title="relative error")
fig

# %%
best8 = min((r for r in qres if r.bits == 8), key=lambda r: r.rel_error)
worst4 = max((r for r in qres if r.bits == 4), key=lambda r: r.rel_error)
pt8 = next(r for r in qres if r.bits == 8 and r.symmetric and r.axis is None)
pc8 = next(r for r in qres if r.bits == 8 and r.symmetric and r.axis == 0)
md(f"Per-channel scales cut the int8 error from **{pt8.rel_error:.2%}** to **{pc8.rel_error:.2%}**: "
   f"the outlier no longer sets the step size of every row. The best int8 scheme here is "
   f"*{best8.scheme}* ({best8.sqnr_db:.1f} dB); the worst int4 scheme, *{worst4.scheme}*, loses "
   f"**{worst4.rel_error:.1%}** of the signal, which is why int4 schemes use small groups of "
   f"weights per scale.")

# %% [markdown]
# ## 6. Memory: what a model needs
#
# Inference needs the weights (and a KV cache, notebook 06). Training needs much more: gradients,
# optimizer state, and activations. With Adam in mixed precision (the ZeRO paper's accounting)
# every parameter costs 2 bytes of bf16/fp16 weights, 2 of gradients, 4 of fp32 master weights and
# 4 + 4 of fp32 moments: **16 bytes per parameter**, before any activation.
#
# Memory in this notebook is in **GiB** (2^30 bytes), and a GPU's capacity is what torch reports
# for it (`torch.cuda.get_device_properties(0).total_memory`), not the "GB" of its datasheet:

# %%
md("For example, " + explain_capacity(["H200", "H100 80GB HBM3"]) + " A datasheet's figure is a rounded "
   "product name, so this notebook never computes with it.")

# %%
show_source(memory.training_bytes)

# %%
n7 = 7e9
weights7 = {d: {"weights": memory.weights_bytes(n7, d)} for d in ("fp32", "bf16", "int8", "int4")}
train7 = {"fp32 Adam": memory.training_bytes(n7, mixed=False),
          "mixed-precision Adam": memory.training_bytes(n7, mixed=True)}
H100 = "H100 80GB HBM3"
mplots.breakdown_figure({**{f"weights {d}": v for d, v in weights7.items()},
                         **{f"train, {k}": v for k, v in train7.items()}},
                        title="A 7B-parameter model", capacity_gib=memory.GPU_MEMORY_GIB[H100], capacity_label=H100)

# %%
need7 = sum(train7["mixed-precision Adam"].values())
md("For 7 billion parameters: weights take " + ", ".join(
    f"**{narrate.gib(v['weights']):.1f} GiB** in {d}" for d, v in weights7.items())
   + f"; training with mixed-precision Adam needs **{narrate.gib(need7):.1f} GiB** "
   f"({sum(memory.training_bytes(1.0).values()):g} bytes per parameter) before activations: on one {H100} it "
   f"{narrate.fits(need7, memory.GPU_MEMORY_GIB[H100] * memory.GiB)}.")

# %% [markdown]
# A 70B model (Llama-2-70B's shape) in bf16 needs about 2 bytes per parameter for its weights alone,
# before any KV cache: close to the whole memory of the largest single GPUs. Tensor parallelism
# (notebook 09) splits every weight matrix over `t` GPUs, so each holds `1/t` of the weights and of
# the KV heads:

# %%
show_source(memory.per_gpu_bytes)

# %%
tp70 = {f"TP={t}": memory.per_gpu_bytes("70b", t, seq=4096, batch=8) for t in (1, 2, 4, 8)}
H200 = "H200"
mplots.breakdown_figure(tp70, title="Llama-2-70B inference (bf16, 8 sequences of 4096 tokens): per GPU",
                        capacity_gib=memory.GPU_MEMORY_GIB[H200], capacity_label=H200)

# %%
s70 = memory.PRESETS["70b"]
have = memory.GPU_MEMORY_GIB[H200] * memory.GiB
md(f"{s70.name} has **{s70.n_params() / 1e9:.1f} B** parameters: **{narrate.gib(memory.weights_bytes(s70.n_params())):.0f} GiB** "
   f"of bf16 weights. With 8 sequences of 4096 tokens in its KV cache, per {H200} GPU:\n"
   + "\n".join(f"- {k}: {narrate.fits(sum(v.values()), have)}" for k, v in tp70.items()))

# %% [markdown]
# The estimator: pick a model, inference or training, the weight format, the sequence length and
# batch, and a GPU. Bars show what each GPU holds at TP 1, 2, 4 and 8.

# %%
estimator = MemoryEstimator(model="70b", mode="inference", seq=4096, batch=8)
widgets.show(estimator.widget, estimator.figure, "the memory estimator")

# %% [markdown]
# ## 7. Matmul throughput by dtype (GPU)
#
# Smaller formats can also be faster: on Hopper the datasheet's dense tensor-core peak doubles from
# tf32 to bf16, and doubles again to fp8 and int8. Whether a real matmul gets there is what the
# benchmark measures. `course-kit bench dtypes` times an `n × n × n` matmul in
# each format on the same shape, with random non-zero inputs rotated between calls, CUDA-event
# timing and medians; each variant is first checked against a float64 matmul of the very same
# inputs. fp8 uses `torch._scaled_mm` (needs sm_89+: Ada or Hopper) with unit scales, int8
# `torch._int_mm`.

# %%
show_source(bench_dtypes.make_inputs)

# %%
own = None
if RUN_GPU_BENCH:
    from course_kit import bench
    own = benchmarks.run_topic("dtypes", {"size": P["size"]})
ref = notebook.record("dtypes")
series = {}
if own is not None:
    series[f"yours ({own['environment'].get('gpu')})"] = own["results"]
if ref is not None:
    series[f"reference ({ref['environment'].get('gpu')}, n={ref['params'].get('n')})"] = ref["results"]
peak_src = own or ref
pk = device.peaks((peak_src or {}).get("environment", {}).get("gpu") or "") if peak_src else None
peaks = {d: pk.tflops(d) for d in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8") if pk and pk.tflops(d)}
if series:
    fig = dplots.throughput_figure({k: [dict(r, dtype=r["name"]) for r in v] for k, v in series.items()})
    if peaks:
        names = {r["name"]: r["dtype"] for v in series.values() for r in v}
        fig.add_scatter(x=list(names), y=[peaks.get(d) for d in names.values()], mode="markers",
                        marker=dict(symbol="line-ew-open", size=40, line=dict(width=3)),
                        name=f"{pk.name} spec peak (dense)")
else:
    fig = None
    print("No matmul-by-dtype record yet: run `course-kit bench dtypes` on a GPU to make one.")
fig

# %%
rec = own or ref
# a live run is compared with the record of the same GPU only (another GPU's record is no yardstick)
same_gpu = own is not None and ref is not None and own["environment"].get("gpu") == ref["environment"].get("gpu")
if rec is not None:
    bf16_live = next((r["tflops"] for r in rec["results"] if r.get("variant", r["name"]) == "bf16" and r.get("tflops")), None)
    bf16_rec = next((r["tflops"] for r in ref["results"] if r.get("variant", r["name"]) == "bf16" and r.get("tflops")), None) if same_gpu else None
    md(explain_throughput(rec["summary"], rec["results"], rec["environment"].get("gpu"), rec["params"].get("n"),
                          recorded=ref["results"] if same_gpu else None, live=own is not None),
       headlines=[notebook.headline("bf16 matmul", bf16_live, bf16_rec, "TFLOP/s", 0)] if own and bf16_live else None)

# %% [markdown]
# ### Weight-only int8 and int4, in practice
#
# A decode step multiplies a few activation rows by large weight matrices, so it is bound by the
# bytes of the weights (notebook 00's roofline). Weight-only quantisation stores the weights in 8 or
# 4 bits; activations stay bf16. It can only gain if the kernel dequantises the weights as it loads
# them, so that just the small weights cross memory. PyTorch has such kernels for int4
# (`torch._weight_int4pack_mm`, groups of 128 along K with a scale and a zero each) and, on a CPU,
# for int8 (`torch._weight_int8pack_mm`, one scale per output row). For int8 on a GPU it has none:
# the fallback here, `linear(x, q.to(bf16)) * scale`, converts the weights in a kernel of its own,
# and the text below counts the bytes that costs. Each path is checked against the fp32 matmul of
# its own dequantised weights, here at a small size:

# %%
show_source(bench_dtypes.weight_only)

# %%
wo_live = bench_dtypes.weight_only(P["device"], 256 if P["smoke"] else 1024, 16, repeat=5)
md(explain_weight_only(wo_live, f"On this {device.gpu_name() if P['device'] == 'cuda' else 'CPU'}", live=True))
if ref is not None and ref.get("weight_only"):
    md(explain_weight_only(ref["weight_only"], f"On the {ref['environment'].get('gpu')}"))
elif ref is not None:
    print("The reference record predates the weight-only rows: run `course-kit bench dtypes` on a GPU to add them.")

# %% [markdown]
# ### Weight-only decode: what the bytes predict and what it measures
#
# At batch 1 a decode step is a chain of matrix-vector products (notebook 05): every weight is read
# once per token and used for one multiply-add, so a product takes as long as its bytes take to cross
# memory (notebook 00's roofline, far left of the ridge). Storing the weights in 8 or 4 bits can only
# shorten that if the kernel reads the codes themselves. The int8 path above reads them twice and
# writes a bf16 copy in between; torch's int4 kernel (tinygemm) reads only the codes. What decides
# decode speed is how close to the copy rate a kernel reads them when the batch is one row.
#
# The course's own kernels (`cuda_graphs/decode_kernels/woq_gemv.py`) are the batch-1 products of
# notebook 05 on packed weights. The values are this notebook's: int8 with one scale per row, int4
# in groups of 128 along K with a scale and a zero each, $w = (q - 8)\,s + z$. What is new is how a
# code becomes a number. A code $q$ moved into the top bits of a float32's mantissa, with the
# exponent bits of 1.0 or-ed in, *is* the float $1 + q/16$ (four bits lower, $1 + q/256$): a shift and
# one mask-and-or, no int-to-float conversion (which runs at a quarter of the multiply-add rate and
# would cap the kernel below the copy rate). One shift places two codes of a word at once, so four
# shifts serve its eight. Per group the kernel sums these floats times $x$ and the group's $x$, $S_x$
# (the same for every row), and applies the scale and zero once per group:
#
# $$\sum_{k \in g} w_k x_k = s \sum q_k x_k + (z - 8s)\,S_x, \qquad
#   \sum (1 + q_k/16)\, x_k = S_x + \tfrac{1}{16} \sum q_k x_k .$$
#
# A 32-bit word holds 8 int4 codes (4 int8 ones) of columns far apart, so each of its codes
# multiplies one contiguous run of $x$. Nothing but the codes and one scale and zero per group crosses
# memory; accumulation is fp32, the activations bf16, and the layer's norm, SwiGLU, residual and RoPE
# ride along as in notebook 05's kernels. The heart of it, for int4:

# %%
from course_kit.benchmarks import woq as bench_woq
from course_kit.cuda_graphs import quantised
from course_kit.cuda_graphs.decode_kernels import woq_gemv
from course_kit.dtypes import woq_roofline
from course_kit.dtypes.woq_explain import (dtype_label, explain_crossing, explain_decode, explain_error,
                                           explain_gemv, explain_packed)
from course_kit.models import llama
from course_kit.plots import woq as woq_plots
from course_kit.widgets.woq import WoqExplorer

ON_CPU = P["device"] == "cpu"
WOQ_SHAPE = (128, 256) if P["smoke"] else (512, 1024) if ON_CPU else (4096, 4096)   # the product checked live
WOQ_PRESET = "tiny" if ON_CPU else "smollm-135m"          # the model whose quality is measured live
WOQ_GROUP = 32 if WOQ_PRESET == "tiny" else 64            # int4 groups that divide its every K
WOQ_POSITIONS = 16 if P["smoke"] else 64 if ON_CPU else 256
show_source(woq_gemv._fold_int4.fn)

# %% [markdown]
# Each format on one weight, one row of activations, through the fused kernel (on a CPU, Triton's
# interpreter runs it), against the fp32 matmul of its own dequantised weights:

# %%
packed_rows = quantised.packed_products(*WOQ_SHAPE, P["device"], P["dtype"])
md(explain_packed(packed_rows))
int4_kernel, int4_why = quantised.int4_path(P["device"])
if int4_why:
    md(int4_why)

# %% [markdown]
# ### The decode step on packed weights, and what it costs in quality
#
# `QuantisedDecodeStep` is notebook 05's Triton step whose q/k/v, output, MLP and logits products read
# int8 or int4 weights; embeddings, norms and the KV cache stay as they were, and
# `DecodeGraphRunner(model, kernels="triton", weights="int4")` captures it in a CUDA graph like the
# bf16 step. Its quality is measured against the unquantised step on the same weights: both decode
# the same positions, each fed the unquantised step's own greedy tokens (so one early disagreement
# does not make every later position differ), and the figures are the share of positions where the
# two pick the same token and the largest change of a logit.

# %%
show_source(quantised.QuantisedDecodeStep.__call__)
woq_model = llama.Transformer.from_preset(WOQ_PRESET, seed=0, dtype=P["dtype"], device=P["device"])
woq_quality, woq_how = quantised.quality_live(woq_model, WOQ_POSITIONS, WOQ_GROUP)
md(f"{WOQ_PRESET} with random weights: {woq_how}.\n\n"
   + explain_error({WOQ_PRESET: woq_quality}, reference=dtype_label(P["dtype"])))
del woq_model

# %% [markdown]
# ### What it buys on a GPU
#
# `course-kit bench woq` runs llama-1b and the Llama-3-8B shape at batch 1 on the Triton runner in
# bf16, int8 and int4 (CUDA graph, programmatic dependent launch), counts the bytes each step reads
# per token, and times each product of the step on its own. Its record:

# %%
woq_rec = notebook.record("woq")
if woq_rec is not None and any(r.get("kind") == "runner" for r in woq_rec["results"]):
    md(explain_decode(woq_rec["results"]))
    md(explain_gemv(woq_rec["results"], woq_rec["summary"].get("copy_gbs")))
    woq_fig = woq_plots.decode_figure(woq_rec["results"])
else:
    woq_fig = None
    print("No weight-only decode record to show: run `course-kit bench woq` on a GPU to make one.")
woq_fig

# %% [markdown]
# ### Where it stops paying: the roofline crossing
#
# A product with $M$ rows of activations moves its weights once and does $2MNK$ FLOPs. Its time is at
# least the larger of bytes over copy bandwidth and FLOPs over the matmul peak. At small $M$ the bytes
# decide, and fewer bytes per weight means less time. As $M$ grows the FLOPs catch up: a format turns
# compute-bound where the two are equal, int4 first, then int8, then bf16. Between a format's crossing
# and bf16's, its advantage shrinks; past bf16's, every format does the same FLOPs at the same peak and
# quantisation no longer saves time. That is the ideal, computed below from the record's own
# ceilings; a real kernel spends instructions on dequantising, and the measured points show where
# torch's kernels stop paying.

# %%
woq_shapes = woq_roofline.shapes(woq_rec) if woq_rec is not None else []
if woq_shapes:
    woq_shape = next((s for s in woq_shapes if s.endswith(" w13")), woq_shapes[0])
    md(explain_crossing(woq_rec["summary"]["crossing"][woq_shape], woq_shape, woq_rec["summary"]))
    if woq_rec["summary"].get("quality"):
        md(explain_error(woq_rec["summary"]["quality"], reference=dtype_label(woq_rec["summary"].get("dtype"))))
    woq_cross = woq_plots.crossing_figure(woq_rec, woq_shape)
else:
    woq_cross = None
    print("The record has no peer measurements: run `course-kit bench woq` on a GPU to add them.")
woq_cross

# %% [markdown]
# ### Explore: a product, a format, a batch
#
# Pick one of the recorded products, a weight format and a batch size $M$: the explorer shows the bytes
# the product moves, the roofline's shortest time for it, and the recorded time (the course's fused
# kernel at $M = 1$, torch's peer above), on the curve of time against $M$. Where no record exists, it
# measures this machine's ceilings and torch's peers on one small weight first (a few seconds).

# %%
woq_source = woq_rec if woq_shapes else bench_woq.live_record(*WOQ_SHAPE, [1, 4, 16, 64], P["device"],
                                                                repeat=3 if P["smoke"] else 10)
woq_explorer = WoqExplorer(woq_source)
widgets.show(woq_explorer.widget, woq_explorer.figure, "the weight-only explorer")

# %% [markdown]
# ## Exercises
#
# ### Exercise 01.fp8_round: round fp32 to fp8 e4m3fn yourself
#
# Section 2 let torch do every fp8 rounding. Now do it yourself. Write `round_to_e4m3(x)`: for a
# float32 tensor, return a float32 tensor holding the values fp8 **e4m3fn** stores for it (round to
# nearest, ties to even), exactly what `x.to(torch.float8_e4m3fn).float()` gives in this torch:
# - normal numbers keep 3 mantissa bits; below the smallest normal (`2^-6`) the grid of subnormals
#   goes on down to zero;
# - beyond the range, do what section 2 showed this torch doing: saturate to ±448 where
#   `fp8_overflow.saturates()` is true, NaN where it is false (ask it inside your function, so that
#   the function is right under either PyTorch);
# - the sign is kept, also the sign of a zero; NaN stays NaN.
#
# Do not use a torch float8 dtype: use arithmetic on the values or on their bits. The check compares
# you with torch's own cast, bit for bit, on edge cases (ties, carries into the exponent, the top of
# the range, subnormals) and random values, and a hidden check on random bit patterns.

# %% {"course_kit": {"exercise": "01.fp8_round", "role": "solution", "points": 3, "task": "write round_to_e4m3(x) (see the task above)"}}
def round_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    ### BEGIN SOLUTION
    a = x.abs().to(torch.float64).clamp(max=1e4)            # far beyond 448 either way, and no inf
    _, e = torch.frexp(a)                                    # a = m * 2**e with m in [0.5, 1)
    step = torch.exp2((e - 1).clamp(min=-6).to(torch.float64) - 3)   # the grid spacing; subnormals: 2**-9
    q = torch.round(a / step) * step                         # torch.round: half to even
    if fp8_overflow.saturates():                             # this torch clamps to the max ...
        q = q.clamp(max=448.0)
    else:                                                    # ... or gives NaN past it (464 ties down to 448)
        q = torch.where(q > 448.0, torch.full_like(q, math.nan), q)
    q = torch.where(torch.signbit(x), -q, q)                 # the sign, also of zero
    return torch.where(torch.isnan(x), x, q.to(torch.float32))
    ### END SOLUTION

# %% {"course_kit": {"exercise": "01.fp8_round", "role": "check"}}
from course_kit import grading
grading.check("01.fp8_round", round_to_e4m3)

# %% {"course_kit": {"exercise": "01.fp8_round", "role": "hidden"}}
grading.check("01.fp8_round_hidden", round_to_e4m3)

# %% [markdown]
# ### Exercise 01.predict_overflow: predict the outcome
#
# For each `(value, format)` below, predict the outcome **without running anything**: one of
# `"exact"`, `"rounded"`, `"underflow to subnormal"`, `"flushed to zero"`, `"overflow to inf"`,
# `"saturated"`, `"NaN"`. (Integers use scale 1.) The limits table of section 1 has what you need;
# none of these values is in the tables above.
#
# `(65519, fp16)`, `(65536, fp16)`, `(3e-8, fp16)`, `(2.9e-8, fp16)`, `(240, fp8_e4m3fn)`,
# `(250, fp8_e4m3fn)`, `(0.0009, fp8_e4m3fn)`, `(0.001, fp8_e5m2)`, `(127.5, int8)`, `(8, int4)`,
# `(16777217, fp32)`, `(1e-46, fp32)`
#
# Write them as `predictions = {(65519.0, "fp16"): "...", ...}` (values as floats). Then, if you
# like, check yourself with the explorer: `explorer.slider.value = 65519.0`.

# %% {"course_kit": {"exercise": "01.predict_overflow", "role": "solution", "points": 2, "task": "fill predictions with one outcome per (value, format) (see the task above)"}}
### BEGIN SOLUTION
predictions = {
    (65519.0, "fp16"): "rounded",                   # below 65504 + half an ulp (65520): rounds to the max
    (65536.0, "fp16"): "overflow to inf",
    (3e-8, "fp16"): "underflow to subnormal",       # just above half the smallest subnormal: rounds up to it
    (2.9e-8, "fp16"): "flushed to zero",            # below half the smallest subnormal (2^-25)
    (240.0, "fp8_e4m3fn"): "exact",                 # 1.875 x 2^7
    (250.0, "fp8_e4m3fn"): "rounded",               # to 256: the spacing is 16 there
    (0.0009, "fp8_e4m3fn"): "flushed to zero",      # below half of 2^-9
    (0.001, "fp8_e5m2"): "rounded",                 # a normal e5m2 value (smallest normal 2^-14)
    (127.5, "int8"): "saturated",                   # half to even gives 128, clamped to 127
    (8.0, "int4"): "saturated",                     # int4 ends at 7
    (16777217.0, "fp32"): "rounded",                # 2^24 + 1 needs 25 significant bits
    (1e-46, "fp32"): "flushed to zero",             # below half of fp32's smallest subnormal (1.4e-45)
}
### END SOLUTION

# %% {"course_kit": {"exercise": "01.predict_overflow", "role": "check"}}
from course_kit import grading
grading.check("01.predict_overflow", predictions)

# %% [markdown]
# ### Exercise 01.overflow_point: where does an attention-score chain overflow in fp16?
#
# `q` and `k` are `4 x 64` fp16 matrices whose entries all equal `x`. Two ways to compute attention
# probabilities with head dimension `d = 64`:
# - **after**: `torch.softmax((q @ k.T) / math.sqrt(64), -1)` (scale the scores after the matmul);
# - **before**: `torch.softmax((q / math.sqrt(64)) @ k.T, -1)` (scale `q` before it).
#
# 1. **Predict**, without running anything, the smallest positive fp16 `x` for which each chain's
#    output holds an inf or a NaN. Record it in `PREDICTION = {"after": ..., "before": ...}` and run
#    the cell once before writing step 2 (the check needs it, but does not grade it).
# 2. **Measure** it on the CPU with torch: `X_AFTER` and `X_BEFORE`, each an exact fp16 value.
# 3. **Explain**: `CULPRIT`, the letter of the operation that first produces an inf in the *after*
#    chain: (A) `exp` inside the softmax; (B) the matmul `q @ k.T`; (C) the division by `sqrt(64)`;
#    (D) the softmax's sum of exponentials.

# %% {"course_kit": {"exercise": "01.overflow_point", "role": "solution", "points": 2, "task": "record PREDICTION, then measure X_AFTER and X_BEFORE, then answer CULPRIT (see the task above)"}}
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTION = {"after": 1.2, "before": 1.2}   # exp(8 x^2) overflowing? wrong, and still accepted: only recorded
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
xs = torch.arange(0x3C00, 0x7C00, dtype=torch.int16).view(torch.float16)   # every fp16 value from 1 to 65504


def first_bad(prescale):
    q = xs[:, None, None].expand(-1, 4, 64).contiguous()
    s = (q / math.sqrt(64)) @ q.transpose(1, 2) if prescale else (q @ q.transpose(1, 2)) / math.sqrt(64)
    bad = ~torch.isfinite(torch.softmax(s, -1)).flatten(1).all(1)
    return float(xs[int(bad.nonzero()[0])])


X_AFTER, X_BEFORE = first_bad(False), first_bad(True)
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
CULPRIT = "B"    # 64 x^2 passes 65504 at x = 32; softmax subtracts the row max, so exp never overflows
### END SOLUTION

# %% {"course_kit": {"exercise": "01.overflow_point", "role": "check"}}
from course_kit import grading
grading.check("01.overflow_point", PREDICTION, X_AFTER, X_BEFORE, CULPRIT)

# %% {"course_kit": {"exercise": "01.overflow_point", "role": "hidden"}}
grading.check("01.overflow_point_hidden", CULPRIT)

# %% [markdown]
# ### Exercise 01.memory: the memory of Qwen2.5-7B
#
# Qwen2.5-7B's `config.json` (a model the estimator above does not know): 28 layers, hidden size
# 3584, 28 attention heads, 4 KV heads, MLP (SwiGLU, three matrices) intermediate size 18944,
# vocabulary 152064, untied input and output embeddings, an RMSNorm weight vector before attention
# and before the MLP of every layer, and one final RMSNorm. Unlike Llama, its q, k and v projections
# have a **bias**; the output projection and the MLP have none. Compute, from these numbers alone:
# - `n_params`: its parameter count (exact);
# - `weights_gib`: its bf16 weights in GiB;
# - `adam_gib`: the model state of mixed-precision Adam training in GiB;
# - `kv_gib`: the bf16 KV cache of 4 sequences of 32768 tokens in GiB.

# %% {"course_kit": {"exercise": "01.memory", "role": "solution", "points": 2, "task": "compute n_params, weights_gib, adam_gib and kv_gib (see the task above)"}}
### BEGIN SOLUTION
L, h, heads, kv_heads, inter, vocab = 28, 3584, 28, 4, 18944, 152064
d = h // heads
attention = h * h + 2 * h * kv_heads * d + h * h + (h + 2 * kv_heads * d)   # q, k, v, o, q/k/v biases
per_layer = attention + 3 * h * inter + 2 * h                               # + MLP, two norms
n_params = L * per_layer + 2 * vocab * h + h
weights_gib = n_params * 2 / 2**30
adam_gib = n_params * 16 / 2**30
kv_gib = 2 * L * kv_heads * d * 32768 * 4 * 2 / 2**30
### END SOLUTION

# %% {"course_kit": {"exercise": "01.memory", "role": "check"}}
from course_kit import grading
grading.check("01.memory", n_params, weights_gib, adam_gib, kv_gib)

# %% [markdown]
# ## Summary
# - Exponent bits buy range, mantissa bits buy precision. bf16 keeps fp32's range with 8
#   significant bits; fp16 keeps 11 bits in a range that ends at 65504; fp8 e4m3fn ends at 448 and
#   has no infinity, e5m2 trades a mantissa bit for range.
# - Out-of-range values round, go subnormal, flush to zero, overflow to inf, saturate or become NaN;
#   what a given library does at the edges (fp8 e4m3fn beyond 448) is something to run, not assume.
# - fp16 overflows in `exp`, squares and naive softmax where bf16 does not; bf16 loses precision in
#   long sums where fp16 does not; both need fp32 accumulation.
# - int8/int4 store codes and scales; per-channel scales cut the error that outliers cause.
# - Mixed-precision Adam needs 16 bytes per parameter; tensor parallelism divides a model's weights
#   and KV cache over GPUs, which section 6 computed for a 70B model.
#
# **Further reading**
# - IEEE 754-2019, *IEEE Standard for Floating-Point Arithmetic*.
# - P. Micikevicius et al., *FP8 Formats for Deep Learning* (2022), and the OCP *8-bit Floating
#   Point Specification (OFP8)*, revision 1.0 (2023).
# - S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*
#   (SC 2020), section 3.1.
# - V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models* (2022).
# - T. Dettmers et al., *LLM.int8(): 8-bit Matrix Multiplication for Transformers at Scale* (2022).
# - PyTorch documentation: `torch.finfo`, *Numerical accuracy*, and the tf32 notes in *CUDA semantics*.
#
# **Next:** `02_amp_and_gradscaler.ipynb` puts these formats to work in training: autocast picks
# the format per operation, and loss scaling keeps fp16 gradients out of the flush-to-zero zone.

# %% [markdown]
# # 08 · Flash attention: from the textbook formula to a Triton kernel
#
# Attention is `softmax(Q Kᵀ / √d) V`. Written the obvious way it builds an `S x S` matrix of
# scores for every head, so memory grows with the square of the sequence length and the GPU spends
# its time moving that matrix to and from HBM instead of doing math. Flash attention computes the
# same numbers in tiles that stay on chip, thanks to one small algebraic trick: the **online
# softmax**. In this notebook we derive it, write the tiled algorithm in plain PyTorch, then as a
# Triton kernel, and measure it against every backend of PyTorch's `scaled_dot_product_attention`.
#
# {{BADGES}}
#
# **What you will learn**
# - why naive attention's memory is quadratic in the sequence length, measured;
# - the online-softmax recurrence (running max, rescaled running sum), for one row and blockwise;
# - the tiled flash-attention forward, first readable in PyTorch, then as a fast Triton kernel;
# - which SDPA backend (flash, memory-efficient, cuDNN, math) runs on which GPU, T4 included;
# - how close a few dozen lines of Triton get to FlashAttention-2 and cuDNN, on the roofline.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# Sizes follow the device: tiny on a CPU (and in CI's smoke mode), moderate on a small GPU, full on
# an H100/H200. Importing `course_kit.attention` on a machine without CUDA sets
# `TRITON_INTERPRET=1` before Triton is imported, so the Triton kernel runs on the CPU through
# Triton's interpreter (slowly: small shapes only).

# %% {"tags": ["parameters"]}
P = device.defaults()
DEVICE = P["device"]
SIZES = {   # batch, heads, lengths for the live sweep, head dim, the interpreter's test length
    "smoke": dict(batch=1, heads=2, seq_lens=[128, 256], head_dim=64, interp_len=80),
    "cpu": dict(batch=1, heads=4, seq_lens=[128, 256, 512, 1024], head_dim=64, interp_len=160),
    "small_gpu": dict(batch=2, heads=8, seq_lens=[512, 1024, 2048, 4096], head_dim=128, interp_len=0),
    "full": dict(batch=4, heads=16, seq_lens=[1024, 2048, 4096, 8192], head_dim=128, interp_len=0),
}[P["size"]]
BATCH, HEADS, SEQ_LENS, HEAD_DIM = SIZES["batch"], SIZES["heads"], SIZES["seq_lens"], SIZES["head_dim"]
SEED = 0

# %%
import math

import plotly.graph_objects as go
import torch
import torch.nn.functional as F

from course_kit import attention, bench, notebook
from course_kit.attention import naive, online_softmax, sdpa_backends, tiled, triton_flash, triton_softmax
from course_kit.benchmarks import attention as attention_bench
from course_kit.notebook import md, show_source
from course_kit.plots import attention as aplots

# half precision where the GPU has tensor cores for it; float32 on a CPU (fast there, and exact enough)
DTYPE = P["dtype"]   # the device's compute dtype: bf16, fp16 on a T4, fp32 on a CPU
torch.manual_seed(SEED)
print(f"device={DEVICE}, dtype={DTYPE}, Triton interpreter: {triton_flash.interpreting()}")


def qkv(seq_len, head_dim=HEAD_DIM, batch=BATCH, heads=HEADS, kv_heads=None, dtype=None, seed=SEED):
    """Random (never zero) inputs of the given shape, [B, H, S, D]."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    shapes = [(batch, heads), (batch, kv_heads or heads), (batch, kv_heads or heads)]
    return [torch.randn(*bh, seq_len, head_dim, generator=g, device=DEVICE, dtype=dtype or DTYPE) for bh in shapes]

# %% [markdown]
# ## 1. Naive attention, and its S² memory
#
# For one head, `scores = Q Kᵀ · scale` is `S x S`; the softmax makes a second `S x S` tensor, and
# only then does `P V` bring us back to `S x D`. With 16 heads, a batch of 4 and `S = 16k`, one
# bf16 score tensor alone is 4·16·16384²·2 bytes, about 34 GB.

# %%
show_source(naive.naive_attention)

# %% [markdown]
# `peak_memory` measures what a call allocates at its peak: on a GPU from the caching allocator's
# peak counter, on a CPU by replaying the PyTorch profiler's allocations and frees.

# %%
show_source(naive.peak_memory)

# %%
naive_rows = []
for s in bench.progress(SEQ_LENS, desc="naive"):
    q, k, v = qkv(s)
    run = lambda: naive.naive_attention(q, k, v, causal=True)  # noqa: E731
    # a GPU with less memory than this notebook's sizes assume skips a length instead of failing
    res = bench.guard_oom(lambda: (bench.timeit(run, warmup=1, repeat=3), naive.peak_memory(run, DEVICE)),
                          what=f"naive attention at S={s}")
    if isinstance(res, bench.Skipped):
        print(res.reason)
        continue
    naive_rows.append({"seq_len": s, "ms": res[0].median_s * 1e3, "peak_MiB": res[1] / 2**20,
                       "scores_MiB": BATCH * HEADS * s * s * q.element_size() / 2**20})
    del q, k, v
fig = go.Figure()
fig.add_scatter(x=[r["seq_len"] for r in naive_rows], y=[r["peak_MiB"] for r in naive_rows], mode="lines+markers",
                name="measured peak")
fig.add_scatter(x=[r["seq_len"] for r in naive_rows], y=[r["scores_MiB"] for r in naive_rows], mode="lines",
                line_dash="dot", name="one S x S score tensor")
fig.update_layout(xaxis_type="log", yaxis_type="log", xaxis_title="sequence length S", yaxis_title="MiB",
                  title="Naive attention: peak memory against S", height=380)
fig

# %%
first, last = naive_rows[0], naive_rows[-1]
growth = last["peak_MiB"] / first["peak_MiB"]
md(f"From S = {first['seq_len']} to S = {last['seq_len']} ({last['seq_len'] // first['seq_len']}x longer), "
   f"naive attention's peak memory grew **{growth:.1f}x** (a square law predicts "
   f"{(last['seq_len'] / first['seq_len']) ** 2:.0f}x; the linear-size Q, K, V and output make up the rest "
   f"at small S). At S = {last['seq_len']} the peak is **{last['peak_MiB'] / last['scores_MiB']:.1f}** score "
   f"tensors' worth: the scores, the probabilities and, in half precision, their float32 copies for the softmax.")

# %% [markdown]
# ## 2. The online softmax
#
# Softmax needs the row's maximum `m` before it can exponentiate safely (`exp(x - m)` never
# overflows) and the sum `l = Σ exp(x_j - m)` before it can normalise. That looks like three passes.
# Keep instead, after `t` elements, the running max `m_t` and the running sum **relative to it**,
# `l_t = Σ_{j≤t} exp(x_j - m_t)`. When `x_{t+1}` arrives:
#
# $$m_{t+1} = \max(m_t, x_{t+1}), \qquad l_{t+1} = l_t\, e^{m_t - m_{t+1}} + e^{x_{t+1} - m_{t+1}}.$$
#
# The factor `e^{m_t - m_{t+1}} ≤ 1` rescales the old sum to the new maximum; it is 1 whenever the
# maximum does not change. After the last element, `l` is exactly the softmax denominator. The same
# update works for a whole *block* of new elements (take the block's max, sum the block's
# exponentials), which is what a GPU wants.

# %%
show_source(online_softmax.online_softmax_row)

# %%
row = (torch.randn(16, generator=torch.Generator().manual_seed(3)) * 3).tolist()
probs, history = online_softmax.online_softmax_row(row)
err_row = (probs - torch.softmax(torch.tensor(row, dtype=torch.float64), 0)).abs().max().item()
aplots.online_softmax_figure(row, history)

# %%
show_source(online_softmax.online_softmax_update)

# %%
x = torch.randn(4, 1000, dtype=torch.float64) * 40 + 800          # exp(800) overflows float64
blockwise = online_softmax.blockwise_softmax(x, block=64)
err_block = (blockwise - torch.softmax(x, -1)).abs().max().item()
md(f"One element at a time: max |online - torch.softmax| = **{err_row:.1e}**. Blockwise (64 columns "
   f"at a time) on logits near 800, where `exp` alone would overflow: **{err_block:.1e}**. The running max "
   f"changed {len(set(m for m, _ in history))} times along the 16-element row; each change rescaled the sum.")

# %% [markdown]
# ## 3. Tiled attention in PyTorch
#
# Flash attention applies the online softmax to attention. For a block of queries it walks over
# blocks of keys, keeping per row the running max `m`, the running sum `l`, and an **unnormalised
# output** `acc = Σ P V`, which must be rescaled by the same factor as `l` whenever `m` grows:
#
# ```
# s   = q_blk @ k_blkᵀ · scale          # BLOCK_M x BLOCK_N: never S x S
# m'  = max(m, rowmax(s));  α = exp(m - m')
# p   = exp(s - m')
# l   = α·l + rowsum(p);     acc = α·acc + p @ v_blk
# ```
#
# and divides by `l` once at the end. With a causal mask, key blocks entirely above the diagonal are
# never visited, which halves the work. Here is one step and the loops around it:

# %%
show_source(tiled.tiled_block_step)

# %%
show_source(tiled.tiled_attention)

# %%
# the float64 reference runs on the CPU, so the accuracy check uses one sequence of at most 1024
s_demo = min(SEQ_LENS[-1], 1024)
TILE = 256 if DEVICE == "cuda" else 64      # on a GPU every block step costs a few kernel launches
q, k, v = qkv(s_demo, batch=1)
errs = {}
for causal in (False, True):
    ref = naive.reference_attention(q, k, v, causal=causal)
    errs[causal] = {"tiled": (tiled.tiled_attention(q, k, v, causal=causal, block_m=TILE, block_n=TILE).double().cpu() - ref).abs().max().item(),
                    "sdpa": (F.scaled_dot_product_attention(q, k, v, is_causal=causal).double().cpu() - ref).abs().max().item()}
# memory at the largest shape of section 1, to compare with naive attention there
q, k, v = qkv(SEQ_LENS[-1])
tiled_mem = naive.peak_memory(lambda: tiled.tiled_attention(q, k, v, causal=True, block_m=TILE, block_n=TILE), DEVICE)
md(f"At S = {s_demo}, {str(DTYPE).replace('torch.', '')}: max |tiled - float64| = **{errs[False]['tiled']:.1e}** "
   f"(causal **{errs[True]['tiled']:.1e}**), against SDPA's own **{errs[False]['sdpa']:.1e}** "
   f"(causal **{errs[True]['sdpa']:.1e}**). Peak memory at S = {SEQ_LENS[-1]}: **{tiled_mem / 2**20:.2f} MiB** "
   f"tiled against **{naive_rows[-1]['peak_MiB']:.2f} MiB** naive: the S x S matrices are gone.")

# %% [markdown]
# The causal kernel splits each query block's keys into three kinds of tile: those entirely
# below the diagonal (every key visible to every query: **no mask**, the fast loop), those crossing
# the diagonal or the ragged end of the sequence (**masked**), and those above it (**skipped**).

# %%
aplots.causal_tiles_figure(1000, 128, 64)

# %% [markdown]
# ## 4. A flash-attention kernel in Triton
#
# The Triton kernel is the same algorithm with one program per (query block, batch x head). Its
# comments explain the choices that make it fast on a GPU:
# - the query block is loaded **once** and stays in registers; K and V stream through shared memory,
#   with **3-4 pipeline stages** so the next tiles load while the current one is multiplied;
#   on Hopper they are loaded by **TMA** (tensor-memory-accelerator descriptors) where Triton has them;
# - both matmuls run on **tensor cores** in bf16/fp16 with float32 accumulation;
# - softmax uses **`exp2`**, with `log₂e` folded into the scale (`eˣ = 2^(x·log₂e)`), one FMA per score;
# - causal work is split into an **unmasked** loop and a short **masked** one, and the heaviest
#   query blocks are launched first;
# - K/V heads are shared by groups of query heads (**GQA**), by index arithmetic only;
# - a short **autotune** list (BLOCK_M = 128, BLOCK_N = 64/128, 8 warps, 3-4 stages on Hopper;
#   BLOCK_M = 64 too for short sequences) is tried once per (length, batch x heads, head dim,
#   causal, loader) bucket. Under the interpreter one fixed configuration is used.

# %%
show_source(triton_softmax.online_softmax_fold.fn)
show_source(triton_flash._flash_attend_blocks.fn)

# %%
show_source(triton_flash._flash_fwd_kernel.fn)

# %% [markdown]
# Correctness first: random shapes, with lengths that are not multiples of the block size, GQA, and
# causal masks, against a float64 reference. On a CPU this runs through Triton's interpreter.

# %%
ok_triton, why_triton = attention.triton_available()
checks = []
if ok_triton:
    if DEVICE == "cuda":
        # ragged lengths, GQA, both head dims; small enough for the CPU's float64 reference
        cases = [(2, 8, 2, 1000, 128, True), (1, 4, 4, 4097, 64, False), (4, 4, 1, 333, 128, True)]
    else:
        n = SIZES["interp_len"]
        cases = [(1, 2, 1, n, 64, True), (1, 2, 2, n // 2 + 3, 32, False)]
    for i, (b, hq, hkv, s, d, causal) in enumerate(bench.progress(cases, desc="triton checks")):
        half = torch.bfloat16 if DEVICE == "cpu" or device.capabilities().bf16_tensor_cores else torch.float16
        q, k, v = qkv(s, d, b, hq, hkv, dtype=half, seed=i)
        out = triton_flash.flash_attention(q, k, v, causal=causal)
        err = (out.double().cpu() - naive.reference_attention(q, k, v, causal=causal)).abs().max().item()
        checks.append({"shape": f"B={b} Hq={hq} Hkv={hkv} S={s} D={d}", "causal": causal,
                       "dtype": str(half).replace("torch.", ""), "max_abs_err": err, "ok": err < 3e-2})
    fig = go.Figure(go.Table(header=dict(values=list(checks[0])),
                             cells=dict(values=[[f"{c[key]:.2e}" if key == "max_abs_err" else c[key] for c in checks]
                                                for key in checks[0]])))
    fig.update_layout(height=60 + 35 * len(checks), margin=dict(t=10, b=10))
else:
    fig = None
    print("The Triton kernel cannot run here:", why_triton)
fig

# %%
if checks:
    md(f"All {len(checks)} shapes within bf16 tolerance: **{all(c['ok'] for c in checks)}** (largest error "
       f"**{max(c['max_abs_err'] for c in checks):.1e}**; bf16 keeps 8 significant bits, so about 4e-3 "
       f"relative per rounding).")

# %% [markdown]
# ### The backward pass
#
# Training needs gradients. The forward stored only `O` and each row's log-sum-exp `L`, not `P`,
# so the backward recomputes `P = exp(Q Kᵀ·scale - L)` tile by tile and applies the softmax
# Jacobian: `dV = Pᵀ dO`, `dS = P ∘ (dO Vᵀ - Δ)` with `Δ = rowsum(dO ∘ O)`, `dQ = dS K·scale`,
# `dK = dSᵀ Q·scale`. One kernel owns a key block and sums dK, dV over the query blocks (and the
# query heads of its GQA group); another owns a query block and sums dQ: no atomics. It is written
# for clarity, not speed.

# %%
from course_kit.attention import triton_flash_bwd

show_source(triton_flash_bwd._p_and_ds.fn)

# %%
if ok_triton:
    n = 1000 if DEVICE == "cuda" else 40
    half = torch.bfloat16 if DEVICE == "cpu" or device.capabilities().bf16_tensor_cores else torch.float16
    q, k, v = (t.detach() for t in qkv(n, 64, 1, 4, 2, dtype=half, seed=7))
    do = torch.randn_like(q)
    leaves = {name: [t.clone().requires_grad_() for t in (q, k, v)] for name in ("triton", "sdpa")}
    triton_flash_bwd.flash_attention_trainable(*leaves["triton"], causal=True).backward(do)
    sdpa_backends.sdpa(*leaves["sdpa"], causal=True).backward(do)
    exact = [t.double().requires_grad_() for t in (q, k, v)]
    naive.naive_attention(*exact, causal=True).backward(do.double())
    rel = {name: max(((t.grad.double() - e.grad).abs().max() / e.grad.abs().max()).item()
                     for t, e in zip(ts, exact)) for name, ts in leaves.items()}
    md(f"Gradients dQ, dK, dV for S = {n}, causal, GQA 4 query heads on 2 K/V heads, {str(half).replace('torch.', '')}: "
       f"largest error relative to float64 **{rel['triton']:.1e}** for the Triton backward, "
       f"**{rel['sdpa']:.1e}** for SDPA's own backward.")

# %%
# %% [markdown]
# ## 5. PyTorch's SDPA backends, and which GPU has which
#
# `F.scaled_dot_product_attention` dispatches to one of four kernels; `torch.nn.attention.sdpa_kernel`
# pins one. FlashAttention-2 and cuDNN attention need sm_80 (Ampere) or newer, so a Colab **T4
# (sm_75)** has neither, and its memory-efficient backend has no bf16: on a T4 use fp16. The rules
# are a pure function of the compute capability, tested by simulating each GPU:

# %%
show_source(sdpa_backends.backend_support)

# %%
machines = {"T4 (sm_75)": (7, 5), "A100 (sm_80)": (8, 0), "L4 (sm_89)": (8, 9), "H100/H200 (sm_90)": (9, 0),
            "CPU": None}
table = {name: sdpa_backends.backend_support(cap, torch.bfloat16, 128) for name, cap in machines.items()}
fig = go.Figure(go.Table(header=dict(values=["bf16, head dim 128"] + list(table)),
                         cells=dict(values=[list(sdpa_backends.BACKENDS)] + [
                             [("✅ " if ok else "— ") + why for ok, why in col.values()] for col in table.values()])))
fig.update_layout(height=260, margin=dict(t=10, b=10))
fig

# %% [markdown]
# And what the installed PyTorch actually runs here, on real inputs (xFormers is used only if it is
# installed):

# %%
q, k, v = qkv(SEQ_LENS[0])
probe = sdpa_backends.probe(q, k, v, causal=True)
md("On this machine: " + "; ".join(f"**{n}** {'runs' if ok else 'unavailable'}" + ("" if ok else f" ({why})")
                                   for n, (ok, why) in probe.items())
   + f". xFormers installed: **{sdpa_backends.xformers_available()}**.")

# %% [markdown]
# ## 6. Everything against everything: time, memory, TFLOP/s
#
# `course-kit bench attention` first checks every variant against float64 (ragged GQA shapes,
# causal and not), then times them all in one run on the same inputs with CUDA events (causal,
# forward), and records TFLOP/s (causal FLOPs counted as half) and peak memory. Here it runs on
# this machine at this notebook's sizes. Under the interpreter, Triton is for correctness, not
# speed, so on a CPU it is left out of the timings.

# %%
show_source(attention_bench.measure_case)

# %%
params = {"size": P["size"], "seq_lens": SEQ_LENS, "batch": BATCH, "heads": HEADS,
          "d64_seq_lens": [SEQ_LENS[-1]] if DEVICE == "cuda" else [], "repeat": 2 if DEVICE == "cpu" else 20}
own = bench.run_topic("attention", params)
aplots.time_memory_figure(own["results"], head_dim=128, title=f"This machine ({own['environment'].get('gpu') or 'CPU'})")

# %%
acc_shape = own["summary"]["acceptance_shape"]
at = {k: v for k, v in own["summary"]["tflops_at_acceptance"].items() if v}
fastest = max(at, key=at.get)
md(f"All variants passed the float64 check: **{own['summary']['checks_passed']}**. At S = {acc_shape['seq_len']} "
   f"(causal, D = {acc_shape['head_dim']}) the fastest here is **{fastest}** at **{at[fastest]:.3g} TFLOP/s**"
   + (f"; naive reached {at['naive']:.3g}." if "naive" in at else "."))

# %% [markdown]
# ### The reference H200 run
#
# The acceptance configuration is B = 4, H = 16, S = 4096, D = 128, causal, bf16, forward, with a
# sweep of S from 1k to 16k and head dim 64. On a CPU this section shows the recorded reference.

# %%
ref = notebook.record("attention")
if ref:
    fig = aplots.time_memory_figure(ref["results"], head_dim=128, title=f"Reference: {ref['environment'].get('gpu')}")
else:
    fig = None
    print("No reference record yet: run `course-kit bench attention` on a GPU to create data/reference/<gpu>/attention.json.")
fig

# %%
if ref:
    s = ref["summary"]
    parts = [f"On the reference {ref['environment'].get('gpu')}, at the acceptance shape the Triton kernel "
             f"(**{s.get('triton_variant')}**) reached **{s.get('triton_tflops', float('nan')):.0f} TFLOP/s**"]
    if s.get("triton_over_flash"):
        parts.append(f"**{s['triton_over_flash']:.2f}x** the SDPA flash backend (FlashAttention-2)")
    if s.get("triton_over_cudnn"):
        parts.append(f"**{s['triton_over_cudnn']:.2f}x** the cuDNN backend")
    md(", ".join(parts) + f". Every variant passed the float64 check: **{s.get('checks_passed')}**.")
    display_fig = aplots.tflops_figure(ref["results"], s["acceptance_shape"],
                                       peak_tflops=(notebook.record("roofline", quiet=True) or {}).get("summary", {})
                                       .get("matmul_tflops", {}).get("bf16"),
                                       title="Reference: achieved TFLOP/s at the acceptance shape")
else:
    display_fig = None
display_fig

# %%
bwd = (own if DEVICE == "cuda" else ref or {}).get("backward")
if bwd:
    fb = {r["variant"]: r for r in bwd}
    md("Forward + backward at the acceptance shape (FLOPs: 3.5x the forward's): " + "; ".join(
        f"**{name}** {r['tflops']:.0f} TFLOP/s" for name, r in fb.items())
       + ". The backward here is the plain one of this notebook; FlashAttention-2's is tuned far harder.")
else:
    print("No forward+backward timings recorded (they are measured on a GPU).")

# %% [markdown]
# ### On the roofline of notebook 00
#
# Attention's arithmetic intensity (FLOPs per byte of Q, K, V and O) grows with S, so at S = 4096
# the fused kernels sit far right of the ridge: they are compute-bound, and their distance below
# the bf16 ceiling is what is left to win. Naive attention and the math backend also move the
# S x S matrices, which pulls their intensity down by orders of magnitude.

# %%
record = own if DEVICE == "cuda" else ref
roof = notebook.record("roofline", quiet=True)
fig = None
if record:
    fig = aplots.attention_roofline(record["results"], record["summary"]["acceptance_shape"], roof,
                                    peaks=device.peaks((record.get("environment") or {}).get("gpu")))
if fig is None:
    print("No GPU record (or roofline) to place the kernels on yet.")
fig

# %% [markdown]
# ## Exercises
#
# ### Exercise 08.online_update: the online-softmax update
# Write `online_update(m, l, x_block)`: given the running max `m` and running sum `l` (shape `[...]`;
# before the first block `m = -inf` and `l = 0`) and a block of new scores `x_block` (shape
# `[..., n]`), return the new `(m, l)`. Remember to rescale the old sum to the new maximum.

# %% {"course_kit": {"exercise": "08.online_update", "role": "solution", "points": 2}}
def online_update(m, l, x_block):
    ### BEGIN SOLUTION
    m_new = torch.maximum(m, x_block.amax(dim=-1))
    l_new = l * torch.exp(m - m_new) + torch.exp(x_block - m_new.unsqueeze(-1)).sum(dim=-1)
    return m_new, l_new
    ### END SOLUTION

# %% {"course_kit": {"exercise": "08.online_update", "role": "check"}}
from course_kit import grading
grading.check("08.online_update", online_update)

# %% [markdown]
# ### Exercise 08.tiled_block: one block of the tiled forward
# Write `block_step(q_blk, k_blk, v_blk, m, l, acc, scale)` for one query block and one key block
# (no mask): `q_blk` is `[..., M, D]`, `k_blk` and `v_blk` are `[..., N, D]`, `m` and `l` are
# `[..., M]`, `acc` is `[..., M, D]`. Return the new `(m, l, acc)`: the scores, the new max, the
# rescale factor `α`, then `l` and `acc` rescaled by `α` plus this block's contribution.

# %% {"course_kit": {"exercise": "08.tiled_block", "role": "solution", "points": 3}}
def block_step(q_blk, k_blk, v_blk, m, l, acc, scale):
    ### BEGIN SOLUTION
    s = q_blk @ k_blk.transpose(-2, -1) * scale
    m_new = torch.maximum(m, s.amax(dim=-1))
    alpha = torch.exp(m - m_new)
    p = torch.exp(s - m_new.unsqueeze(-1))
    return m_new, l * alpha + p.sum(dim=-1), acc * alpha.unsqueeze(-1) + p @ v_blk
    ### END SOLUTION

# %% {"course_kit": {"exercise": "08.tiled_block", "role": "check"}}
grading.check("08.tiled_block", block_step)

# %% [markdown]
# ## Summary
# - Naive attention materialises `S x S` scores and probabilities: memory and HBM traffic grow as S².
# - The online softmax keeps a running max and a rescaled running sum, so softmax needs one pass and
#   can be computed block by block.
# - Flash attention tiles Q, K and V, rescales a running output with the same factor, and never
#   writes the score matrix: linear memory, and compute-bound instead of memory-bound.
# - A Triton kernel of about a hundred lines, with exp2, an unmasked/masked split, heavy-first
#   scheduling, pipelined (TMA) loads and a small autotune list, competes with FlashAttention-2 and
#   cuDNN; the recorded ratios above say by how much on an H200.
# - SDPA picks among flash, memory-efficient, cuDNN and math; a T4 has neither flash nor cuDNN.
#
# **Further reading**
# - M. Milakov, N. Gimelshein, *Online normalizer calculation for softmax*, 2018.
# - T. Dao, D. Fu, S. Ermon, A. Rudra, C. Ré, *FlashAttention: fast and memory-efficient exact
#   attention with IO-awareness*, NeurIPS 2022; T. Dao, *FlashAttention-2*, 2023; J. Shah et al.,
#   *FlashAttention-3*, 2024 (Hopper: TMA, warp specialisation, FP8).
# - The Triton tutorials, *Fused Attention*; the PyTorch documentation of
#   `torch.nn.functional.scaled_dot_product_attention` and `torch.nn.attention.sdpa_kernel`.
#
# **Next:** `09_parallelism.ipynb` spreads the model over several GPUs, including context
# parallelism, which splits this very attention along the sequence.

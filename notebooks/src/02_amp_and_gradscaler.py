# %% [markdown]
# # 02 · Automatic mixed precision and loss scaling
#
# Training in 16-bit formats stores activations in 2 bytes instead of 4 and, on a GPU with tensor
# cores, runs matmuls on units whose datasheet peak is many times fp32's (notebook 00 measured it). *Automatic mixed precision* (AMP)
# gets most of that without rewriting the model: `torch.autocast` runs each operation in the format
# that suits it, and the weights stay in fp32. fp16 has one catch: its range is narrow, and small
# gradients underflow to zero. *Loss scaling* fixes that. This notebook trains the same small GPT in
# five precision modes, looks at where the gradients sit against fp16's range, and builds a dynamic
# loss scaler by hand that reproduces `torch.amp.GradScaler` step for step.
#
# {{BADGES}}
#
# **What you will learn**
# - what autocast does to each operation (which run in 16 bits and which stay in fp32);
# - why fp16 gradients underflow, and how multiplying the loss by a scale S rescues them;
# - the dynamic loss-scaling algorithm: unscale, inf/NaN check, skipped step, backoff and growth;
# - what strict fp32, TF32, bf16 and fp16 cost in step time and memory, on this machine and on an H200;
# - what holds a training step's peak GPU memory (weights, gradients, optimizer state, activations,
#   autocast's weight copies), read from a `torch.cuda.memory` snapshot.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# The model and the number of steps come from the device: a 28k-parameter model under
# `COURSE_KIT_SMOKE=1` (CI), a larger one on a GPU. `course-kit bench amp` times a 0.34B-parameter
# model on the reference H200.

# %% {"tags": ["parameters"]}
P = device.defaults()
DEVICE = P["device"]
PRESET = {"smoke": "smoke", "cpu": "cpu"}.get(P["size"], "small_gpu")   # course_kit.models.tiny_gpt presets
# cpu: 12 steps keep section 4's five training runs within about 30 s on an idle 2-core machine
STEPS = {"smoke": 20, "cpu": 12, "small_gpu": 60, "full": 100}[P["size"]]
BATCH = {"smoke": 8, "cpu": 8, "small_gpu": 8, "full": 32}[P["size"]]
LR = 3e-3 if PRESET in ("smoke", "cpu") else 3e-4

# %%
import torch

from course_kit import amp, bench, device, notebook, reference, widgets
from course_kit.amp import explain as amp_explain, snapshot as amp_snapshot
from course_kit.models import tiny_gpt
from course_kit.notebook import md, show_source
from course_kit.profiling import memory as pmemory
from course_kit.plots import amp as amp_plots
from course_kit.widgets.amp import LossScaleExplorer, ScalerStepper

if DEVICE == "cpu" and P["smoke"]:
    # The smoke model is tiny: one thread avoids OpenMP threads contending on a shared 2-core CI box.
    torch.set_num_threads(1)
cfg = tiny_gpt.config(PRESET)
print(f"model: {PRESET} preset, {cfg.n_params():,} parameters; {STEPS} steps of {BATCH} x {cfg.seq_len} tokens on {DEVICE}")

# %% [markdown]
# ## 1. Five precision modes, one training loop
#
# | mode | weights | matmuls | gradients | scaling |
# |---|---|---|---|---|
# | `fp32` | fp32 | fp32 (TF32 off) | fp32 | none |
# | `tf32` | fp32 | TF32 tensor cores (10-bit mantissa) | fp32 | none |
# | `bf16` | fp32 | bf16 under autocast | computed in bf16 (weights' grads then cast to fp32) | none needed |
# | `fp16_scaler` | fp32 | fp16 under autocast | computed in fp16 (weights' grads then cast to fp32) | dynamic loss scaling |
# | `fp16_noscale` | fp32 | fp16 under autocast | computed in fp16 (weights' grads then cast to fp32) | none: small ones underflow |
#
# A mode is just a context the forward pass runs in:

# %%
show_source(amp.Precision.context)

# %% [markdown]
# Autocast does not convert everything. It keeps per-device lists: matmuls and linear layers run in
# the low precision (they gain the most and tolerate rounding), while operations that need range run
# in fp32. On CUDA the fp32 list includes softmax, layer norm and the cross-entropy; CPU autocast's
# lists are shorter (it runs layer norm and softmax in bf16/fp16). Elementwise operations simply
# follow their inputs. The table is computed by this machine's autocast:

# %%
x, w = torch.randn(4, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
ops = {"x @ w": lambda: x @ w, "layer_norm": lambda: torch.nn.functional.layer_norm(x @ w, (8,)),
       "softmax": lambda: torch.softmax(x @ w, -1), "x + x (elementwise)": lambda: x + x,
       "cross_entropy": lambda: torch.nn.functional.cross_entropy(x @ w, torch.zeros(4, dtype=torch.long, device=DEVICE))}
rows = []
for name, fn in ops.items():
    row = {"op": name}
    for mode in ("fp32", "bf16", "fp16_scaler"):
        with amp.get(mode).context(DEVICE):
            row[mode] = str(fn().dtype).replace("torch.", "")
    rows.append(row)
md("| op | fp32 | bf16 autocast | fp16 autocast |\n|---|---|---|---|\n" +
   "\n".join(f"| {r['op']} | {r['fp32']} | {r['bf16']} | {r['fp16_scaler']} |" for r in rows))

# %% [markdown]
# The training loop is the same for every mode. It records the loss, the step time (between two
# device synchronisations), the loss scale, whether the step was skipped, and, after the timer
# stops, where the gradients sit against fp16's range.

# %%
show_source(amp.train)

# %% [markdown]
# ## 2. Gradient underflow: why fp16 needs loss scaling
#
# fp16 has 5 exponent bits. Its smallest normal number is $2^{-14} \approx 6.1\times10^{-5}$; below
# that it has subnormals down to $2^{-24} \approx 6.0\times10^{-8}$, and anything smaller becomes 0.
# Since backpropagation is linear in the loss, multiplying the loss by $S$ multiplies every gradient
# of the backward pass by $S$: with $S = 2^{16}$ the whole histogram moves 16 binades to the right,
# out of the flush-to-zero zone. Dividing by $S$ in fp32 before the optimizer step gives back the
# true gradients.
#
# *Which* gradients are at risk? Everything the backward pass computes in fp16. That is first the
# **activation gradients**, the gradient of the loss with respect to each operation's fp16 output. It
# is also the **weights' gradients**: under autocast a linear layer's forward used an fp16 copy of
# its fp32 weight, so its weight gradient comes out of an fp16 matrix multiply (of fp16 activations
# and fp16 output gradients) and is cast to fp32 only afterwards, for the fp32 weight. Whatever
# underflowed in fp16 stays zero in fp32: section 4 counts those zeros.
# The first activation gradient is small by construction. The loss is a mean over the $N$ tokens of the step, so
# $\partial L / \partial \text{logit}_{ij} = (\text{softmax}_{ij} - [j = y_i]) / N$ ($y_i$ is token $i$'s label), and while
# the model is still close to a uniform guess, $\text{softmax}_{ij} \approx 1/V$ for a vocabulary of $V$:
# most entries are about $1/(N V)$. We hook those gradients on the course's model, once in fp32 (their
# true sizes) and once under fp16 autocast without a scaler (what survives):

# %%
show_source(amp.activation_grads)

# %%
# the batches amp.train draws by default: sections 4 and 7 train on these same batches
data = amp.train_data(PRESET, BATCH, STEPS, seed=0, device=DEVICE)
probe_model = tiny_gpt.TinyGPT.from_preset(PRESET, seed=0, device=DEVICE)
acts32 = amp.activation_grads(probe_model, data[0], "fp32")
acts16 = amp.activation_grads(probe_model, data[0], "fp16_noscale")
hists = {name: amp.log2_hist(a["mags"]) for name, a in acts32.items()}
md("| gradient of | dtype under fp16 autocast | exactly zero in fp16 | median size in fp32 |\n|---|---|---|---|\n" +
   "\n".join(f"| {n} | {acts16[n]['dtype']} | {acts16[n]['zero']:.1%} | 2^{torch.log2(a['mags'].median()).item():.1f} |"
              for n, a in acts32.items()))
logit_zero_fp16 = acts16["logits"]["zero"]
del acts32, acts16, probe_model      # keep the histograms and one number, not the gradients themselves

# %%
md(amp.explain_logit_grads(BATCH * (cfg.seq_len), cfg.vocab, logit_zero_fp16, where="this run"))

# %% [markdown]
# **The loss-scale explorer.** The histogram is the true (fp32) gradient of the logits, or of a
# block's output, from the hook above. Pick a format and a loss scale: the bars move by the scale,
# and the shaded zones show where values would be flushed to zero (red), kept with fewer bits as
# subnormals (orange) or overflow (purple). Try fp8 e5m2 and e4m3fn too: their ranges are far
# narrower, which is why fp8 training scales every tensor.

# %%
scale_explorer = LossScaleExplorer(hists, fmt="fp16", log2_scale=0)
widgets.show(scale_explorer.widget, scale_explorer.figure, "the loss-scale explorer")

# %% [markdown]
# The explorer's numbers come from this function: it decides each power-of-two bin of the histogram
# by its lower edge, after the shift by the scale.

# %%
show_source(amp.zones)

# %% [markdown]
# ## 3. A dynamic loss scaler, written by hand
#
# A fixed scale is fragile: too small and gradients underflow, too large and some overflow to inf.
# A *dynamic* scaler adapts:
# 1. `scale(loss)`: backpropagate $S \cdot \text{loss}$;
# 2. `unscale_`: multiply the gradients by $1/S$ (computed in fp64, rounded to fp32) and check them
#    for inf and NaN;
# 3. `step`: if any gradient overflowed, **skip** the optimizer step (the weights do not move);
# 4. `update`: after an overflow, **back off** ($S \leftarrow S \cdot 0.5$); after `growth_interval`
#    clean steps in a row, **grow** ($S \leftarrow S \cdot 2$), unless that would leave fp32's range.

# %%
show_source(amp.DynamicLossScaler)

# %% [markdown]
# To see every branch we start from an absurd scale, $2^{30}$, with a short growth interval: the
# first steps overflow and back off, then the scale grows again every 4 clean steps until it
# overflows once more. The same run goes through torch's `GradScaler` and through ours, from the
# same weights on the same batches. It uses the small `smoke` model on every device: bit-for-bit
# equality needs reproducible kernels, and on a GPU the larger model's backward pass adds partial
# sums with atomics in a varying order, so two identical runs already differ in the last bits.

# %%
kw = dict(init_scale=2.0**30, growth_interval=4)
scaler_steps = 20
scaler_cfg = tiny_gpt.config("smoke")
scaler_data = tiny_gpt.batches(tiny_gpt.markov_tokens(scaler_cfg.vocab, 4096, seed=1), 4, scaler_cfg.seq_len,
                               scaler_steps, seed=1, device=DEVICE)
scaler_runs, scaler_models = {}, {}
for which in ("torch", "course"):
    scaler_models[which] = tiny_gpt.TinyGPT.from_preset("smoke", seed=1, device=DEVICE)
    scaler_runs[which] = amp.train("fp16_scaler", steps=scaler_steps, scaler=which, scaler_kwargs=kw,
                                   model=scaler_models[which], data=scaler_data, device=DEVICE,
                                   track_grads=False)
same_history = scaler_runs["torch"].scales == scaler_runs["course"].scales
max_param_diff = max((p - q).abs().max().item() for p, q in zip(scaler_models["torch"].parameters(),
                                                                 scaler_models["course"].parameters()))
assert same_history and max_param_diff == 0.0, "the hand-written scaler must match GradScaler exactly"
amp_plots.scale_history({"GradScaler": scaler_runs["torch"]}, title="Loss scale per step (GradScaler = ours)")

# %%
r = scaler_runs["torch"]
grew = sum(b > a for a, b in zip(r.scales, r.scales[1:]))
md(f"Over {scaler_steps} steps the scale went from $2^{{30}}$ to {r.scales[-1]:.0f} "
   f"($2^{{{torch.tensor(r.scales[-1]).log2().item():.0f}}}$): **{sum(r.skipped)} steps were skipped** "
   f"(overflow, backoff) and the scale **grew {grew} time{'s' if grew != 1 else ''}**. Our scaler produced the same scale at "
   f"every step ({'identical' if same_history else 'different'} histories) and the same final weights "
   f"(largest difference {max_param_diff:.1e}).")

# %% [markdown]
# **Step it yourself.** Each button is one training step of both scalers, torch's `GradScaler` and
# the course's `DynamicLossScaler`, with the same gradient: a clean one, or one holding inf or NaN.
# Watch the skipped step back the scale off, and 3 clean steps in a row grow it again (the growth
# interval is 3 here, 2000 by default). The two lines must stay on top of each other.

# %%
stepper = ScalerStepper(init_scale=2.0**16, growth_interval=3)
widgets.show(stepper.widget, stepper.figure, "the scaler stepper")

# %% [markdown]
# ## 4. All five modes on this machine
#
# Same initial weights, same batches. What 16-bit steps gain depends on the hardware: a GPU with
# tensor cores has 16-bit matmul units (notebook 00 measured their rate), many CPUs have no 16-bit
# matrix units at all. The run below measures it here; the H200's numbers follow in section 5. Memory is the
# bytes autograd keeps for the backward pass of one step (and the peak GPU memory on a GPU).

# %%
runs = {}
for mode in bench.progress(list(amp.PRECISIONS), desc="precision modes"):
    runs[mode] = amp.train(mode, preset=PRESET, steps=STEPS, batch=BATCH, lr=LR, device=DEVICE, data=data)
amp_plots.loss_curves(runs)

# %%
amp_plots.time_and_memory(runs)

# %%
t = {m: r.median_step_s() for m, r in runs.items()}
zero = {m: sum(r.zero_grads) / len(r.zero_grads) for m, r in runs.items()}
same_gpu = reference.load("amp", reference.gpu_slug()) if DEVICE == "cuda" else None   # this GPU's own record
same_gpu_summary = (same_gpu or {}).get("summary", {})
# what the notebook knows makes this run's workload differ from the record's (model size, batch)
amp_why = (amp_explain.workload_difference({"n_params": cfg.n_params(), "batch": BATCH, "seq_len": cfg.seq_len},
                                           same_gpu_summary) if same_gpu_summary.get("n_params") else "")
heads = [notebook.headline("bf16 step over strict fp32", t["fp32"] / t["bf16"],
                           same_gpu_summary.get("bf16_speedup_vs_fp32"), "x", 2, why=amp_why)] if DEVICE == "cuda" else []
md(amp_explain.explain_step_speed(t, DEVICE, device.gpu_name() or "CPU") + "\n\n"
   + (f"A bf16 step over a strict fp32 step, this run: **{heads[0].text}**.\n\n" if heads else "")
   + amp_explain.explain_saved_bytes({m: r.saved_by_dtype for m, r in runs.items()}) + "\n\n"
   + f"The weights' gradients (fp32) that were exactly zero, averaged over the steps: fp16 without a scaler "
     f"**{zero['fp16_noscale']:.3%}**, with the scaler {zero['fp16_scaler']:.3%}, fp32 {zero['fp32']:.3%}. "
   + amp_explain.explain_final_losses({m: r.losses for m, r in runs.items()}) + "\n\n"
   + amp.explain_noscale_losses(runs["fp16_noscale"].losses, cfg.vocab)
   + "".join(f"\n- {', '.join(f'`{m}`' for m in runs if amp.note(m, DEVICE) == n)}: {n}"
             for n in dict.fromkeys(amp.note(m, DEVICE) for m in runs) if n), headlines=heads)

# %% [markdown]
# ## 5. On an H200: speed, memory and skipped steps at scale
#
# `course-kit bench amp` trains a 0.34B-parameter TinyGPT (24 layers, width 1024, sequences of 1024
# tokens) in each mode on the same batches, freeing each mode's model, optimizer and activations
# before the next. On a CPU-only machine this section shows the recorded reference; on a GPU it shows
# the reference next to your own run above.

# %%
ref = notebook.record("amp")
if ref is None:
    print("No H200 reference for `amp` recorded yet: run `course-kit bench amp` on a GPU to create it.")
    fig = None
else:
    rows = [r for r in ref["results"] if "median_step_s" in r]
    gpu = ref["environment"].get("gpu") or "the reference machine"
    # Peak per mode's own step: records made before the leak fix carry memory left over from earlier modes.
    step_peak = amp_explain.step_peak_gib(rows)
    fig = amp_plots.time_and_memory([dict(r, peak_mem_gib=step_peak.get(r["name"])) for r in rows],
                                    title=f"Step time and memory per mode on {gpu}",
                                    peak_label="GPU memory one step needed (peak minus what was allocated before)")
fig

# %%
if ref is not None:
    s = ref["summary"]
    md(amp_explain.explain_record(s, gpu) + "\n\n" + amp_explain.explain_peak_memory(rows))
    if "explain" in s:
        md("**Where the bf16 step's time goes** (computed by the bench from its own profile): " + s["explain"])
    noscale = next((r for r in rows if r["name"] == "fp16_noscale"), None)
    if noscale is not None:
        ref_cfg = tiny_gpt.config(ref["params"]["preset"])
        md(amp.explain_logit_grads(s["batch"] * s["seq_len"], ref_cfg.vocab, None, noscale.get("losses"),
                                   where=f"the {gpu} run"))
    fig = amp_plots.loss_curves(ref["results"], title="Loss per mode on the reference GPU")
else:
    fig = None
fig

# %%
if ref is not None:
    fp16 = [r for r in ref["results"] if r["name"] == "fp16_scaler" and "scales" in r]
    fig = amp_plots.scale_history(fp16, title="GradScaler's scale on the reference GPU") if fp16 else None
else:
    fig = None
fig

# %% [markdown]
# ## 6. What holds the peak memory: a `torch.cuda.memory` snapshot
#
# A peak is a sum. `torch.cuda.memory._record_memory_history()` makes PyTorch's caching allocator log
# every allocation and free of one training step, with its address and size; `_snapshot()` returns
# that log and the blocks alive (`torch.cuda.memory._dump_snapshot("step.pickle")` writes the same to a
# file that https://pytorch.org/memory_viz draws). `profiling.memory.breakdown` replays the log,
# finds the moment the allocated bytes peaked, and says what held them: the fp32 weights (autocast's
# "masters"), their gradients, AdamW's two moments per weight, autocast's cached 16-bit copies of the
# weights, the activations saved for backward, and temporaries. A CPU has no such log: on a CPU this
# section shows the H200's record.

# %%
show_source(pmemory.breakdown)

# %%
if DEVICE == "cuda":
    snaps = []
    for mode in ("fp32", "bf16", "fp16_scaler"):
        snap_model = tiny_gpt.TinyGPT.from_preset(PRESET, seed=0, device=DEVICE)
        snaps.append({"name": mode, "memory_breakdown": amp_snapshot.step_memory(snap_model, data[0], mode)})
        del snap_model
    where = f"this GPU ({device.gpu_name()}), the {PRESET} model, batch {BATCH}"
else:
    ref_amp = notebook.record("amp", quiet=True)
    snaps = [r for r in (ref_amp or {}).get("results", []) if r.get("memory_breakdown", {}).get("by_category")]
    where = f"the H200 record ({(ref_amp or {}).get('params', {}).get('preset', '?')} model)"
if snaps:
    fig = amp_plots.memory_breakdown(snaps, title=f"What holds one training step's peak memory: {where}")
    md(amp_explain.explain_memory_breakdown(snaps))
else:
    fig = None
    md("No H200 record with a memory snapshot yet (`course-kit bench amp` on the H200 records one per mode).")
fig

# %% [markdown]
# ## 7. One format further: training in fp8
#
# Notebook 01 showed the two 8-bit float formats: **e4m3** (3 mantissa bits, largest value 448,
# smallest subnormal $2^{-9}$) and **e5m2** (2 mantissa bits, range $2^{-16}$ to 57344). GPUs with
# fp8 tensor cores (sm_89 and newer: Ada, Hopper) multiply fp8 matrices at a higher datasheet peak
# than bf16 ones (computed below). Training in fp8 (Micikevicius et al., *FP8 Formats for Deep Learning*,
# 2022) uses both formats:
#
# - forward: the input $x$ and the weight $W$ in **e4m3** (precision matters most there);
# - backward: the output's gradient $g$ in **e5m2** (gradients need range), for the two matmuls
#   $\partial L/\partial x = g\,W$ and $\partial L/\partial W = g^\top x$.
#
# Neither format can hold a tensor as it is: a range of 448 or 57344 is far too narrow for values
# that, in gradients, sit near $10^{-5}$. So every tensor is multiplied by its own **scale**
# $s = \text{max of the format} / \text{amax}$ before the cast (amax is the tensor's largest
# magnitude), which puts its largest value on the format's largest one, and the product is divided
# by $s_a s_b$ afterwards. It is section 3's loss scaling, one format further and per tensor: fp16
# needed one scale for the whole loss; fp8 needs one for every tensor it casts.
#
# The cast, with the statistics it records:

# %%
from course_kit.amp import fp8, fp8_train
from course_kit.benchmarks import fp8_train as fp8_bench
from course_kit.plots import fp8 as fp8_plots

# On a CPU fp8 is emulated, and this CPU's bf16 may be slow too: the comparison runs on the smoke model.
FP8_PRESET = PRESET if DEVICE == "cuda" else "smoke"
FP8_STEPS = {"smoke": 20, "cpu": 30}.get(P["size"], STEPS)
# section 4's batches where the settings match (amp.train_data makes both); else this preset's own
fp8_data = data if (FP8_PRESET, FP8_STEPS) == (PRESET, STEPS) else fp8_train.make_data(FP8_PRESET, BATCH, FP8_STEPS, 0, DEVICE)
h200_sheet = device.peaks("H200")
md(f"The H200's datasheet: fp8 tensor cores {h200_sheet.fp8:,.0f} TFLOP/s, bf16 {h200_sheet.bf16:,.0f} "
   f"({h200_sheet.fp8 / h200_sheet.bf16:.1f}x; dense, no sparsity).")
show_source(fp8.Fp8Linear.cast)

# %% [markdown]
# The layer itself is one autograd function with three fp8 matmuls, each through `fp8_mm`: on fp8
# tensor cores `torch._scaled_mm`, elsewhere the *emulated* path, which rounds the values to the fp8
# grid exactly as the hardware would, then multiplies them in fp32. The emulation has fp8's numerics,
# not its speed. Which one runs here, and why:

# %%
show_source(fp8._Fp8Linear)
fp8_cfg = tiny_gpt.config(FP8_PRESET)
fp8_path, fp8_why = fp8.choose_path(DEVICE, device.current_capability() if DEVICE == "cuda" else None,
                                    (BATCH * fp8_cfg.seq_len, fp8_cfg.d_model, 4 * fp8_cfg.d_model))
md(f"On this machine the fp8 matmuls run {fp8_why}.")

# %% [markdown]
# ### The course model in fp8, against bf16
#
# `fp8.to_fp8` swaps each block's four linears (qkv, proj, fc, out) for the fp8 layer; everything
# else runs under bf16 autocast, through section 1's training loop unchanged (on a CPU, on the
# smallest TinyGPT). The text below says whether its bf16 run repeats section 4's. Three runs from
# the same weights on the same batches: **bf16** autocast, **fp8** with per-tensor dynamic scaling, and
# **fp8_noscale**, the same casts with every scale fixed at 1 (what fp8 does to the tensors
# without scaling).

# %%
show_source(fp8_train.train_fp8)
fp8_cmp = fp8_train.compare(("bf16", "fp8", "fp8_noscale"), preset=FP8_PRESET, steps=FP8_STEPS, batch=BATCH,
                            lr=LR, device=DEVICE, data=fp8_data)
fp8_plots.loss_curves(fp8_cmp.runs)

# %%
fp8_times = {m: r.median_step_s() for m, r in fp8_cmp.runs.items()}
# fp8 on tensor cores slower than bf16: time one linear of each shape alone to see where the time goes
fp8_layer_rows = (fp8_bench.layer_times(fp8_cfg, BATCH, DEVICE)
                  if fp8_cmp.why["fp8"].startswith("torch._scaled_mm") and fp8_times["fp8"] > fp8_times["bf16"] else None)
md(fp8_train.explain_loss(fp8_cmp) + " "
   + fp8_train.explain_bf16_peer({"preset": PRESET, "steps": STEPS, "batch": BATCH, "lr": LR,
                                  "final_loss": runs["bf16"].final_loss()},
                                 {"preset": FP8_PRESET, "steps": FP8_STEPS, "batch": BATCH, "lr": LR,
                                  "final_loss": fp8_cmp.final_loss("bf16")}, fp8_data is data, DEVICE) + "\n\n"
   + fp8_train.explain_speed(fp8_times, fp8_cmp.why["fp8"], ranges_timed=fp8_cmp.ranges_timed,
                              layer_rows=fp8_layer_rows,
                              has_record=notebook.record("fp8_train", quiet=True) is not None) + "\n\n"
   + fp8_train.explain_memory({m: r.saved_by_dtype for m, r in fp8_cmp.runs.items()}))

# %% [markdown]
# ### The scales over training, and the step they mattered
#
# Every fp8 layer recorded, at every step, each tensor's amax and the scale it was multiplied by.
# The band is the smallest to the largest scale over the layers. The finder then looks for the step
# where scaling mattered most: a tensor whose amax exceeded its format's largest value (it would
# have overflowed), or else the one whose unscaled cast would have flushed the largest fraction of
# its values to zero.

# %%
fp8_scales = fp8_train.scale_summary(fp8_cmp.histories["fp8"])
fp8_finding = fp8_train.out_of_range(fp8_cmp.histories["fp8"])
fp8_plots.scales_over_training(fp8_scales)

# %%
md(fp8_train.explain_scales(fp8_scales) + "\n\n" + fp8_train.explain_out_of_range(fp8_finding) + "\n\n"
   + fp8_train.explain_noscale(fp8_cmp))

# %% [markdown]
# ### On an H200: fp8 tensor cores
#
# `course-kit bench fp8_train` trains the 0.34B-parameter TinyGPT both ways on the reference GPU,
# where the matmuls run on fp8 tensor cores, then times one linear of each of the model's shapes to
# see where the time goes: the fp8 matmul alone against bf16's, and the whole fp8 linear with its
# casts.

# %%
fp8_ref = notebook.record("fp8_train", quiet=True)
if fp8_ref is None:
    md(fp8_train.MISSING_RECORD)    # one line, on every device: what is missing and the command that writes it
    fig = None
else:
    fp8_ref = notebook.record("fp8_train")   # again, with the banner that says whose record it is
    fp8_gpu = fp8_ref["environment"].get("gpu") or "reference GPU"
    md(fp8_train.explain_record(fp8_ref["summary"], fp8_gpu))
    fig = fp8_plots.loss_curves(fp8_ref["results"], title=f"Training loss on {fp8_gpu}: fp8 against bf16")
fig

# %%
if fp8_ref is not None and fp8_ref.get("layer_times"):
    md(fp8_train.explain_layer_times(fp8_ref["layer_times"]))
    fig = fp8_plots.layer_times(fp8_ref["layer_times"], title=f"One linear of each shape on {fp8_gpu}")
else:
    fig = None
fig

# %%
if fp8_ref is not None and "fp8" in (fp8_ref.get("histories") or {}):
    h = fp8_ref["histories"]["fp8"]
    md(fp8_train.explain_scales(h["scales"]) + "\n\n" + fp8_train.explain_out_of_range(h["out_of_range"]))
    fig = fp8_plots.scales_over_training(h["scales"], title=f"Per-tensor scales over training on {fp8_gpu}")
else:
    fig = None
fig

# %% [markdown]
# ## Exercise 02.rescue_scale: the smallest loss scale that rescues the logits' gradient
#
# Take the smoke TinyGPT with a wider vocabulary and longer rows, on the CPU, and its first batch of 16:
#
# ```python
# rcfg = tiny_gpt.config("smoke", vocab=1024, seq_len=64)
# rtokens = tiny_gpt.batches(tiny_gpt.markov_tokens(rcfg.vocab, 50 * rcfg.seq_len, seed=0), 16,
#                            rcfg.seq_len, 1, seed=0, device="cpu")[0]
# rmodel = tiny_gpt.TinyGPT.from_config(rcfg, seed=0, device="cpu")
# ```
#
# Under fp16 autocast with no scaler, many entries of the gradient of its logits are subnormal in
# fp16 or flushed to zero.
# 1. **Predict** the smallest power-of-two loss scale `S = 2^k` at which **every** entry of the fp16
#    gradient of the logits is a normal fp16 number (nothing zero, nothing subnormal): record
#    `PREDICTED_LOG2 = k` and run the cell once before writing step 2 (the check needs it, but does
#    not grade it). Section 2's formula for the typical entry is a start; the smallest entries matter.
# 2. **Measure** it with `amp.activation_grads(rmodel, rtokens, "fp16_noscale", scale=2.0**k)`
#    (section 2's function): `LOG2_SCALE`, the smallest such `k`.
# 3. **Explain**: with a batch of 32 instead of 16, the smallest scale (A) halves; (B) stays the
#    same; (C) doubles; (D) quadruples. `DOUBLED` is the letter.

# %% {"course_kit": {"exercise": "02.rescue_scale", "role": "solution", "points": 2, "task": "record PREDICTED_LOG2, then measure LOG2_SCALE, then answer DOUBLED (see the task above)"}}
rcfg = tiny_gpt.config("smoke", vocab=1024, seq_len=64)
rtokens = tiny_gpt.batches(tiny_gpt.markov_tokens(rcfg.vocab, 50 * rcfg.seq_len, seed=0), 16,
                           rcfg.seq_len, 1, seed=0, device="cpu")[0]
rmodel = tiny_gpt.TinyGPT.from_config(rcfg, seed=0, device="cpu")
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTED_LOG2 = 4      # 1 / (N V) = 2^-20 for the typical entry: 2^-20 x 2^6 = 2^-14... plus a margin
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
def all_normal(k):
    g = amp.activation_grads(rmodel, rtokens, "fp16_noscale", scale=2.0**k)["logits"]["mags"] * 2.0**k
    return bool((g >= 2.0**-14).all())


LOG2_SCALE = next(k for k in range(0, 64) if all_normal(k))
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
DOUBLED = "C"     # the loss is a mean over twice the tokens: every logit's gradient halves
### END SOLUTION

# %% {"course_kit": {"exercise": "02.rescue_scale", "role": "check"}}
from course_kit import grading
grading.check("02.rescue_scale", PREDICTED_LOG2, LOG2_SCALE, DOUBLED)

# %% [markdown]
# ## Exercise 02.unscale_clip: gradient clipping with a loss scaler
#
# Section 3's scaler never clipped gradients, but most training loops do, and with a scaler the order
# matters. PyTorch's recipe: `scaler.scale(loss).backward()`, then `scaler.unscale_(optimizer)`,
# then `torch.nn.utils.clip_grad_norm_(params, max_norm)`, then `scaler.step(optimizer)`.
#
# Write `unscale_and_clip(grads, scale, max_norm)`: `grads` is a list of fp32 tensors as the
# backward pass of `scale x loss` left them. Return the list of gradients the optimizer step would
# use, exactly as that recipe leaves them (`unscale_` as torch does it, then the clip over the
# *total* norm of all the gradients, with `clip_grad_norm_`'s own formula), or `None` when
# `scaler.step` would skip the step. Do not call `GradScaler` or `clip_grad_norm_`: the check
# compares you with them, on seeded gradients you do not see.

# %% {"course_kit": {"exercise": "02.unscale_clip", "role": "solution", "points": 3, "task": "write unscale_and_clip(grads, scale, max_norm) (see the task above)"}}
def unscale_and_clip(grads, scale, max_norm):
    ### BEGIN SOLUTION
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        return None                                          # GradScaler.step skips this step
    inv = float(torch.tensor(1.0 / scale, dtype=torch.float64).float())   # 1/S in fp64, rounded to fp32
    grads = [g * inv for g in grads]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # clip_grad_norm_ never scales up
    return [g * coef for g in grads]
    ### END SOLUTION

# %% {"course_kit": {"exercise": "02.unscale_clip", "role": "check"}}
from course_kit import grading
grading.check("02.unscale_clip", unscale_and_clip)

# %% {"course_kit": {"exercise": "02.unscale_clip", "role": "hidden"}}
grading.check("02.unscale_clip_hidden", unscale_and_clip)

# %% [markdown]
# ## Summary
# - Autocast runs matmuls in 16 bits and keeps range-hungry reductions in fp32; weights stay fp32.
# - bf16 has fp32's exponent range, so it needs no loss scaling; fp16 does, because small gradients
#   fall below $2^{-24}$ and vanish.
# - A dynamic loss scaler multiplies the loss by S, unscales the gradients, skips steps that
#   overflowed, backs off on overflow and grows after a run of clean steps. Ours matches
#   `torch.amp.GradScaler` bit for bit.
# - Autocast runs matmuls in 16 bits and saves many activations in 16 bits, but not all: the
#   operations it keeps in fp32 save fp32 tensors. Sections 4 and 5 measured what that bought in step
#   time and bytes, here and on an H200.
# - The weights' gradients come out of 16-bit matrix multiplies too, before their cast to fp32: they
#   can underflow without a scaler, like the activation gradients.
# - A step's peak memory is weights + gradients + optimizer state, which autocast does not shrink, plus
#   activations and 16-bit weight copies, which it changes: a memory snapshot shows each.
# - fp8 training takes loss scaling one format further: e4m3 for inputs and weights, e5m2 for
#   gradients, one scale per tensor from its own amax; section 7 measured what it cost and rescued.
#
# **Further reading**
# - P. Micikevicius et al., *Mixed Precision Training*, ICLR 2018 (loss scaling).
# - PyTorch documentation: *Automatic Mixed Precision package - torch.amp* and the *CUDA Automatic
#   Mixed Precision examples* (GradScaler with gradient clipping, accumulation, several optimizers).
# - D. Kalamkar et al., *A Study of BFLOAT16 for Deep Learning Training*, 2019.
# - NVIDIA, *Train With Mixed Precision* (user guide).
# - P. Micikevicius et al., *FP8 Formats for Deep Learning*, 2022 (e4m3 and e5m2, per-tensor scaling).
# - PyTorch documentation, *Understanding CUDA Memory Usage* (`torch.cuda.memory._record_memory_history`,
#   `_dump_snapshot`, and the viewer at pytorch.org/memory_viz).
#
# **Next:** `03_torch_compile_modes.ipynb` makes each step faster a different way: by compiling it.

# %% [markdown]
# # 04 · Graph capture: trace, script, FX and export
#
# A compiler, a serving runtime or a phone can't run your Python. They need the model as a
# *graph*: a list of tensor operations with the Python taken out. PyTorch has had four ways to get
# one, and they differ in what they see. `torch.jit.trace` records what one run did;
# `torch.jit.script` compiles a subset of Python; `torch.fx` traces with proxy objects; and
# `torch.export` traces at the ATen level with symbolic shapes and refuses what it can't prove. This
# notebook runs all four on the same modules and records what each one really captured.
#
# {{BADGES}}
#
# **What you will learn**
# - how each of the four captures works, and what its IR looks like;
# - which Python each one keeps, loses or refuses: data-dependent branches, loops, containers,
#   dynamic shapes, in-place ops; and which ones save to a file and load back bit for bit;
# - the traps: a trace that silently bakes in a branch, script refusing Python, export refusing a
#   data-dependent branch, and the `torch.cond` fix;
# - where TorchScript stands today, and what replaces it.

# %%
{{SETUP}}

# %% [markdown]
# ## Parameters
# Graph capture is a CPU topic: nothing here needs a GPU. `COURSE_KIT_SMOKE=1` (CI) uses the smallest
# sizes and fewest timing repeats.

# %% {"tags": ["parameters"]}
P = device.defaults()
DIM = 16 if P["smoke"] else 256          # width of the MLP block
BATCH = 8 if P["smoke"] else 64          # rows per call in the timing
REPEAT = 5 if P["smoke"] else 50         # timed repeats (medians are reported)

# %%
import warnings

import torch
from torch.export import Dim

from course_kit import grading, narrate
from course_kit.capture import methods as capture, traps
from course_kit import notebook
from course_kit.notebook import md, show_source
from course_kit.plots import capture as capture_plots
from course_kit.widgets import show
from course_kit.widgets.capture import CaptureGallery

warnings.filterwarnings("ignore", category=DeprecationWarning)  # shown on purpose in section 5
torch.manual_seed(0)
print(f"torch {torch.__version__}; DIM={DIM}, BATCH={BATCH}, REPEAT={REPEAT}")

# %% [markdown]
# ## 1. Four ways to capture one module
#
# The same MLP block (LayerNorm, Linear, GELU, Linear, residual) goes through each method. Read how
# `capture` calls them: `trace` and `export` *run* the module on an example input; `script` reads its
# source code; `fx` calls `forward` with proxy objects that record every operation.

# %%
show_source(capture.MLPBlock)
show_source(capture.capture)

# %%
block, x = capture.MLPBlock(DIM).eval(), torch.randn(4, DIM)
captured = {m: capture.capture(m, block, (x,), ({0: Dim("batch")},) if m == "export" else None)
            for m in capture.METHODS}
for method, cap in captured.items():
    ok, diff = capture.same(block(x), cap.fn(x), atol=1e-6)
    print(f"=== {method}: {type(cap.obj).__name__}, matches eager: {ok} (max |Δ| {diff:.2g})")
    print(capture.ir_text(cap, lines=8), "\n")  # operator lines only

# %% [markdown]
# The four IRs are different languages. TorchScript's graph (trace and script) holds `aten::` ops
# and `prim::` constants with their types; FX's graph is Python-level: it calls the *submodules*
# (`norm`, `up`, `down`) and functions as written; export's graph is lowered to ATen operators
# (`aten.linear.default`) with symbolic shapes in the types, the form compilers and runtimes consume.

# %%
ops = {m: capture.ir_ops(cap) for m, cap in captured.items()}
md("**What just happened.** Operators in each captured graph of the same block: " + "; ".join(
    f"{m}: {len(o)} ({', '.join(list(dict.fromkeys(o))[:5])})" for m, o in ops.items()) + ".")

# %% [markdown]
# ## 2. What each capture keeps, loses or refuses
#
# Each case below is a small module with one kind of Python in it. `probe` captures it with one
# method from an example input, then runs the capture on *other* inputs and compares with eager,
# including any in-place change to the caller's tensors. A cell is green (**correct**) when the
# capture matched eager, amber (**silently wrong**) when it ran and gave a different answer (the
# dangerous outcome), red (**refused**, **fails at run**) when capture or the run refused. The last two rows save each capture to a file and load it back, and list its operators.

# %%
show_source(capture.probe)

# %%
with notebook.quiet():   # export logs its partial graph when it refuses; section 4c reads that log
    rows = capture.compare(dim=DIM)
capture_plots.comparison_figure(rows, capture.METHODS)

# %%
counts = {m: sum(r[m].status == "correct" for r in rows) for m in capture.METHODS}
silent = [(r["case"], m) for r in rows for m in capture.METHODS if r[m].status == "silently wrong"]
md("**What just happened.** Correct cells per method, out of " + f"{len(rows)}: "
   + ", ".join(f"{m} {n}" for m, n in counts.items()) + ". "
   + ("Silently wrong (no error, wrong numbers): " + "; ".join(f"{m} on *{c}*" for c, m in silent) + "."
      if silent else "No capture was silently wrong in this run."))

# %% [markdown]
# Reading the table: `script` understands control flow and loops because it compiles the source, but
# only the Python subset it knows (section 4b). `trace` sees only the path its example took, so
# anything decided in Python (a branch, a loop count, a container) is frozen. `fx` can't branch on a
# proxy. `export` refuses rather than guess, and tells you what to declare; containers, in-place ops
# and declared dynamic shapes are handled (it functionalises in-place ops and replays input mutations).

# %% [markdown]
# ## 3. Measured: capture time and call time
#
# Capturing costs time once; a captured graph is not automatically faster on its own (the speed comes
# from the compiler that consumes it, notebook 03). Here the block is timed eager and captured, on the
# same inputs, medians of `REPEAT` calls.

# %%
show_source(capture.measure)

# %%
timing = capture.measure(dim=DIM, batch=BATCH, repeat=REPEAT)
capture_plots.timing_figure(timing)

# %%
slowest = max(timing[1:], key=lambda r: r["capture_s"])
md(f"**What just happened.** On this machine, capture took from "
   f"{min(r['capture_s'] for r in timing[1:]):.2f} s to {slowest['capture_s']:.2f} s ({slowest['method']}). "
   "One call of the captured block against eager: "
   + ", ".join(f"{r['method']} {narrate.ratio_words(r['vs_eager'])} eager" for r in timing[1:])
   + f" (medians of {REPEAT} calls).")

# %% [markdown]
# ## 4. A gallery of traps
#
# ### 4a. `trace` silently bakes in a branch
# `Gate` doubles its input when the sum is positive and negates it otherwise. We trace it with a
# positive input, then call the trace with a negative one.

# %%
show_source(capture.Gate)
baked = traps.trace_bakes_branch()
print("the traced program:\n" + baked["code"])
print("warning while tracing:", baked["warnings"][0] if baked["warnings"] else "none")
md(f"**What just happened.** On a negative input eager gives a sum of {baked['eager_sum']:.3f}; the trace "
   f"gives {baked['traced_sum']:.3f} (max |Δ| {baked['max_abs_diff']:.3f}), with no error. The traced code "
   "has only the branch the example took. "
   + ("The only hint was a `TracerWarning` at capture time, easy to miss in a log." if baked["warnings"]
      else "No warning was raised at capture time in this run."))

# %% [markdown]
# ### 4b. `script` refuses Python it doesn't know
# TorchScript is its own language that looks like Python. Three common idioms it rejects:

# %%
for row in traps.script_rejects():
    print(f"{row['module']:>15}: " + ("scripted" if row["scripted"] else row["error"]))

# %% [markdown]
# ### 4c. `export` refuses data-dependent control flow; `torch.cond` fixes it
# `export` traces with symbolic values. `x.sum() > 0` is not known at capture time, so export stops
# and says so, instead of guessing like trace. The fix is to put **both** branches in the graph with
# `torch.cond(pred, true_fn, false_fn, operands)`, which picks one at run time.

# %%
with notebook.quiet() as export_log:      # what export logs while refusing, read below
    refused = traps.export_refuses_data_dependent()
print("export(Gate):", refused["error"] if refused["refused"] else "accepted")
logged = [line for line in export_log.text.splitlines() if line.strip()]
if logged:
    print(f"\nexport also logged {len(logged)} lines while refusing; the first ones:\n  " + "\n  ".join(logged[:6]))
show_source(traps.GateCond)
with notebook.quiet():
    fixed = traps.export_with_cond()
print(fixed["code"])
md("**What just happened.** `torch.export` " + ("refused `Gate` with " f"`{refused.get('type', '')}`" if refused["refused"] else "accepted `Gate`")
   + (". Its log is the graph it had traced when it gave up: `aten.item` turns the tensor `x.sum() > 0` into a "
      "Python bool, which export can only hold as a symbol with no known value (`u0`), so it cannot choose a "
      "branch." if any("aten.item" in line for line in logged) else "")
   + " With `torch.cond` the exported graph holds a `cond` node with both branches, and it "
   + ("matches eager on every input: " if all(fixed["checks"].values()) else "differs from eager on some inputs: ")
   + ", ".join(f"{k} ({'matches' if v else 'differs'})" for k, v in fixed["checks"].items()) + ".")

# %% [markdown]
# ### 4d. `export` checks what a dynamic dimension may be
# `PairScale` reshapes the length into pairs, so the length must be even. Declared as a plain
# `Dim("length")`, export refuses and suggests the fix; declared as `2 * Dim("half")` it is accepted.

# %%
show_source(capture.PairScale)
dims = traps.export_dim_constraint()
print("plain Dim:", dims["plain_dim"])
print("export suggests:\n  " + "\n  ".join(dims["suggested"]))
print("with length = 2 * Dim('half'), correct at a new shape:", dims["derived_dim_ok"])

# %% [markdown]
# ### 4e. Try it: the capture gallery
# Pick a trap and a capture method. Each cell is a real capture of a small module, run on a probe
# input beside eager PyTorch: you see the captured program (its operator lines), and whether the
# output, the caller's tensor after an in-place change, and a Python side effect still match eager.
# Every cell was captured once when this cell ran; flipping between them only reads the result.

# %%
gallery = CaptureGallery("data-dependent branch", "jit.trace", prefill=True)
show(gallery.widget, gallery.figure, "the capture gallery")

# %% [markdown]
# ## 5. TorchScript today
#
# TorchScript (`jit.trace` and `jit.script`) is in maintenance: new work goes to `torch.export` (a
# graph with guards and dynamic shapes, saved as `.pt2`, compiled ahead of time by AOTInductor or
# consumed by ExecuTorch on devices) and to `torch.compile` for speed in Python. We run both
# TorchScript entry points and keep the warnings this torch emits.

# %%
dep = traps.torchscript_deprecation()
for w in dep["warnings"]:
    print(w)
md(f"**What just happened.** On torch {dep['torch']}, TorchScript emitted "
   + (f"{len(dep['warnings'])} deprecation warning(s), shown above." if dep["warnings"]
      else "no deprecation warning: this release still runs TorchScript silently, but it receives no new "
           "features; prefer `torch.export` for new code."))

# %% [markdown]
# ## 6. A graph that ships: AOTInductor
#
# Sections 1-5 asked what each capture keeps. This one asks what capture is *for*. A server that
# runs the model in Python pays, before its first answer, for importing torch and the model's code,
# building the model, and (with `torch.compile`) compiling it on the first call. **AOTInductor**
# moves the compiling ahead of time: `torch.export` gives the graph, and
# `torch._inductor.aoti_compile_and_package` compiles it with Inductor's kernels (C++ on a CPU, Triton
# on a GPU) plus a C++ wrapper that calls them, into one `.pt2` file holding a shared library and the
# weights. `torch._inductor.aoti_load_package` loads it in another process (or from C++, with no
# Python at all) and calls it: no model code, no tracing, no compiling at start-up.
#
# The module is the course TinyGPT's batch-1 **decode step** (one token in, logits out, the KV
# cache written in place), the step notebook 05 captures in a CUDA graph. It exports whole: its
# shapes are static and it never reads a tensor on the host.

# %%
from course_kit import notebook
from course_kit.capture import aoti
from course_kit.models import tiny_gpt
from course_kit.plots import aoti as aoti_plots

AOTI_DEVICE = P["device"]
AOTI_PRESET = {"smoke": "smoke", "cpu": "cpu"}.get(P["size"], "small_gpu")
# Compiling runs a C++ compiler on the generated code: from tens of seconds to minutes on a small
# CPU. On a CPU it is off unless you set this to True (a compiled package is cached and reused).
AOTI_COMPILE = AOTI_DEVICE == "cuda"
show_source(aoti.DecodeStep)

# %%
aoti_model = tiny_gpt.TinyGPT.from_preset(AOTI_PRESET, seed=0, device=AOTI_DEVICE).eval()
aoti_ep, aoti_export_s = aoti.export_decode(aoti_model)
aoti_diff = aoti.check_export(aoti_model, aoti_ep, steps=4)
md("**What just happened.** " + aoti.explain_export(aoti.graph_summary(aoti_ep), aoti_export_s, aoti_diff, 4))

# %% [markdown]
# Compiling it ahead of time. The package is named after what it holds (the graph's code, the
# weights, the device, torch's version), so the same module compiles once per machine:

# %%
show_source(aoti.compile_package)
aoti_path = aoti.cached_package(aoti_ep)
if AOTI_COMPILE or aoti_path:
    aoti_pkg = aoti.compile_package(aoti_ep)
    aoti_path = aoti_pkg["path"]
    md(f"The package: `{aoti_path.rsplit('/', 1)[-1]}`, {aoti_pkg['bytes'] / 2**20:.1f} MiB, "
       + ("reused from the cache." if aoti_pkg["cached"] else f"compiled in {aoti_pkg['seconds']:.1f} s."))
else:
    md("Not compiled on this CPU (`AOTI_COMPILE = False`): the H200 record below has the package's "
       "compile time, its cold start and its speed, on the GPU and on that machine's CPU.")

# %% [markdown]
# ### Cold start: three fresh processes
#
# Each peer starts in a new Python process, as a server would, and times its phases until the
# first answer: importing torch; loading the package, or importing and building the model; the first
# call (for `torch.compile`, with an empty Inductor cache, that call compiles). Each then times one
# steady-state decode step and sends back its logits, which are checked against eager's here.

# %%
show_source(aoti.cold_start)
aoti_cold, aoti_failed, fig = {}, {}, None
if AOTI_COMPILE:
    aoti_cold, aoti_failed = aoti.cold_starts(aoti_model, preset=AOTI_PRESET, device=AOTI_DEVICE,
                                              package=aoti_path, threads=torch.get_num_threads())
    if aoti_failed:
        md(aoti.explain_failures(aoti_failed, f"this machine ({AOTI_DEVICE})"))
    if {"aoti", "compile"} <= set(aoti_cold):
        md(aoti.explain_cold_start(aoti_cold, f"this machine ({AOTI_DEVICE})"))
        fig = aoti_plots.cold_start(aoti_cold, title=f"Cold start on this machine ({AOTI_DEVICE})")
fig

# %% [markdown]
# ### On an H200 and its host's CPU
#
# `course-kit bench aoti` runs the same three fresh processes on the reference GPU (TinyGPT's
# `small_gpu` preset: width 512, 8 layers) and on the same machine's CPU (the `cpu` preset).

# %%
aoti_ref = notebook.record("aoti")
aoti_figs = []
if aoti_ref is not None:
    aoti_gpu = aoti_ref["environment"].get("gpu") or "reference GPU"
    for row in aoti_ref["results"]:
        if {"aoti", "compile"} <= set(row.get("cold", {})):
            where = f"the {aoti_gpu}" if row["device"] == "cuda" else f"the CPU of the {aoti_gpu} machine"
            md(f"**{row['preset']} preset, {where}:** package compiled in {row.get('compile_s', float('nan')):.1f} s. "
               + aoti.explain_cold_start(row["cold"], where))
            aoti_figs.append(aoti_plots.cold_start(row["cold"], title=f"Cold start on {where}"))
    for key, err in (aoti_ref.get("errors") or {}).items():
        md(f"Not recorded: `{key}`: {err}")
aoti_figs[0] if aoti_figs else None

# %%
aoti_figs[1] if len(aoti_figs) > 1 else None

# %% [markdown]
# ### What AOTInductor refuses
#
# AOTInductor compiles what `torch.export` captured, so it starts where export stops. The gallery's
# data-dependent branch (section 4c) goes down the same path:

# %%
show_source(aoti.refusal)
aoti_no = aoti.refusal("data-dependent branch")
from course_kit.capture.gallery import TRAPS, gallery_cell
inherited = {t: gallery_cell(t, "export")["status"] for t in TRAPS}
md(f"**What just happened.** The *{aoti_no['trap']}* was "
   + (f"refused at {aoti_no['stage']}, before any compiling: `{aoti_no['error']}`" if aoti_no["refused"]
      else "accepted by export") + ". "
   + "Whatever export accepts, the package computes as export captured it, so the gallery's export column is "
     "AOTInductor's too: " + "; ".join(f"*{t}*: {s}" for t, s in inherited.items()) + ".")

# %% [markdown]
# ## Exercise: make a function exportable
#
# `ClipOrScale` divides its input by the peak magnitude when the peak exceeds 1, and doubles it
# otherwise. Its `if` depends on the data, so `torch.export` refuses it (section 4c).
#
# Write `ExportableClipOrScale`, an `nn.Module` that computes exactly the same values and that
# `torch.export.export(m, (x,), dynamic_shapes=({0: Dim("batch")},))` accepts, with an exported
# program that is correct for inputs taking *either* branch and for other batch sizes.
# Hint: `torch.cond`, or think about whether `torch.where` computes something unsafe.

# %%
show_source(capture.ClipOrScale)

# %% {"course_kit": {"exercise": "04.exportable", "role": "solution", "points": 2}}
class ExportableClipOrScale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        peak = x.abs().amax()
        return torch.cond(peak > 1.0, lambda t, p: t / p, lambda t, p: t * 2, (x, peak))
        ### END SOLUTION

# %% {"course_kit": {"exercise": "04.exportable", "role": "check"}}
course_kit.grading.check("04.exportable", ExportableClipOrScale)

# %% {"course_kit": {"exercise": "04.exportable", "role": "hidden"}}
course_kit.grading.check("04.exportable_hidden", ExportableClipOrScale)

# %% [markdown]
# ## Exercise 04.silent_trap: predict, measure and explain a trap the gallery did not show
#
# `CountCalls` keeps a Python counter on the module and multiplies its input by the number of calls
# so far: called three times, eager returns `x`, `2x`, then `3x`. Such state is common (a step count,
# a warm-up flag, a cache index). `TRAP` is its case for `capture.probe` (section 2): captured once
# from an example, then run on two new inputs beside eager.
#
# 1. **Predict**, before running anything: for each of `capture.METHODS`, will the capture be
#    `"correct"`, `"silently wrong"`, `"refused"` or `"fails at run"`? Record
#    `PREDICTED = {method: status}` and run the cell once before writing step 2. The check requires
#    the prediction but does not grade its accuracy.
# 2. **Measure** with `capture.probe(method, TRAP)` (its `.status`): `MEASURED = {method: status}`.
# 3. **Explain**: `CAUSE`, the letter of the reason the silently wrong captures are wrong:
#    (A) they cannot see module attributes, so they read `self.calls` as 0;
#    (B) capturing runs `forward` in Python once: `self.calls += 1` is not a tensor operation, so it
#    runs then, and the number it produced goes into the graph as a constant that never changes;
#    (C) they capture the increment, but replay it on a fresh copy of the module, so the count
#    restarts at every call;
#    (D) the captured program increments the counter, but caches its first output and returns it for
#    every later input.

# %%
from course_kit.capture.traps import CountCalls, counter_trap
show_source(CountCalls)
TRAP = counter_trap()   # captured once from an example, then called on two new inputs

# %% {"course_kit": {"exercise": "04.silent_trap", "role": "solution", "points": 2, "task": "record PREDICTED, then measure MEASURED with capture.probe, then answer CAUSE (see the task above)"}}
# 1. predict (before measuring)
### BEGIN SOLUTION
PREDICTED = {"jit.trace": "silently wrong", "jit.script": "correct", "fx": "refused", "export": "refused"}
### END SOLUTION
# 2. measure
### BEGIN SOLUTION
MEASURED = {m: capture.probe(m, TRAP).status for m in capture.METHODS}
print(MEASURED)
### END SOLUTION
# 3. explain
### BEGIN SOLUTION
CAUSE = "B"
### END SOLUTION

# %% {"course_kit": {"exercise": "04.silent_trap", "role": "check"}}
course_kit.grading.check("04.silent_trap", PREDICTED, MEASURED, CAUSE)

# %% {"course_kit": {"exercise": "04.silent_trap", "role": "hidden"}}
course_kit.grading.check("04.silent_trap_hidden", CAUSE)

# %% [markdown]
# ## Summary
#
# - `jit.trace` records one run: fast and simple, but every Python decision is frozen, silently.
# - `jit.script` compiles a Python subset: keeps control flow, refuses much ordinary Python; it and
#   trace are TorchScript, which is no longer developed.
# - `torch.fx` gives a Python-level graph for writing transformations, but can't follow data or
#   proxies through Python control flow, and has no file format of its own (a GraphModule is pickled).
# - `torch.export` gives an ATen-level graph with symbolic shapes and guards, saved as `.pt2`. It
#   refuses what it can't prove: fix data-dependent branches with `torch.cond` and declare dynamic
#   dimensions with `Dim` (derived dims such as `2 * Dim("half")` when the code needs them).
# - What capture is for: an exported graph compiled ahead of time (AOTInductor) ships as one `.pt2`
#   file and runs in a fresh process without Python's tracing or compiling; section 6 timed its cold
#   start against `torch.compile`'s first call.
#
# **Further reading**
# - PyTorch documentation: *torch.export* (the programming model, dynamic shapes, `torch.cond`).
# - PyTorch documentation: *torch.fx* (symbolic tracing and its limitations).
# - PyTorch documentation: *AOTInductor: Ahead-Of-Time Compilation for Torch.Export-ed Models*
#   (`aoti_compile_and_package`, `aoti_load_package`).
# - PyTorch documentation: *TorchScript* (`torch.jit.trace`, `torch.jit.script`) and its status notes.
# - Reed et al., "torch.fx: Practical Program Capture and Transformation for Deep Learning in Python", MLSys 2022.
# - Ansel et al., "PyTorch 2: Faster Machine Learning Through Dynamic Python Bytecode Transformation
#   and Graph Compilation", ASPLOS 2024.
#
# **Next:** notebook 05 captures whole GPU launches instead of Python: CUDA graphs.

"""The memory estimator: sliders and a stacked bar chart of bytes per GPU at TP 1, 2, 4, 8.

Same rendering path as the overflow explorer: a plain plotly figure redrawn in an Output widget.
"""
from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go

from .. import narrate
from ..dtypes.memory import GiB, GPU_MEMORY_GIB, PRESETS, per_gpu_bytes
from ..plots.memory import breakdown_figure
from .dtypes import redraw

__all__ = ["MemoryEstimator", "GPU_MEMORY_GIB", "MODES", "estimate"]
MODES = ("inference", "training, fp32 Adam", "training, mixed-precision Adam")
TP_DEGREES = (1, 2, 4, 8)


def estimate(model: str, mode: str, dtype: str = "bf16", seq: int = 0, batch: int = 0,
             checkpointing: bool = False, tps=TP_DEGREES, flash: bool = True) -> dict[str, dict[str, float]]:
    """{"TP=t": {part: bytes per GPU}} for each tensor-parallel degree (the widget's model).
    Training activations: a Llama layer (parallel/sequence.py), with flash attention by default."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {list(MODES)}")
    training = mode != "inference"
    kw = dict(training=training, seq=seq, batch=batch, checkpointing=checkpointing, flash=flash)
    if training:
        kw.update(mixed=mode.endswith("mixed-precision Adam"), optimizer="adam")
    else:
        kw.update(weights_dtype=dtype, kv_dtype="bf16")
    return {f"TP={t}": per_gpu_bytes(model, t, **kw) for t in tps}


class MemoryEstimator:
    """Model, mode, weight dtype, sequence, batch, checkpointing and GPU; bars per TP degree."""

    def __init__(self, model: str = "7b", mode: str = "inference", dtype: str = "bf16",
                 seq: int = 4096, batch: int = 1, gpu: str = "H200") -> None:
        if model not in PRESETS:
            raise ValueError(f"unknown model {model!r}; choose one of {list(PRESETS)}")
        if gpu not in GPU_MEMORY_GIB:
            raise ValueError(f"unknown GPU {gpu!r}; choose one of {list(GPU_MEMORY_GIB)}")
        self.model = W.Dropdown(options=[(f"{k}: {v.name}", k) for k, v in PRESETS.items()],
                                value=model, description="model")
        # A dropdown, not toggle buttons: the longest mode's label was cut on a button (issue 22).
        self.mode = W.Dropdown(options=list(MODES), value=mode, description="mode",
                               layout=W.Layout(width="380px"))
        self.dtype = W.Dropdown(options=["fp32", "bf16", "fp8", "int8", "int4"], value=dtype,
                                description="weights")
        self.seq = W.IntSlider(value=seq, min=0, max=131072, step=512, description="sequence",
                               continuous_update=False)
        self.batch = W.IntSlider(value=batch, min=0, max=128, description="batch",
                                 continuous_update=False)
        self.checkpointing = W.Checkbox(value=False, description="activation checkpointing")
        # on by default: every training stack that runs 48k tokens uses it, and without it the
        # estimate holds each layer's s x s softmax output (Korthikanti et al.'s 2as^2b, no dropout)
        self.flash = W.Checkbox(value=True, description="flash attention (no s x s scores stored)",
                                layout=W.Layout(width="320px"))
        self.gpu = W.Dropdown(options=[(f"{k} ({v:.1f} GiB)", k) for k, v in GPU_MEMORY_GIB.items()],
                              value=gpu, description="GPU", layout=W.Layout(width="320px"))
        self.text = W.HTML()
        self.out = W.Output()
        self.figure: go.Figure = go.Figure()
        self.configs: dict[str, dict[str, float]] = {}
        controls = (self.model, self.mode, self.dtype, self.seq, self.batch, self.checkpointing,
                    self.flash, self.gpu)
        for w in controls:
            w.observe(self.update, names="value")
        self.widget = W.VBox([W.HBox([self.model, self.dtype, self.gpu]), self.mode,
                              W.HBox([self.seq, self.batch]), W.HBox([self.checkpointing, self.flash]), self.text,
                              self.out])
        self.widget.add_class("ck-memory-estimator")
        self.update()

    def update(self, change: object = None) -> None:
        """Recompute the per-GPU breakdown at every TP degree, the text and the figure."""
        training = self.mode.value != "inference"
        self.dtype.disabled = training
        self.checkpointing.disabled = not training
        self.flash.disabled = not training      # inference here counts weights and KV cache only
        self.configs = estimate(self.model.value, self.mode.value, self.dtype.value,
                                self.seq.value, self.batch.value, self.checkpointing.value,
                                flash=self.flash.value)
        cap = GPU_MEMORY_GIB[self.gpu.value]
        shape = PRESETS[self.model.value]
        items = []
        for label, parts in self.configs.items():
            total = sum(parts.values())
            items.append(f'<li class="ck-total">{label}: <b>{total / GiB:.1f} GiB</b> per GPU: '
                         f"{narrate.fits(total, cap * GiB)}</li>")
        what = ("weights + KV cache" if not training else "model state + activations")
        source = ("" if not training else
                  "; activations: Korthikanti et al. (2022)'s rules applied to a Llama layer "
                  + ("with flash attention (Dao et al. 2022: no s x s scores stored)" if self.flash.value
                     else "without flash attention (every layer stores its s x s softmax output)"))
        self.text.value = (f'<div class="ck-memory-text"><b>{html.escape(shape.name)}</b>, '
                           f"{shape.n_params() / 1e9:.2f} B parameters, {self.mode.value}: "
                           f"{what}, in GiB{html.escape(source)}<ul>{''.join(items)}</ul></div>")
        self.figure = breakdown_figure(
            self.configs, title=f"{shape.name}, {self.mode.value}: memory per GPU",
            capacity_gib=cap, capacity_label=self.gpu.value.split(" ")[0])
        redraw(self.out, self.figure)

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)

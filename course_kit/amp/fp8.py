"""fp8 training's linear layer: e4m3 forward, e5m2 gradients, one scale per tensor (notebook 02, §6).

The recipe (Micikevicius et al., "FP8 Formats for Deep Learning", arXiv 2209.05433, 2022; NVIDIA
Transformer Engine's "hybrid" format):

- forward: the input x and the weight W are cast to **e4m3** (3 mantissa bits, max 448), and
  y = x W^T + b is one fp8 matmul;
- backward: the output's gradient g is cast to **e5m2** (2 mantissa bits, but range down to 2^-16
  and up to 57344: gradients need range more than precision); grad_x = g W and grad_W = g^T x are
  two more fp8 matmuls, each of an e5m2 and an e4m3 operand. The bias's gradient stays in fp32.

Each cast first multiplies the tensor by a **scale** s = max_of_format / amax, so its largest
magnitude lands on the format's largest value: the tensor uses the whole range, cannot overflow,
and far fewer small values flush to zero. The product is divided by s_a * s_b afterwards
(`torch._scaled_mm` takes the inverse scales). It is loss scaling (notebook 02, §3) one format
further, and per tensor instead of per loss.

Scaling choices (`scaling=`):
- "dynamic" (the default): the amax of the tensor being cast, now. Chosen because it is stateless
  (no history to checkpoint or keep in step across ranks) and cannot overflow by construction; the
  extra amax reduction per cast is what it costs. torchao's float8 training defaults to it too.
- "delayed": the largest amax of the previous `history` casts of that tensor (Transformer Engine's
  recipe): the scale is known before the tensor is, but a tensor that grows past its history is
  saturated (clamped to +-max); the fraction saturated is recorded.
- "none": scale 1, the counterfactual: what fp8 does to the tensors with no scaling at all.

Where it runs: `torch._scaled_mm` on fp8 tensor cores (sm_89 and newer: Ada, Hopper), when every
matmul dimension is a multiple of 16. Elsewhere the **emulated** path multiplies the very same
quantised values (cast to the fp8 grid, then to fp32) in fp32: fp8's numerics, not its speed.
`choose_path` decides, and says why.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from ..device import current_capability

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
ROLES = ("input", "weight", "grad_output")
FORMAT_OF = {"input": E4M3, "weight": E4M3, "grad_output": E5M2}
SCALINGS = ("dynamic", "delayed", "none")
PATHS = ("auto", "emulated", "scaled_mm")
AMAX_FLOOR = 1e-12          # an all-zero tensor gets a finite scale (torchao's EPS)
FP8_CAPABILITY = (8, 9)     # fp8 tensor cores: Ada (sm_89) and Hopper (sm_90)


def fp8_max(dtype: torch.dtype) -> float:
    """The largest finite value of an fp8 format: 448 (e4m3fn), 57344 (e5m2)."""
    return float(torch.finfo(dtype).max)


def quantise(t: torch.Tensor, dtype: torch.dtype, scale: torch.Tensor | float) -> torch.Tensor:
    """t * scale cast to `dtype`, saturating: values beyond the format's max are clamped to it first
    (a plain cast of an out-of-range value gives NaN in e4m3fn, which has no inf, and inf in e5m2)."""
    m = fp8_max(dtype)
    return (t.float() * scale).clamp(-m, m).to(dtype)


def scale_for(amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The per-tensor scale that maps `amax` onto the format's largest value (fp32, 0-dim)."""
    return fp8_max(dtype) / amax.float().clamp(min=AMAX_FLOOR)


def choose_path(device_type: str, capability: tuple[int, int] | None, dims: Iterable[int]) -> tuple[str, str]:
    """("scaled_mm" | "emulated", why) for fp8 matmuls of these dimensions on this device."""
    if device_type != "cuda":
        return "emulated", ("emulated: no CUDA GPU here, and fp8 matmuls need the fp8 tensor cores of sm_89 "
                            "or newer (Ada, Hopper); the values are rounded to the fp8 grid and multiplied "
                            "in fp32, so the numerics are fp8's and the speed is not")
    if capability is None or tuple(capability) < FP8_CAPABILITY:
        sm = "an unknown GPU" if capability is None else f"sm_{capability[0]}{capability[1]}"
        return "emulated", (f"emulated: {sm} has no fp8 tensor cores (they start at sm_89: Ada, Hopper); "
                            "the values are rounded to the fp8 grid and multiplied in fp32")
    bad = [d for d in dims if d % 16]
    if bad:
        return "emulated", (f"emulated: torch._scaled_mm needs every matmul dimension to be a multiple of 16, "
                            f"and this layer has {sorted(set(bad))}")
    return "scaled_mm", "torch._scaled_mm on the fp8 tensor cores (sm_89+)"


def fp8_mm(a: torch.Tensor, scale_a: torch.Tensor, b: torch.Tensor, scale_b: torch.Tensor,
           out_dtype: torch.dtype, path: str) -> torch.Tensor:
    """(a / scale_a) @ (b / scale_b) for fp8 `a` [M, K] and `b` [K, N], returned in `out_dtype`."""
    inv_a, inv_b = scale_a.reciprocal(), scale_b.reciprocal()
    if path == "scaled_mm":
        # cuBLASLt's fp8 GEMM takes a row-major first operand and a column-major second one.
        b_col = b if b.stride(0) == 1 else b.t().contiguous().t()
        return torch._scaled_mm(a.contiguous(), b_col, scale_a=inv_a, scale_b=inv_b, out_dtype=out_dtype)
    # The fp8 values are exact in fp32 and so are their products; the sums round as a tensor core's do.
    return ((a.float() @ b.float()) * (inv_a * inv_b)).to(out_dtype)


def _layer_mm(layer: "Fp8Linear", a: torch.Tensor, scale_a: torch.Tensor, b: torch.Tensor,
              scale_b: torch.Tensor, out_dtype: torch.dtype, path: str) -> torch.Tensor:
    """fp8_mm for a layer. If torch._scaled_mm raises on this device, the layer says so in `why`
    and multiplies the same quantised values on the emulated path from then on: a record shows it,
    and the other measurements of the run survive."""
    if path == "scaled_mm" and layer.failed is None:
        try:
            return fp8_mm(a, scale_a, b, scale_b, out_dtype, "scaled_mm")
        except RuntimeError as err:
            first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
            layer.failed = (f"emulated: torch._scaled_mm failed here ({first.strip()[:200]}), so the same "
                            f"quantised values were multiplied in fp32 instead")
            layer.last_path, layer.why = "emulated", layer.failed
    return fp8_mm(a, scale_a, b, scale_b, out_dtype, "emulated")


class _Fp8Linear(torch.autograd.Function):
    """y = x W^T + b with x, W in e4m3 and, in the backward pass, g = dL/dy in e5m2."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                layer: "Fp8Linear") -> torch.Tensor:
        out_dtype = (torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type)
                     else x.dtype)
        with torch.autocast(x.device.type, enabled=False):   # our matmuls choose their own dtypes
            x2 = x.reshape(-1, x.shape[-1])
            path = layer.resolve_path(x2.shape[0], x.device)
            xq, sx = layer.cast("input", x2)
            wq, sw = layer.cast("weight", weight)
            y = _layer_mm(layer, xq, sx, wq.t(), sw, out_dtype, path)
            if bias is not None:
                y = y + bias.to(out_dtype)
        # What backward needs, in fp8: 1 byte per value instead of bf16's 2.
        ctx.save_for_backward(xq, sx, wq, sw)
        ctx.layer, ctx.path, ctx.has_bias = layer, path, bias is not None
        ctx.x_shape, ctx.x_dtype, ctx.w_dtype = x.shape, x.dtype, weight.dtype
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        xq, sx, wq, sw = ctx.saved_tensors
        with torch.autocast(grad_y.device.type, enabled=False):
            g = grad_y.reshape(-1, grad_y.shape[-1])
            gq, sg = ctx.layer.cast("grad_output", g)
            grad_x = _layer_mm(ctx.layer, gq, sg, wq, sw, ctx.x_dtype, ctx.path)       # [N, out] @ [out, in]
            grad_w = _layer_mm(ctx.layer, gq.t(), sg, xq, sx, ctx.w_dtype, ctx.path)   # [out, N] @ [N, in]
            grad_b = g.float().sum(0).to(ctx.w_dtype) if ctx.has_bias else None
        return grad_x.reshape(ctx.x_shape), grad_w, grad_b, None


class Fp8Linear(nn.Module):
    """A drop-in for nn.Linear whose three matmuls run in fp8 (see the module docstring).

    `last[role]` holds, after each forward/backward, the tensor's amax and the scale used, and with
    `track_ranges`, what the cast did: the fraction of non-zero values flushed to zero with the
    scale and without it, whether the unscaled tensor would have overflowed, and (delayed scaling)
    the fraction saturated. They stay tensors (no GPU sync) until `ScaleHistory` reads them."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, scaling: str = "dynamic",
                 history: int = 16, path: str = "auto", track_ranges: bool = True):
        super().__init__()
        if scaling not in SCALINGS:
            raise ValueError(f"scaling={scaling!r}; choose one of {SCALINGS}")
        if path not in PATHS:
            raise ValueError(f"path={path!r}; choose one of {PATHS}")
        if not isinstance(history, int) or history < 1:
            raise ValueError(f"history={history!r}; it must be an integer >= 1")
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.scaling, self.history, self.path, self.track_ranges = scaling, history, path, track_ranges
        self.amax_history: dict[str, list[torch.Tensor]] = {r: [] for r in ROLES}
        self.last: dict[str, dict[str, torch.Tensor]] = {}
        self.last_path, self.why = None, None
        self.failed: str | None = None      # why torch._scaled_mm was given up on this device, if it was

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs) -> "Fp8Linear":
        """An Fp8Linear sharing `linear`'s Parameter objects (an optimizer built on either sees both)."""
        layer = cls(linear.in_features, linear.out_features, bias=False, **kwargs)
        layer.weight, layer.bias = linear.weight, linear.bias
        return layer

    def resolve_path(self, rows: int, dev: torch.device) -> str:
        dims = (rows, self.in_features, self.out_features)
        if self.failed is not None:
            self.last_path, self.why = "emulated", self.failed
        elif self.path == "auto":
            self.last_path, self.why = choose_path(dev.type, current_capability(dev), dims)
        else:
            self.last_path, self.why = self.path, f"{self.path} (forced by path={self.path!r})"
        return self.last_path

    def _scale(self, role: str, amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if self.scaling == "none":
            return torch.ones((), device=amax.device)
        if self.scaling == "dynamic":
            return scale_for(amax, dtype)
        past = self.amax_history[role]
        # delayed: the scale comes from earlier casts; the very first one has only its own amax
        ref = torch.stack(past).max() if past else amax
        past.append(amax.detach())
        del past[:-self.history]
        return scale_for(ref, dtype)

    def cast(self, role: str, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The fp8 copy of `t` in this role's format, and the scale it was multiplied by."""
        dtype = FORMAT_OF[role]
        t = t.detach()
        amax = t.abs().amax().float()
        scale = self._scale(role, amax, dtype)
        q = quantise(t, dtype, scale)
        stats = {"amax": amax, "scale": scale}
        if self.track_ranges:
            nonzero = (t != 0).sum().clamp(min=1)
            stats["flushed_scaled"] = ((q.float() == 0) & (t != 0)).sum() / nonzero
            stats["flushed_unscaled"] = ((t.float().to(dtype).float() == 0) & (t != 0)).sum() / nonzero
            stats["overflow_unscaled"] = (amax > fp8_max(dtype)).float()
            # (amax x max/amax may round a hair above max in fp32: that is not saturation)
            stats["saturated"] = ((t.float() * scale).abs() > fp8_max(dtype) * (1 + 2**-20)).sum() / t.numel()
        self.last[role] = stats
        return q, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Fp8Linear.apply(x, self.weight, self.bias, self)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, scaling={self.scaling}, path={self.path}")


def to_fp8(model: nn.Module, **kwargs) -> list[str]:
    """Swap every nn.Linear inside `model` for an Fp8Linear sharing its parameters; the names swapped.

    In the course's TinyGPT these are each block's qkv, proj, fc and out. The output layer is tied
    to the embedding (an F.linear on its weight), so it stays in the surrounding precision, as fp8
    recipes keep the first and last layers."""
    swapped = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, child_name, Fp8Linear.from_linear(child, **kwargs))
                swapped.append(f"{name}.{child_name}" if name else child_name)
    if not swapped:
        raise ValueError("the model has no nn.Linear to run in fp8")
    return swapped


class ScaleHistory:
    """Per step, every Fp8Linear's last amax, scale and cast statistics, as Python floats.

    Pass `snapshot` as `amp.train(..., on_step=...)`: it runs after each step's timer stops."""

    def __init__(self, model: nn.Module):
        self.layers = {n: m for n, m in model.named_modules() if isinstance(m, Fp8Linear)}
        if not self.layers:
            raise ValueError("the model has no Fp8Linear layers to record (call to_fp8 first)")
        self.steps: list[dict[str, dict[str, dict[str, float]]]] = []
        self._why: dict[str, str] = {}

    def snapshot(self, step: int | None = None) -> None:
        keys = [(name, role, k) for name, m in self.layers.items() for role, stats in m.last.items()
                for k in stats]
        if not keys:
            self.steps.append({})
            return
        # one stack and one copy to the host: a GPU waits once per step, not once per number
        values = torch.stack([self.layers[n].last[r][k].float().reshape(()) for n, r, k in keys]).tolist()
        row: dict[str, dict[str, dict[str, float]]] = {}
        for (name, role, k), v in zip(keys, values):
            row.setdefault(name, {}).setdefault(role, {})[k] = v
        self.steps.append(row)

    def series(self, layer: str, role: str, key: str = "scale") -> list[float]:
        """One statistic of one layer's tensor over the steps."""
        if layer not in self.layers:
            raise ValueError(f"unknown layer {layer!r}; choose one of {list(self.layers)}")
        if role not in ROLES:
            raise ValueError(f"role={role!r}; choose one of {ROLES}")
        return [s[layer][role][key] for s in self.steps]

    def paths(self) -> dict[str, str]:
        """Which path each layer took, and why (the last step's)."""
        return {n: self._why.get(n) or (m.why if m is not None else None) for n, m in self.layers.items()}

    def release(self) -> None:
        """Drop the references to the layers (and so to the model's weights) once training is over;
        the recorded steps, the names and the paths stay."""
        self._why = self.paths()
        self.layers = dict.fromkeys(self.layers)

    def to_dict(self) -> dict:
        return {"layers": list(self.layers), "steps": self.steps}

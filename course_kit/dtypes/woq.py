"""Weight-only quantisation in practice: int8 and int4 weights, bf16 activations (notebook 01 §7,
`course-kit bench dtypes`).

A decode step multiplies a few activation rows by large weight matrices: it is memory-bound, so
storing the weights in 8 or 4 bits and dequantising inside the matmul kernel moves 2x or 4x fewer
bytes than bf16. PyTorch ships such kernels:
- int8, one scale per output channel: `torch._weight_int8pack_mm(x, q[N, K] int8, scales[N])`
  (CPU; elsewhere the same result is computed as (x @ q^T) * scales, labelled as such);
- int4, groups of `group_size` weights along K with a scale and a zero each (the "tinygemm" layout
  of gpt-fast and torchao): `torch._weight_int4pack_mm` on CUDA (sm_80+), `_weight_int4pack_mm_for_cpu`
  on a CPU, after packing with `_convert_weight_to_int4pack(_for_cpu)`.
  Dequantisation: w = (q - 8) * scale + zero, q in 0..15.
The oracle for both is the fp32 matmul of the dequantised weights (tests/test_woq.py).
"""
from __future__ import annotations

import torch

from .. import device as _device

INT4_INNER_K_TILES = 8     # the CUDA packing's tile parameter (gpt-fast's default); CPU takes 1
# The int8 path where torch has no weight-only kernel: `q.to(bf16)` is a kernel of its own that writes
# a bf16 copy of the weights, which the matmul then reads (weight_bytes_moved counts it).
UNFUSED_INT8 = "linear(x, q.to(bf16)) * scale"
INT4_MIN_CAPABILITY = (8, 0)   # torch's int4 "tinygemm" CUDA kernel is built for sm_80 and newer


def int4_unavailable(device: str | torch.device) -> str | None:
    """Why the int4 kernel cannot run on `device` (as the course decides for it, T4 emulation
    included), or None when it can."""
    if torch.device(device).type != "cuda":
        return None
    cap = _device.current_capability()
    if cap is not None and tuple(cap) < INT4_MIN_CAPABILITY:
        return f"torch's int4 kernel needs sm_80 or newer; this GPU is sm_{cap[0]}{cap[1]}"
    return None


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: w[N, K] ~ q * scale[:, None], q in -127..127."""
    if w.dim() != 2:
        raise ValueError(f"weights must be 2-D [N, K], got shape {tuple(w.shape)}")
    amax = w.detach().float().abs().amax(dim=1).clamp_min(1e-12)
    scale = amax / 127.0
    q = torch.round(w.float() / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale.float()[:, None]


def int8_weight_only_mm(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, str]:
    """x[M, K] @ (q * scale)^T with int8 weights: (result, which kernel ran)."""
    s = scale.to(x.dtype)
    if x.device.type == "cpu":
        return torch._weight_int8pack_mm(x, q, s), "aten._weight_int8pack_mm"
    # No int8 weight-only kernel on this device in torch: convert in the matmul's operand, scale after.
    return torch.nn.functional.linear(x, q.to(x.dtype)) * s, UNFUSED_INT8


def quantize_int4(w: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric int4 in groups of `group_size` along K: (q[N, K] int32 in 0..15, scales_and_zeros
    [K / group_size, N, 2] fp32) with w ~ (q - 8) * scale + zero."""
    if w.dim() != 2:
        raise ValueError(f"weights must be 2-D [N, K], got shape {tuple(w.shape)}")
    n, k = w.shape
    if group_size not in (32, 64, 128, 256) or k % group_size:
        raise ValueError(f"group_size must be 32, 64, 128 or 256 and divide K={k}, got {group_size}")
    g = w.detach().float().reshape(n, k // group_size, group_size)
    lo, hi = g.amin(dim=2), g.amax(dim=2)
    scale = ((hi - lo) / 15.0).clamp_min(1e-12)
    zero = lo + 8.0 * scale
    q = torch.round((g - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(n, k)
    sz = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous()    # [K/gs, N, 2]
    return q, sz


def dequantize_int4(q: torch.Tensor, sz: torch.Tensor, group_size: int) -> torch.Tensor:
    scale = sz[..., 0].float().t().repeat_interleave(group_size, dim=1)    # [N, K]
    zero = sz[..., 1].float().t().repeat_interleave(group_size, dim=1)
    return (q.float() - 8.0) * scale + zero


def pack_int4(q: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """The packed layout the device's int4 kernel reads."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
    nibbles = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8).to(dev)          # two weights per byte
    return torch._convert_weight_to_int4pack(nibbles, INT4_INNER_K_TILES)


def int4_weight_only_mm(x: torch.Tensor, packed: torch.Tensor, sz: torch.Tensor,
                        group_size: int) -> tuple[torch.Tensor, str]:
    """x[M, K] (bf16) @ dequantised int4 weights^T: (result, which kernel ran)."""
    s = sz.to(device=x.device, dtype=x.dtype)
    if x.device.type == "cpu":
        return torch._weight_int4pack_mm_for_cpu(x, packed, group_size, s), "aten._weight_int4pack_mm_for_cpu"
    return torch._weight_int4pack_mm(x, packed, group_size, s), "aten._weight_int4pack_mm"


def weight_bytes(n: int, k: int, kind: str, group_size: int = 128) -> int:
    """Bytes a weight matrix [N, K] occupies: bf16 2 per weight; int8 1 + a scale per row; int4 half a
    byte + a scale and zero per group."""
    if kind == "bf16":
        return 2 * n * k
    if kind == "int8":
        return n * k + 2 * n
    if kind == "int4":
        return n * k // 2 + 2 * 2 * n * (k // group_size)
    raise ValueError(f"unknown kind {kind!r}; choose bf16, int8 or int4")


def weight_bytes_moved(n: int, k: int, kind: str, kernel: str, group_size: int = 128) -> int:
    """Bytes of weights a matmul path moves through memory per call: what it stores, read once, when
    the kernel dequantises as it loads; for the unfused int8 path also the bf16 copy it writes and
    the matmul reads back (2 + 2 bytes per weight)."""
    stored = weight_bytes(n, k, kind, group_size)
    return stored + 4 * n * k if kernel == UNFUSED_INT8 else stored

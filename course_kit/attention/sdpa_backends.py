"""PyTorch's scaled_dot_product_attention (SDPA) and its backends.

`F.scaled_dot_product_attention` is one call with several kernels behind it. PyTorch picks the
first that accepts the inputs, in a priority order; `torch.nn.attention.sdpa_kernel` restricts the
choice, which is how we time each one:

  flash      FlashAttention-2 (Tri Dao's CUDA kernels), fp16/bf16, sm_80+; on CPU a C++ flash kernel
  efficient  "memory-efficient" attention (xFormers' CUTLASS kernels), sm_50+, fp32 too
  cudnn      NVIDIA cuDNN's fused attention (cuDNN 9, torch >= 2.5), fp16/bf16, sm_80+; fastest on Hopper
  math       the reference composition of matmuls and softmax: always there, memory grows as S^2

A Colab T4 (sm_75) therefore has no flash and no cuDNN backend, and no bf16 in the efficient one.
The rules are written as a pure function of the compute capability (testable by simulating GPUs);
`probe` asks the installed PyTorch directly on the machine at hand.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from .. import device

BACKENDS = ("flash", "efficient", "cudnn", "math")
HALF = (torch.float16, torch.bfloat16)


def _enum(name: str):
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[name]


def backend_support(capability: tuple[int, int] | None, dtype: torch.dtype = torch.bfloat16,
                    head_dim: int = 128, torch_version: str | None = None) -> dict[str, tuple[bool, str]]:
    """For each backend: (usable, why) on a GPU of this capability (None: a CPU), dtype and head dim.

    These are the main rules of PyTorch >= 2.5; a backend may still refuse particular inputs
    (masks, dropout, strides), which `probe` finds out on a real machine.
    """
    if dtype not in (torch.float32, *HALF):
        raise ValueError(f"dtype must be float32, float16 or bfloat16; got {dtype}")
    if head_dim < 1:
        raise ValueError(f"head_dim must be >= 1; got {head_dim}")
    caps = device.capabilities(capability, torch_version=torch_version)
    out: dict[str, tuple[bool, str]] = {}
    if capability is None:
        out["flash"] = (True, "CPU: PyTorch's C++ flash kernel (tiled, online softmax)")
        out["efficient"] = (False, "CUDA only")
        out["cudnn"] = (False, "CUDA only")
        out["math"] = (True, "always available")
        return out
    sm = caps.sm
    aligned = head_dim % 8 == 0
    if not caps.sdpa_flash:
        out["flash"] = (False, f"{sm}: FlashAttention-2 needs sm_80 or newer")
    elif dtype not in HALF:
        out["flash"] = (False, f"flash needs fp16 or bf16, not {str(dtype).replace('torch.', '')}")
    elif not aligned or head_dim > 256:
        out["flash"] = (False, f"flash needs head_dim a multiple of 8 and <= 256; got {head_dim}")
    else:
        out["flash"] = (True, f"{sm}: FlashAttention-2")
    if not caps.sdpa_efficient:
        out["efficient"] = (False, f"{sm}: needs sm_50 or newer")
    elif dtype == torch.bfloat16 and not caps.bf16_tensor_cores:
        out["efficient"] = (False, f"{sm}: no bf16 units; use fp16")
    else:
        out["efficient"] = (True, f"{sm}: CUTLASS memory-efficient kernel")
    if not caps.sdpa_cudnn:
        out["cudnn"] = (False, f"{sm}: cuDNN attention needs sm_80+ and torch >= 2.5")
    elif dtype not in HALF:
        out["cudnn"] = (False, f"cuDNN attention needs fp16 or bf16, not {str(dtype).replace('torch.', '')}")
    elif not aligned or head_dim > 128:
        out["cudnn"] = (False, f"cuDNN attention needs head_dim a multiple of 8 and <= 128; got {head_dim}")
    else:
        out["cudnn"] = (True, f"{sm}: cuDNN fused attention")
    out["math"] = (True, "always available")
    return out


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, backend: str | None = None,
         causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """SDPA restricted to one backend (None: let PyTorch choose). q: [B, Hq, S, D], k/v: [B, Hkv, S, D].

    With GQA (Hkv < Hq) the K/V heads are repeated first, which every backend accepts.
    """
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None; got {backend!r}")
    if q.shape[1] != k.shape[1]:
        if q.shape[1] % k.shape[1]:
            raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    ctx = contextlib.nullcontext()
    if backend is not None:
        from torch.nn.attention import sdpa_kernel
        ctx = sdpa_kernel(_enum(backend))
    with ctx:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def probe(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> dict[str, tuple[bool, str]]:
    """Ask the installed PyTorch: which backends run on these very inputs here, and why not."""
    import warnings
    out: dict[str, tuple[bool, str]] = {}
    for name in BACKENDS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                sdpa(q, k, v, backend=name, causal=causal)
                out[name] = (True, "ran")
            except RuntimeError as err:
                # PyTorch says why in warnings ("... not used because ..."), then raises a generic error
                reasons = [str(w.message).split("\n")[0] for w in caught if "because" in str(w.message)]
                why = reasons[0] if reasons else str(err).strip().split("\n")[0]
                if not q.is_cuda and not reasons:
                    why = f"no {name} kernel for {q.device.type} tensors"
                out[name] = (False, why[:200])
    return out


def support_table(machines: dict[str, tuple[int, int] | None], dtype: torch.dtype = torch.bfloat16,
                  head_dim: int = 128) -> list[dict]:
    """Rows {machine, backend, usable, why} for a plotly table (simulated capabilities)."""
    rows = []
    for name, cap in machines.items():
        for backend, (ok, why) in backend_support(cap, dtype, head_dim).items():
            rows.append({"machine": name, "backend": backend, "usable": ok, "why": why})
    return rows


def xformers_available() -> bool:
    try:
        import xformers.ops  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - ImportError, or a broken build against this torch
        return False


def xformers_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                       scale: float | None = None) -> torch.Tensor:
    """xFormers' memory_efficient_attention, only where xformers is installed. Same layout as `sdpa`."""
    if not xformers_available():
        raise ValueError("xformers is not installed; choose one of the SDPA backends instead")
    import xformers.ops as xops
    if q.shape[1] != k.shape[1]:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    bias = xops.LowerTriangularMask() if causal else None
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # xFormers wants [B, S, H, D]
    out = xops.memory_efficient_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          attn_bias=bias, scale=scale)
    return out.transpose(1, 2)

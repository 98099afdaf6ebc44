"""The code Inductor generates for a fused elementwise chain (Triton on a GPU, C++ on a CPU).

Eager PyTorch runs `gelu(x + bias) + residual` as three kernels, each reading its inputs from memory
and writing a full-size intermediate. Inductor fuses the chain into one kernel that reads x and
residual once and writes the result once: the name of the generated kernel lists what it fused
(e.g. `triton_poi_fused_add_gelu_0`, "poi" for pointwise, or `cpp_fused_add_gelu_0`).
"""
from __future__ import annotations

import re
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(triton|cpp_pybinding|cpp)\(", re.M)


def bias_gelu_residual(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The chain Inductor fuses: three elementwise ops, one kernel once compiled."""
    return F.gelu(x + bias) + residual


class _OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def eager_ops(fn: Callable, *args: Any) -> list[str]:
    """The ATen operators eager mode runs for fn(*args): one kernel launch each."""
    with _OpRecorder() as rec:
        fn(*args)
    return rec.ops


def generated_code(fn: Callable, *args: Any, mode: str | None = None) -> tuple[Any, str]:
    """Compile fn with Inductor, run it once, and return (its result, the generated Python wrapper
    with its kernels). Resets Dynamo first so the code is generated now, not reused."""
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    out, codes = run_and_get_code(torch.compile(fn, mode=mode), *args)
    return out, "\n\n".join(codes)


def kernel_names(code: str) -> list[str]:
    """Names of the kernels defined in generated code, e.g. ['triton_poi_fused_add_gelu_0']."""
    return [m.group(1) for m in _KERNEL_DEF.finditer(code)]


def kernel_source(code: str, name: str) -> str:
    """The text of one generated kernel: from its definition to the line closing its source."""
    m = re.search(rf"^{re.escape(name)} = async_compile\.", code, re.M)
    if m is None:
        raise ValueError(f"no kernel {name!r} in this code; kernels: {kernel_names(code)}")
    # The kernel's source is the first triple-quoted string after its name (C++ or Triton).
    opening = code.find("'''", m.end())
    closing = code.find("'''", opening + 3) if opening >= 0 else -1
    if closing < 0:
        return code[m.start():]
    line_end = code.find("\n", closing)
    return code[m.start(): line_end if line_end >= 0 else len(code)]


def fused_ops(name: str) -> list[str]:
    """The ops a kernel's name says it fused: 'cpp_fused_add_gelu_0' -> ['add', 'gelu']."""
    m = re.search(r"fused_(.*?)(?:_\d+)?$", name)
    return m.group(1).split("_") if m else []


def traffic_bytes(numel: int, bias_numel: int, itemsize: int) -> dict[str, int]:
    """Bytes moved by eager (three kernels) and fused (one kernel) bias + GELU + residual.
    Eager: add reads x and bias, writes t1; gelu reads t1, writes t2; add reads t2 and residual,
    writes out. Fused: reads x, bias and residual, writes out."""
    n, b = numel * itemsize, bias_numel * itemsize
    eager = (n + b + n) + (n + n) + (n + n + n)
    fused = n + b + n + n
    return {"eager": eager, "fused": fused}


def fusion_summary(code: str, fn: Callable, *args: Any) -> dict:
    """Eager ops against generated kernels, and the memory traffic each needs."""
    x = args[0]
    kernels = kernel_names(code)
    return {"eager_ops": eager_ops(fn, *args), "kernels": kernels,
            "fused": {k: fused_ops(k) for k in kernels},
            "language": "Triton" if "triton" in " ".join(kernels) else "C++",
            "traffic_bytes": traffic_bytes(x.numel(), args[1].numel(), x.element_size())}

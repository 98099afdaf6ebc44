"""The five precision modes of notebook 02, and the context each step runs in."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch
from ..device import current_capability


@dataclass(frozen=True)
class Precision:
    name: str
    autocast_dtype: torch.dtype | None  # None: no autocast, everything in fp32
    tf32: bool                          # let fp32 matmuls use TF32 tensor cores (Ampere and later)
    scaler: bool                        # dynamic loss scaling (GradScaler / DynamicLossScaler)
    about: str

    @contextlib.contextmanager
    def tf32_scope(self) -> Iterator[None]:
        """Set every TF32 switch for this mode (on for "tf32", off for all others) and restore them on exit.

        The training loop holds this scope over the whole step: forward, backward and optimizer, so
        strict fp32 is strict in the backward pass too. Three switches exist: the matmul precision
        ("highest" = true fp32, "high" = TF32), the legacy cuBLAS flag, and cuDNN's flag (convolutions)."""
        before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
                  torch.backends.cudnn.allow_tf32)
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        torch.backends.cudnn.allow_tf32 = self.tf32
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(before[0])
            torch.backends.cuda.matmul.allow_tf32 = before[1]
            torch.backends.cudnn.allow_tf32 = before[2]

    @contextlib.contextmanager
    def context(self, device_type: str) -> Iterator[None]:
        """Run the forward pass in this precision (TF32 switches and autocast); restores them on exit."""
        with self.tf32_scope():
            if self.autocast_dtype is None:
                yield
            else:
                with torch.autocast(device_type=device_type, dtype=self.autocast_dtype):
                    yield


def tf32_flags() -> dict:
    """The current state of the three TF32 switches, for the record."""
    return {"float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32)}


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", None, False, False, "strict fp32, TF32 off"),
    "tf32": Precision("tf32", None, True, False, "fp32 storage, matmuls in TF32 (no effect on a CPU)"),
    "bf16": Precision("bf16", torch.bfloat16, False, False, "bf16 autocast, no loss scaling needed"),
    "fp16_scaler": Precision("fp16_scaler", torch.float16, False, True, "fp16 autocast with dynamic loss scaling"),
    "fp16_noscale": Precision("fp16_noscale", torch.float16, False, False,
                              "fp16 autocast without scaling: small gradients underflow"),
}


def get(name: str) -> Precision:
    """The precision mode called `name`; ValueError lists the valid names."""
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; valid precisions: {list(PRECISIONS)}")
    return PRECISIONS[name]


def note(name: str, device: str | torch.device = "cpu") -> str | None:
    """Why a mode may not show its usual effect on this device, or None."""
    p, dev = get(name), torch.device(device)
    if dev.type != "cuda":
        if p.tf32:
            return "TF32 is a GPU tensor-core format: on a CPU this mode is plain fp32."
        if p.autocast_dtype is not None:
            return ("many CPUs have no 16-bit matrix units, so 16-bit autocast may not be faster there "
                    "(section 4 measures it on this one).")
        return None
    major, _ = current_capability(dev)
    if p.tf32 and major < 8:
        return "TF32 needs Ampere (sm_80) or newer: here it is plain fp32."
    if p.autocast_dtype is torch.bfloat16 and major < 8:
        return "No bf16 tensor cores before sm_80: bf16 is emulated and slow here; use fp16 + scaler."
    return None

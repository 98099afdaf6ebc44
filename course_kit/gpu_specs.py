"""The vendors' datasheet peaks of the GPUs the course meets (T4 to H200): what `device.peaks()`
returns for the GPU at hand. Leads, not measurements: notebook 00 measures this machine's own.
"""
from __future__ import annotations

from dataclasses import dataclass


# Dense (no sparsity) TFLOP/s per dtype and HBM GB/s; None: no tensor-core path for that dtype.
@dataclass(frozen=True)
class Peaks:
    name: str
    fp32: float
    tf32: float | None
    bf16: float | None
    fp16: float
    fp8: float | None
    int8: float | None
    hbm_gbs: float
    l2_mib: float
    source: str

    def tflops(self, dtype: str) -> float | None:
        if dtype not in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8"):
            raise ValueError(f"unknown dtype {dtype!r}; choose fp32, tf32, bf16, fp16, fp8 or int8")
        return getattr(self, dtype)


PEAKS: dict[str, Peaks] = {
    "T4": Peaks("T4", 8.1, None, None, 65.0, None, 130.0, 320.0, 4,
                "NVIDIA T4 datasheet (fp16 tensor cores; no bf16 or tf32 units)"),
    "L4": Peaks("L4", 30.3, 60.0, 121.0, 121.0, 242.0, 242.0, 300.0, 48, "NVIDIA L4 datasheet"),
    "A10G": Peaks("A10G", 31.2, 62.5, 125.0, 125.0, None, 250.0, 600.0, 6,
                  "NVIDIA A10 datasheet (AWS's A10G has no sheet of its own)"),
    "A100": Peaks("A100", 19.5, 156.0, 312.0, 312.0, None, 624.0, 2039.0, 40,
                  "NVIDIA A100 80GB SXM datasheet"),
    "H100": Peaks("H100", 67.0, 494.5, 989.5, 989.5, 1979.0, 1979.0, 3350.0, 50,
                  "NVIDIA H100 SXM datasheet"),
    "H200": Peaks("H200", 67.0, 494.5, 989.5, 989.5, 1979.0, 1979.0, 4800.0, 50,
                  "NVIDIA H200 SXM datasheet"),
}

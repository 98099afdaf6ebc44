"""Automatic mixed precision: precision modes, a hand-written loss scaler, one training loop.

Notebook 02 shows the sources of these modules; `course-kit bench amp` times them on a GPU.
"""
from .grads import FP16_MAX, FP16_MIN_NORMAL, FP16_MIN_SUBNORMAL, flat_grads, log2_histogram, underflow_fractions
from .precision import PRECISIONS, Precision, get, note, tf32_flags
from .scaler import DynamicLossScaler
from .train import RunResult, compare, saved_activation_bytes, train

__all__ = [
    "FP16_MAX", "FP16_MIN_NORMAL", "FP16_MIN_SUBNORMAL", "PRECISIONS", "DynamicLossScaler", "Precision",
    "RunResult", "compare", "flat_grads", "get", "log2_histogram", "note", "saved_activation_bytes",
    "tf32_flags", "train", "underflow_fractions",
]

"""Automatic mixed precision: precision modes, a hand-written loss scaler, one training loop.

Notebook 02 shows the sources of these modules; `course-kit bench amp` times them on a GPU.

Modules:

    activations     Activation gradients under autocast: what fp16 flushes to zero when the loss is not ...
    fp8             fp8 training's linear layer: e4m3 forward, e5m2 gradients, per-tensor scales (§6)
    fp8_train       TinyGPT trained in fp8 against bf16 autocast: losses, time, memory, the scales (§6)
    explain         The "what just happened" sentences of notebook 02, computed from the run's (or the ...
    snapshot        One steady training step per mode under the allocator's log: what holds its peak memory.
    grads           Where gradients sit against fp16's range: underflow fractions and magnitude histograms.
    stepper         Step the course's DynamicLossScaler and torch's GradScaler side by side, one event ...
    train           One training loop for every precision mode, recording what each step did.
"""
from .grads import FP16_MAX, FP16_MIN_NORMAL, FP16_MIN_SUBNORMAL, flat_grads, log2_histogram, underflow_fractions
from .precision import PRECISIONS, Precision, get, note, tf32_flags
from .scaler import DynamicLossScaler
from .train import LAST_STEPS, RunResult, compare, final_loss, saved_activation_bytes, saved_bytes_by_dtype, train, train_data
from .activations import (activation_grads, explain_logit_grads, explain_noscale_losses, log2_hist,
                          typical_logit_grad, zones)
from .stepper import ScalerPair, explain_step

__all__ = [
    "FP16_MAX", "FP16_MIN_NORMAL", "FP16_MIN_SUBNORMAL", "PRECISIONS", "DynamicLossScaler", "Precision",
    "RunResult", "compare", "flat_grads", "get", "log2_histogram", "note", "saved_activation_bytes",
    "tf32_flags", "train", "underflow_fractions", "saved_bytes_by_dtype", "activation_grads",
    "explain_logit_grads", "log2_hist", "typical_logit_grad", "zones", "ScalerPair", "explain_step",
    "LAST_STEPS", "final_loss", "train_data", "explain_noscale_losses",
]

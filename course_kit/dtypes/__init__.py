"""Number formats for deep learning: layouts, limits, rounding as torch does it, quantisation.

    from course_kit import dtypes
    dtypes.FORMATS["bf16"].limits()         # bits, bias, max, smallest normal/subnormal, eps
    dtypes.classify(500.0, "fp8_e4m3fn")    # stored value, bits, outcome, relative error
    dtypes.quantize(w, bits=4, symmetric=False, axis=0)
    dtypes.ops.evaluate("exp", 12.0, "fp16")

Modules:

    memory          How much memory a model needs: weights, training state, activations, KV cache,
                    per GPU (notebook 01's memory section and estimator; notebook 09's ZeRO).
    explain         Notebook 01's "what just happened" sentences, computed from the formats' limits and ...
    fp8_overflow    What this PyTorch does when an fp32 value is cast to fp8 e4m3fn beyond its range ...
    quant           int8 and int4 quantisation: symmetric or asymmetric scales, per tensor or per channel.
    woq             Weight-only quantisation in practice: int8 and int4 weights, bf16 activations ...
    woq_roofline    Where weight-only quantisation pays: a weight-only product under notebook 00's roofline.
    woq_explain     Notebook 01 §7's words on weight-only decode, computed from a bench woq record.
"""
from . import ops
from .formats import FORMAT_NAMES, FORMATS, Format, get_format
from .quant import QuantResult, qrange, quantize
from .rounding import (OUTCOMES, Fields, Rounding, classify, decompose, round_to, tf32_round_bits,
                       to_bits)

__all__ = ["FORMATS", "FORMAT_NAMES", "Format", "get_format", "round_to", "to_bits", "decompose",
           "classify", "Fields", "Rounding", "OUTCOMES", "tf32_round_bits", "quantize",
           "QuantResult", "qrange", "ops"]

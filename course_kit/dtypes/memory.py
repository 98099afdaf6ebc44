"""How much memory a model needs: weights, training state, activations, KV cache, per GPU.

Pure functions on plain numbers, so notebooks 01 and 09 (and instructors) can use them directly.
Sources:
- bytes per parameter of Adam in mixed precision (2 + 2 + 12 = 16): Rajbhandari et al., "ZeRO:
  Memory Optimizations Toward Training Trillion Parameter Models" (2020), section 3.1;
- activations per transformer layer, s*b*h*(34 + 5*a*s/h) bytes for a GPT layer with 16-bit
  activations, and their split under tensor parallelism: Korthikanti et al., "Reducing Activation
  Recomputation in Large Transformer Models" (2022), section 4; for a Llama layer, the same rules
  applied to RMSNorm, GQA and SwiGLU (parallel/sequence.py), with flash attention by default, which
  stores no s x s scores (Dao et al. 2022);
- KV cache: 2 (K and V) * layers * KV heads * head dim * sequence * batch * bytes per element.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["BYTES_PER_PARAM", "OPTIMIZERS", "ModelShape", "PRESETS", "bytes_per_param",
           "weights_bytes", "training_bytes", "activation_bytes", "kv_cache_bytes",
           "per_gpu_bytes", "GB", "GiB", "GPU_MEMORY_GIB", "DATASHEET_GB"]

GB = 1e9
GiB = 2 ** 30    # the unit of the course's text (course_kit.narrate.gib)

# Memory of one GPU, in GiB, as torch reports it (`torch.cuda.get_device_properties(0).total_memory`),
# keyed by the name torch gives the GPU (without "NVIDIA"/"Tesla"). The H200's is this course's own
# measurement (its reference runs print 139.8 GiB); the others are the totals those GPUs typically
# report (driver-dependent by ~0.5%). The "GB" figure of a datasheet is a rounded product name, not a
# byte count: the H200's 139.8 GiB are 150.1e9 bytes, more than its datasheet's "141 GB"
# (DATASHEET_GB, quoted only so that the notebook can say so; nothing computes with it).
GPU_MEMORY_GIB: dict[str, float] = {"H200": 139.8, "H100 80GB HBM3": 79.2, "A100-SXM4-40GB": 39.6,
                                    "T4": 14.8}
DATASHEET_GB: dict[str, float] = {"H200": 141, "H100 80GB HBM3": 80, "A100-SXM4-40GB": 40, "T4": 16}

BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3fn": 1, "fp8_e5m2": 1,
    "int8": 1, "int4": 0.5,
}
# optimizer -> number of fp32 state tensors per parameter
OPTIMIZERS: dict[str, int] = {"adam": 2, "adamw": 2, "sgd": 0, "sgd_momentum": 1}


def _positive(name: str, value: float, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return value


def _count(name: str, value: int, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def bytes_per_param(dtype: str) -> float:
    """Bytes one value takes in a dtype; ValueError names the choices."""
    if dtype not in BYTES_PER_PARAM:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {list(BYTES_PER_PARAM)}")
    return BYTES_PER_PARAM[dtype]


def weights_bytes(n_params: float, dtype: str = "bf16") -> float:
    """Bytes of the weights alone (inference, no quantisation scales counted)."""
    return _positive("n_params", n_params, allow_zero=True) * bytes_per_param(dtype)


def training_bytes(n_params: float, optimizer: str = "adam", mixed: bool = True,
                   low_dtype: str = "bf16") -> dict[str, float]:
    """Model state for training: weights, gradients, optimizer moments, master weights.

    mixed=True: weights and gradients in low_dtype (2 bytes), an fp32 master copy (4) and fp32
    moments (4 each for Adam): 2 + 2 + 4 + 8 = 16 bytes/param, the ZeRO paper's figure.
    mixed=False: everything fp32, no master copy: 4 + 4 + 8 = 16 bytes/param for Adam.
    Activations are separate (activation_bytes).
    """
    n = _positive("n_params", n_params, allow_zero=True)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {list(OPTIMIZERS)}")
    w = bytes_per_param(low_dtype) if mixed else 4.0
    return {
        "weights": n * w,
        "gradients": n * w,
        "optimizer moments": n * 4.0 * OPTIMIZERS[optimizer],
        "master weights": n * 4.0 if mixed else 0.0,
    }


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only (Llama-style) transformer's shape."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def n_params(self) -> int:
        """Parameters of a Llama block stack: attention, SwiGLU MLP, RMSNorms, embeddings."""
        h, d = self.hidden, self.head_dim
        attn = h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * d * h
        mlp = 3 * h * self.intermediate
        per_layer = attn + mlp + 2 * h                   # two RMSNorm weights
        emb = self.vocab * h * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + emb + h         # + final norm


PRESETS: dict[str, ModelShape] = {
    # The published config.json values of these models (tests rebuild them with transformers
    # on the meta device and compare parameter counts).
    "1b": ModelShape("Llama-3.2-1B", 16, 2048, 32, 8, 8192, 128256, tied_embeddings=True),
    "7b": ModelShape("Llama-2-7B", 32, 4096, 32, 32, 11008, 32000),
    "8b": ModelShape("Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256),
    "70b": ModelShape("Llama-2-70B", 80, 8192, 64, 8, 28672, 32000),
}


def activation_bytes(layers: int, hidden: int, heads: int, seq: int, batch: int, *,
                     checkpointing: bool = False, tp: int = 1,
                     sequence_parallel: bool = False, flash: bool = False,
                     kv_heads: int | None = None, ffn: int | None = None) -> float:
    """Activations kept for the backward pass, 16-bit.

    Without kv_heads/ffn, a GPT layer (Korthikanti et al. 2022, section 4): per layer
    s*b*h*(34 + 5*a*s/h) bytes; 5*a*s/h is the attention scores, softmax and its dropout mask,
    which flash attention does not store (flash=True drops it). Under tensor parallelism of degree
    t: s*b*h*(10 + 24/t + 5*a*s/(h*t)); with sequence parallelism all of it is divided by t.
    With kv_heads and ffn, a Llama layer (RMSNorm, GQA, SwiGLU of width ffn, no dropout), derived
    with the paper's rules in parallel/sequence.py: about 12h + 4(kv/a)h + 8f bytes a token, plus
    2*a*s without flash attention (the softmax output). Full checkpointing keeps only each layer's
    input: 2*s*b*h bytes per layer (divided by t under sequence parallelism), plus one layer's
    activations while recomputing.
    """
    L, h, a = _count("layers", layers), _count("hidden", hidden), _count("heads", heads)
    s, b, t = _count("seq", seq), _count("batch", batch), _count("tp", tp)
    if kv_heads is not None or ffn is not None:
        from ..parallel.sequence import layer_activation_bytes   # the derivation lives with SP
        per_layer = layer_activation_bytes(s, b, h, a, t, sequence_parallel, flash, kv_heads, ffn)
    else:
        attn = 0.0 if flash else 5 * a * s / h
        if sequence_parallel:
            per_layer = s * b * h * (34 + attn) / t
        else:
            per_layer = s * b * h * (10 + 24 / t + attn / t)
    if not checkpointing:
        return L * per_layer
    kept = 2 * s * b * h / (t if sequence_parallel else 1)
    return L * kept + per_layer


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, seq: int, batch: int,
                   dtype: str = "bf16") -> float:
    """K and V of every layer for batch sequences of length seq."""
    _count("layers", layers), _count("kv_heads", kv_heads), _count("head_dim", head_dim)
    _count("seq", seq, 0), _count("batch", batch, 0)
    return 2 * layers * kv_heads * head_dim * seq * batch * bytes_per_param(dtype)


def per_gpu_bytes(shape: "ModelShape | str", tp: int = 1, *, weights_dtype: str = "bf16",
                  training: bool = False, optimizer: str = "adam", mixed: bool = True,
                  seq: int = 0, batch: int = 0, kv_dtype: str = "bf16",
                  checkpointing: bool = False, flash: bool = True) -> dict[str, float]:
    """Bytes each GPU holds under tensor parallelism of degree tp (Megatron-style sharding).

    Weights, gradients and optimizer state are split evenly over tp GPUs. The KV cache is split
    by KV heads; when tp exceeds the number of KV heads each GPU keeps one head (replication).
    Inference (training=False) counts weights and KV cache; training counts the model state of
    training_bytes and the activations of a batch instead (no KV cache): a Llama layer of this
    shape (activation_bytes with kv_heads and ffn), with flash attention unless flash=False, which
    stores every layer's s x s softmax output.
    """
    if isinstance(shape, str):
        if shape not in PRESETS:
            raise ValueError(f"unknown model {shape!r}; choose one of {list(PRESETS)}")
        shape = PRESETS[shape]
    t = _count("tp", tp)
    if shape.heads % t:
        raise ValueError(f"tp={t} must divide the number of attention heads ({shape.heads})")
    n = shape.n_params()
    if training:
        parts = {k: v / t for k, v in training_bytes(n, optimizer, mixed, weights_dtype).items()}
        if seq and batch:
            parts["activations"] = activation_bytes(
                shape.layers, shape.hidden, shape.heads, seq, batch, checkpointing=checkpointing, tp=t,
                flash=flash, kv_heads=shape.kv_heads, ffn=shape.intermediate)
        return parts
    parts = {"weights": weights_bytes(n, weights_dtype) / t}
    if seq and batch:
        kv_per_gpu = max(1, shape.kv_heads // t)
        parts["KV cache"] = kv_cache_bytes(shape.layers, kv_per_gpu, shape.head_dim, seq, batch,
                                           kv_dtype)
    return parts

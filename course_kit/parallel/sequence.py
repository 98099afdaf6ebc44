"""Sequence parallelism: what it shards next to tensor parallelism, and the activation memory it
saves (notebook 09, §4), for a GPT layer (the paper's) and for a Llama layer (derived below).

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
arXiv 2205.05198), section 4: a GPT layer (LayerNorm, multi-head attention, dropout, a 4h GeLU MLP)
stores s*b*h*(34 + 5*a*s/h) bytes of activations for the backward pass, with 16-bit activations
and 1-byte dropout masks (s sequence, b batch, h hidden, a heads). Tensor parallelism over t GPUs
splits what lies *inside* its column/row-parallel regions (24 sbh + 5 a s^2 b); the LayerNorms, the
dropouts and the inputs of the first linears (10 sbh) stay whole on every GPU. Sequence
parallelism splits those along the *sequence* instead: LayerNorm and dropout work on each token
independently, so each GPU keeps s/t of the tokens there, and the all-reduce of TP becomes a
reduce-scatter (into the sequence-parallel region) plus an all-gather (out of it), the same bytes
moved. Everything is then divided by t: s*b*h*(34 + 5*a*s/h)/t.

A Llama layer (Llama 2 and 3, the course model) differs in four ways, so its count is derived here
with the paper's rules (every tensor a backward step needs, counted once; 16-bit activations):
- RMSNorm instead of LayerNorm: its backward needs its input (2h bytes a token) and one fp32
  1/rms per token (4 bytes);
- grouped-query attention: K and V have kv_heads of the heads' head_dim each, 2*(kv/a)*h bytes a
  token apiece instead of 2h; RoPE is a fixed rotation, whose backward needs only cos and sin (one
  table per sequence, shared by every layer: not counted per layer), so the rotated Q and K are
  what attention keeps;
- a SwiGLU MLP of intermediate size f (Llama-2-70B: f = 28672 = 3.5h) with three matrices: its
  backward needs the gate and up outputs (2f each, for SiLU's and the product's backward), SiLU's
  output (2f, the product's other input) and the down projection's input (2f): 8f, against the
  GPT MLP's 16h (the GeLU input and the second linear's input, 4h wide each);
- no dropout: no masks (the paper's 2 sbh of masks and its 3 a s^2 b of attention dropout go).
Per token: outside TP's regions the two RMSNorm inputs and the two linear inputs (8h) and the two
1/rms (8 bytes); inside them Q and the attention output (4h), K and V (4(kv/a)h) and the MLP's 8f,
plus, with flash attention, one fp32 log-sum-exp per head (4a), or without it the softmax output,
2 a s per token (2 a s^2 b in all; no dropout mask nor dropout output). For Llama-2-70B (h = 8192,
a = 64, kv = 8, f = 28672): 12h + 4(kv/a)h + 8f = 40.5h bytes a token (+ 4a + 8), against the GPT
layer's 34h at the same width. tests/test_sequence_parallel.py counts what autograd saves for the
course's own Llama block (saved-tensor hooks) against this plus what its eager code keeps beyond
it (EAGER_EXTRAS, eager_extra_bytes).
"""
from __future__ import annotations

# (component, bytes per s*b*h, which region it lies in); "tp": inside TP's split, "seq": in the
# region TP leaves whole and sequence parallelism splits. From section 4.1 of the paper (GPT layer).
LAYER_PARTS: tuple[tuple[str, float, str], ...] = (
    ("LayerNorm input (attention)", 2, "seq"),
    ("Q, K, V projection input", 2, "seq"),
    ("Q and K (for the scores)", 4, "tp"),
    ("V", 2, "tp"),
    ("output projection input", 2, "tp"),
    ("attention dropout mask", 1, "seq"),
    ("LayerNorm input (MLP)", 2, "seq"),
    ("first MLP linear input", 2, "seq"),
    ("GeLU input", 8, "tp"),
    ("second MLP linear input", 8, "tp"),
    ("MLP dropout mask", 1, "seq"),
)
# per a*s^2*b bytes: softmax output (2), its dropout mask (1), dropout output (2); not stored with
# flash attention, which recomputes the scores in the backward pass
SCORE_PARTS: tuple[tuple[str, float], ...] = (
    ("softmax output", 2), ("softmax dropout mask", 1), ("dropout output (scores)", 2))

# What the course's eager Block (models/llama.py) stores beyond the Llama accounting, per token:
# each RMSNorm normalises an fp32 copy of its input (4h kept instead of the 2h input) and multiplies
# the 16-bit normalised values by the weight (2h more kept): +4h a norm. With fewer K/V heads than
# query heads, sdpa_gqa repeats K and V to every head, and SDPA keeps the copies: +4(1 - kv/a)h.
# With as many, V reaches SDPA as a view of the fused q/k/v projection's output, so that whole
# buffer stays alive: +2h + 2(kv/a)h (its Q and K parts, before RoPE).
EAGER_EXTRAS = ("fp32 RMSNorm input and 16-bit normalised values, per norm: +4h",
                "K and V repeated to every query head (sdpa_gqa), kv < a: +4(1 - kv/a)h",
                "V a view of the fused q/k/v output, kv = a: +2h + 2(kv/a)h")


def eager_extra_bytes(hidden: int, heads: int, kv_heads: int) -> float:
    """Bytes a token that the course's eager Block keeps beyond the accounting (EAGER_EXTRAS)."""
    _positive(hidden=hidden, heads=heads, kv_heads=kv_heads)
    h, g = hidden, kv_heads / heads
    attention = 4 * (1 - g) * h if kv_heads < heads else 2 * h + 2 * g * h
    return 2 * 4 * h + attention


def _positive(**values: int) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}; it must be an integer >= 1")


def _llama_parts(hidden: int, heads: int, kv_heads: int, ffn: int, seq: int,
                 flash: bool) -> list[tuple[str, float, str]]:
    """(component, bytes per token, region) of one Llama layer, as derived in the docstring."""
    h, a, f = hidden, heads, ffn
    kv = 2 * h * kv_heads / heads                 # K (or V): kv_heads heads of head_dim = h/a
    parts = [
        ("RMSNorm input (attention)", 2 * h, "seq"), ("RMSNorm 1/rms (attention), fp32", 4, "seq"),
        ("Q, K, V projection input", 2 * h, "seq"),
        ("Q after RoPE", 2 * h, "tp"), ("K after RoPE", kv, "tp"), ("V", kv, "tp"),
        ("attention output (output projection input)", 2 * h, "tp"),
        ("RMSNorm input (MLP)", 2 * h, "seq"), ("RMSNorm 1/rms (MLP), fp32", 4, "seq"),
        ("gate/up projection input", 2 * h, "seq"),
        ("gate (SiLU input)", 2 * f, "tp"), ("up", 2 * f, "tp"), ("SiLU output", 2 * f, "tp"),
        ("down projection input (SiLU x up)", 2 * f, "tp"),
    ]
    if flash:
        parts.append(("log-sum-exp per head (flash), fp32", 4 * a, "tp"))
    else:
        parts.append(("softmax output (no dropout)", 2 * a * seq, "tp"))
    return parts


def layer_activation_parts(seq: int, batch: int, hidden: int, heads: int, tp: int = 1,
                           sequence_parallel: bool = False, flash: bool = False,
                           kv_heads: int | None = None, ffn: int | None = None) -> list[dict]:
    """Rows {part, region, bytes} of one layer's stored activations on one GPU: a GPT layer (the
    paper's) when kv_heads and ffn are None, else a Llama layer with those K/V heads and MLP width.
    TP splits heads: K and V of a Llama layer keep at least one head per GPU (replicated when tp >
    kv_heads)."""
    _positive(seq=seq, batch=batch, hidden=hidden, heads=heads, tp=tp)
    if sequence_parallel and seq % tp:
        raise ValueError(f"seq={seq} must be divisible by tp={tp} to split it over the GPUs")
    rows = []
    if kv_heads is None and ffn is None:
        sbh = seq * batch * hidden
        for part, k, region in LAYER_PARTS:
            split = tp if (region == "tp" or sequence_parallel) else 1
            rows.append({"part": part, "region": region, "bytes": k * sbh / split})
        if not flash:
            for part, k in SCORE_PARTS:
                rows.append({"part": part, "region": "tp", "bytes": k * heads * seq * seq * batch / tp})
        return rows
    if kv_heads is None or ffn is None:
        raise ValueError("a Llama layer needs both kv_heads and ffn (leave both out for the paper's GPT layer)")
    _positive(kv_heads=kv_heads, ffn=ffn)
    if heads % kv_heads:
        raise ValueError(f"heads={heads} must be a multiple of kv_heads={kv_heads}")
    for part, per_token, region in _llama_parts(hidden, heads, kv_heads, ffn, seq, flash):
        split = tp if (region == "tp" or sequence_parallel) else 1
        if part in ("K after RoPE", "V") and tp > kv_heads:
            per_token, split = per_token / kv_heads, 1      # one whole head on each GPU, replicated
        rows.append({"part": part, "region": region, "bytes": per_token * seq * batch / split})
    return rows


def layer_activation_bytes(seq: int, batch: int, hidden: int, heads: int, tp: int = 1,
                           sequence_parallel: bool = False, flash: bool = False,
                           kv_heads: int | None = None, ffn: int | None = None) -> float:
    """One layer's stored activations per GPU (the sum of layer_activation_parts)."""
    return sum(r["bytes"] for r in layer_activation_parts(seq, batch, hidden, heads, tp, sequence_parallel,
                                                          flash, kv_heads, ffn))


def sp_comparison(seq: int, batch: int, hidden: int, heads: int, layers: int, tp: int,
                  flash: bool = False, kv_heads: int | None = None, ffn: int | None = None) -> dict[str, float]:
    """Bytes per GPU of the whole stack's activations: no split, TP alone, TP + sequence parallel."""
    _positive(layers=layers)
    one = lambda t, sp: layers * layer_activation_bytes(seq, batch, hidden, heads, t, sp, flash,  # noqa: E731
                                                        kv_heads, ffn)
    return {"one GPU": one(1, False), f"TP={tp}": one(tp, False),
            f"TP={tp} + sequence parallel": one(tp, True)}

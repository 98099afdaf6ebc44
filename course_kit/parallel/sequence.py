"""Sequence parallelism: what it shards next to tensor parallelism, and the activation memory it
saves (notebook 09, §4).

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
arXiv 2205.05198), section 4: a transformer layer (GPT-style: LayerNorm, attention, dropout, a GeLU
MLP) stores s*b*h*(34 + 5*a*s/h) bytes of activations for the backward pass, with 16-bit
activations and 1-byte dropout masks (s sequence, b batch, h hidden, a heads). Tensor parallelism
over t GPUs splits what lies *inside* its column/row-parallel regions (24 sbh + 5 a s^2 b); the
LayerNorms, the dropouts and the inputs of the first linears (10 sbh) stay whole on every GPU.
Sequence parallelism splits those along the *sequence* instead: LayerNorm and dropout work on each
token independently, so each GPU keeps s/t of the tokens there, and the all-reduce of TP becomes a
reduce-scatter (into the sequence-parallel region) plus an all-gather (out of it), the same bytes
moved. Everything is then divided by t: s*b*h*(34 + 5*a*s/h)/t.
"""
from __future__ import annotations

# (component, bytes per s*b*h, which region it lies in); "tp": inside TP's split, "seq": in the
# region TP leaves whole and sequence parallelism splits. From section 4.1 of the paper.
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


def layer_activation_parts(seq: int, batch: int, hidden: int, heads: int, tp: int = 1,
                           sequence_parallel: bool = False,
                           flash: bool = False) -> list[dict]:
    """Rows {part, region, bytes} of one layer's stored activations on one GPU."""
    for name, v in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads), ("tp", tp)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}; it must be an integer >= 1")
    if sequence_parallel and seq % tp:
        raise ValueError(f"seq={seq} must be divisible by tp={tp} to split it over the GPUs")
    sbh = seq * batch * hidden
    rows = []
    for part, k, region in LAYER_PARTS:
        split = tp if (region == "tp" or sequence_parallel) else 1
        rows.append({"part": part, "region": region, "bytes": k * sbh / split})
    if not flash:
        for part, k in SCORE_PARTS:
            rows.append({"part": part, "region": "tp", "bytes": k * heads * seq * seq * batch / tp})
    return rows


def layer_activation_bytes(seq: int, batch: int, hidden: int, heads: int, tp: int = 1,
                           sequence_parallel: bool = False, flash: bool = False) -> float:
    """One layer's stored activations per GPU (the sum of layer_activation_parts)."""
    return sum(r["bytes"] for r in layer_activation_parts(seq, batch, hidden, heads, tp,
                                                          sequence_parallel, flash))


def sp_comparison(seq: int, batch: int, hidden: int, heads: int, layers: int, tp: int,
                  flash: bool = False) -> dict[str, float]:
    """Bytes per GPU of the whole stack's activations: no split, TP alone, TP + sequence parallel."""
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers={layers!r}; it must be an integer >= 1")
    one = lambda t, sp: layers * layer_activation_bytes(seq, batch, hidden, heads, t, sp, flash)  # noqa: E731
    return {"one GPU": one(1, False), f"TP={tp}": one(tp, False),
            f"TP={tp} + sequence parallel": one(tp, True)}

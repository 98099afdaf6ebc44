"""The course model (course_kit.models.llama) under tensor parallelism.

`shard_llama(model)` returns this rank's `TPTransformer`: the same class of model, built from a
config with n_heads/n query heads, its K/V heads and ffn_dim/n, so that every method of the
course model (prefill, decode, generate, CUDA-graph capture) runs unchanged on the shards.
Only three things differ, all Megatron-style:
- wqkv and w13 keep this rank's rows (whole heads, a slice of the FFN): column parallel;
- wo and w2 keep the matching columns and sum the ranks' partial outputs: row parallel, one
  all-reduce each, two per layer;
- the output head keeps a slice of the vocabulary and all-gathers the logits.
The embedding table and the norms are replicated.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from ..models import llama
from .comm import all_reduce_sum, gather_from_tp_region, world
from .oneshot import symmetric_memory_group
from .tensor import RowParallelLinear, kv_heads_of_rank


class TPComm:
    """What a shard's decode step sends between ranks, handed to kernels that know nothing of
    torch.distributed (notebook 05's Triton step, `cuda_graphs/decode_kernels`): parallel/ builds on
    those kernels, never the other way round."""

    def __init__(self, group: Any = None):
        self.group = group
        self.rank, self.world = world(group)

    def all_reduce_sum(self, x: torch.Tensor) -> torch.Tensor:
        return all_reduce_sum(x, self.group)

    def gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's slice along the last dimension, in rank order (the vocabulary's logits)."""
        return gather_from_tp_region(x, self.group)

    def symmetric_memory_name(self) -> str:
        return symmetric_memory_group(self.group)


class TPTransformer(llama.Transformer):
    """A shard of the course model; `logits` gathers the vocabulary slices of all ranks."""

    def __init__(self, cfg: llama.ModelConfig, vocab_shard: int, group: Any = None):
        super().__init__(cfg)
        self.group = group
        self.comm = TPComm(group)
        self.output = None  # the head is the vocabulary slice below, tied or not
        self.lm_head = torch.nn.Parameter(torch.empty(vocab_shard, cfg.dim))

    @property
    def head_weight(self) -> torch.Tensor:
        return self.lm_head   # this rank's slice of the vocabulary

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return gather_from_tp_region(F.linear(h, self.head_weight), self.group)


def local_config(cfg: llama.ModelConfig, rank: int, n: int) -> llama.ModelConfig:
    """This rank's config: its share of query heads, K/V heads and FFN width."""
    if cfg.ffn_dim % n or cfg.vocab_size % n:
        raise ValueError(f"tp={n} must divide ffn_dim={cfg.ffn_dim} and vocab_size={cfg.vocab_size}")
    kv = kv_heads_of_rank(cfg.n_heads, cfg.n_kv_heads, rank, n)
    return replace(cfg, n_heads=cfg.n_heads // n, n_kv_heads=len(kv), ffn_dim=cfg.ffn_dim // n,
                   head_dim=cfg.head_dim, name=f"{cfg.name}-tp{n}")


def shard_llama(model: llama.Transformer, group: Any = None,
                device: str | torch.device | None = None, rank_of: tuple[int, int] | None = None) -> TPTransformer:
    """This rank's tensor-parallel shard of `model` (which every rank holds in full). `rank_of`
    (rank, world) builds another rank's shard, without a process group (tests of one process)."""
    rank, n = rank_of or world(group)
    cfg = model.config
    w = model.tok_embeddings.weight
    dev = torch.device(device) if device is not None else w.device
    local = local_config(cfg, rank, n)
    # built directly on the device (its random init is overwritten below); the meta device
    # would avoid the init but costs seconds on its first use in a process
    with torch.device(dev):
        tp = TPTransformer(local, cfg.vocab_size // n, group).to(w.dtype)
    with torch.no_grad():
        _copy_shards(model, tp, rank, n, group)
    return tp.eval()


def _copy_shards(model: llama.Transformer, tp: TPTransformer, rank: int, n: int,
                 group: Any) -> None:
    cfg, local = model.config, tp.config
    w = model.tok_embeddings.weight
    dev = tp.tok_embeddings.weight.device
    tp.inv_freq = llama.rope_inv_freq(local).to(dev)
    tp.decode_attention, tp.paged_attention = model.decode_attention, model.paged_attention

    d, hq = cfg.head_dim, local.n_heads
    kv = kv_heads_of_rank(cfg.n_heads, cfg.n_kv_heads, rank, n)
    q_rows = slice(rank * hq * d, (rank + 1) * hq * d)
    k0, v0 = cfg.n_heads * d, (cfg.n_heads + cfg.n_kv_heads) * d
    k_rows = slice(k0 + kv.start * d, k0 + kv.stop * d)
    v_rows = slice(v0 + kv.start * d, v0 + kv.stop * d)
    f = local.ffn_dim
    ffn = slice(rank * f, (rank + 1) * f)

    tp.tok_embeddings.weight.copy_(w)
    tp.norm.weight.copy_(model.norm.weight)
    head = model.head_weight
    tp.lm_head.copy_(head.chunk(n, dim=0)[rank])
    for src, dst in zip(model.layers, tp.layers):
        dst.attention_norm.weight.copy_(src.attention_norm.weight)
        dst.ffn_norm.weight.copy_(src.ffn_norm.weight)
        wqkv = src.attention.wqkv.weight
        dst.attention.wqkv.weight.copy_(torch.cat([wqkv[q_rows], wqkv[k_rows], wqkv[v_rows]]))
        dst.attention.wo = RowParallelLinear(src.attention.wo.weight[:, q_rows].clone().to(dev),
                                             group=group)
        w13 = src.feed_forward.w13.weight
        fd = cfg.ffn_dim
        dst.feed_forward.w13.weight.copy_(torch.cat([w13[ffn], w13[fd + ffn.start: fd + ffn.stop]]))
        dst.feed_forward.w2 = RowParallelLinear(src.feed_forward.w2.weight[:, ffn].clone().to(dev),
                                                group=group)


def check_tp_triton_step(rank: int, world_size: int, preset: str = "tiny", seed: int = 0) -> dict[str, Any]:
    """One decode step of the Triton kernels (decode_kernels, notebook 05) on this rank's shard,
    against the unsharded model's own step: logits' relative error (fp32) and greedy tokens."""
    from ..cuda_graphs.decode_kernels.step import TritonDecodeStep
    model = llama.Transformer.from_preset(preset, seed=seed, dtype=torch.float32)
    tp = shard_llama(model)
    caches = [llama.StaticKVCache(m.config, 2, 200) for m in (model, tp)]   # 200 keys: several slices
    prompts = torch.randint(0, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(seed))
    model.prefill(prompts, caches[0])
    tp.prefill(prompts, caches[1])
    tokens, positions = torch.tensor([3, 4]), torch.tensor([6, 2])
    want = model.decode(tokens, positions, caches[0])
    got = TritonDecodeStep(tp)(tokens, positions, caches[1])
    return {"logits_err": float((got - want).abs().max() / want.abs().max()),
            "tokens": got.argmax(-1).tolist(), "want": want.argmax(-1).tolist()}


def check_folded_exchange(rank: int, world_size: int, preset: str = "tiny", steps: int = 3, seed: int = 0) -> dict[str, Any]:
    """On GPUs (NCCL and symmetric memory): the Triton step with the sums folded into the products
    (decode_kernels/exchange.py) against the same kernels with an all-reduce after each product,
    uncaptured and replayed from a CUDA graph, fp32, `steps` steps each."""
    from ..cuda_graphs.decode_kernels.step import TritonDecodeStep
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.backends.cuda.matmul.allow_tf32 = False
    model = llama.Transformer.from_preset(preset, seed=seed, dtype=torch.float32).to(dev)
    tp = shard_llama(model)
    folded, reducing = TritonDecodeStep(tp), TritonDecodeStep(tp, exchange=None)
    if folded.exchange is None:
        from ..cuda_graphs.decode_kernels import exchange
        return {"folded": False, "why": exchange.why_not_folded}
    caches = [llama.StaticKVCache(tp.config, 2, 64, torch.float32, dev) for _ in range(2)]
    prompts = torch.randint(0, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(seed)).to(dev)
    for c in caches:
        tp.prefill(prompts, c)
    tokens = torch.tensor([3, 4], device=dev)
    positions = torch.tensor([6, 2], device=dev)
    equal, got = [], None
    for _ in range(steps):   # uncaptured: each step's flags wait for that step's pushes (epoch)
        got = folded(tokens, positions, caches[0]).clone()
        equal.append(torch.equal(got, reducing(tokens, positions, caches[1])))
        positions += 1
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = folded(tokens, positions, caches[0])
    replayed = []
    for _ in range(steps):
        graph.replay()
        replayed.append(torch.equal(out, reducing(tokens, positions, caches[1])))
        positions += 1
    torch.cuda.synchronize()
    folded.exchange.check()
    return {"folded": True, "uncaptured_equal": equal, "replayed_equal": replayed,
            "epoch": int(folded.exchange.epoch[0]), "tokens": got.argmax(-1).tolist()}


def check_tp_llama(rank: int, world_size: int, preset: str = "tiny", new_tokens: int = 8,
                   seed: int = 0) -> dict[str, Any]:
    """Greedy tokens and logits of the sharded course model against the unsharded one."""
    model = llama.Transformer.from_preset(preset, seed=seed, dtype=torch.float32)
    tp = shard_llama(model)
    torch.manual_seed(seed)
    prompts = torch.randint(0, model.config.vocab_size, (2, 7)).tolist()
    ref = llama.generate(model, prompts, new_tokens)
    got = llama.generate(tp, prompts, new_tokens)
    x = torch.tensor(prompts)
    with torch.no_grad():
        a, b = model(x), tp(x)
    return {"tokens_equal": ref == got, "tokens": got,
            "logits_err": float((a - b).abs().max() / a.abs().max())}

"""A candidate for issue 25, not yet measured: RoPE and the K/V append in the q/k/v product's store.

The Triton decode step (course_kit/decode_kernels/step.py) spends two kernels before attention:
`gemv(wqkv, prologue="norm")`, then `rope_append`. RoPE pairs element i of a head with element
i + D/2, which lie in rows D/2 apart of wqkv, so they land in different programs of the product.
Reordering the rows of wqkv once (each head's pairs made neighbours) puts both in one program:
its store can rotate them and write q, and k and v straight into the cache. One kernel fewer
per layer (16 for llama-1b), at the cost of a reordered copy of wqkv (about 8% of the weights).

This lives in scripts/ until the H200 says whether it pays (`decode_step_probe.py` times it as
the variant "qkv+rope in one kernel"); a kernel moves into the package only with its measurement.

    python scripts/decode_qkv_rope.py      # checks it against the package's step (interpreter on CPU)
"""
from __future__ import annotations

import torch

from course_kit.attention import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the kernel below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from course_kit.decode_kernels.gemv import NUM_WARPS, _sm_count, gemv_blocks, gemv_rows  # noqa: E402
from course_kit.decode_kernels.step import TritonDecodeStep  # noqa: E402


def pair_rows(n_heads: int, n_kv: int, head_dim: int) -> torch.Tensor:
    """The order of wqkv's rows that makes each RoPE pair (i, i + D/2) of the q and k heads
    neighbours (rows 2j, 2j + 1); the v rows keep their order."""
    half = head_dim // 2
    within = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
    rope = (torch.arange(n_heads + n_kv)[:, None] * head_dim + within[None, :]).flatten()
    v = torch.arange((n_heads + n_kv) * head_dim, (n_heads + 2 * n_kv) * head_dim)
    return torch.cat([rope, v])


@triton.jit
def _qkv_rope_kernel(W, X, NORM_W, POS, INV_FREQ, Q_OUT, K_CACHE, V_CACHE, N, K, stride_w, stride_x,
                     stride_qm, stride_cb, stride_ch, stride_cs, eps,
                     H: tl.constexpr, KV: tl.constexpr, D: tl.constexpr,
                     M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     PDL: tl.constexpr):
    pid = tl.program_id(0)
    DT: tl.constexpr = Q_OUT.dtype.element_ty
    acc, _ = gemv_rows(W, X, NORM_W, N, K, stride_w, stride_x, eps, DT, M, BLOCK_M, BLOCK_N, BLOCK_K, 1, PDL)
    ms = tl.arange(0, BLOCK_M)
    # the store: rows (2p, 2p + 1) hold the pair (x1[i], x2[i]) of one head (q or k), or two
    # neighbouring elements of a v head
    y = acc.to(DT).to(tl.float32)                  # the product rounded, as F.linear rounds it
    x1, x2 = tl.split(tl.reshape(y, [BLOCK_M, BLOCK_N // 2, 2]))
    r0 = pid * BLOCK_N + 2 * tl.arange(0, BLOCK_N // 2)
    head = r0 // D
    i = (r0 % D) // 2
    pos = tl.load(POS + ms, mask=ms < M, other=0)
    angle = pos[:, None].to(tl.float32) * tl.load(INV_FREQ + i)[None, :]
    cos = tl.cos(angle).to(DT).to(tl.float32)
    sin = tl.sin(angle).to(DT).to(tl.float32)
    r1 = ((x1 * cos).to(DT).to(tl.float32) - (x2 * sin).to(DT).to(tl.float32)).to(DT)
    r2 = ((x2 * cos).to(DT).to(tl.float32) + (x1 * sin).to(DT).to(tl.float32)).to(DT)
    valid = (ms[:, None] < M) & (r0 < N)[None, :]
    is_q = valid & (head < H)[None, :]
    q_at = Q_OUT + ms[:, None] * stride_qm + (head * D + i)[None, :]
    tl.store(q_at, r1, mask=is_q)
    tl.store(q_at + D // 2, r2, mask=is_q)
    slot = ms[:, None] * stride_cb + pos[:, None] * stride_cs
    is_k = valid & ((head >= H) & (head < H + KV))[None, :]
    k_at = K_CACHE + slot + ((head - H) * stride_ch + i)[None, :]
    tl.store(k_at, r1.to(K_CACHE.dtype.element_ty), mask=is_k)
    tl.store(k_at + D // 2, r2.to(K_CACHE.dtype.element_ty), mask=is_k)
    is_v = valid & (head >= H + KV)[None, :]
    v_at = V_CACHE + slot + ((head - H - KV) * stride_ch + r0 % D)[None, :]
    tl.store(v_at, x1.to(V_CACHE.dtype.element_ty), mask=is_v)
    tl.store(v_at + 1, x2.to(V_CACHE.dtype.element_ty), mask=is_v)


class QkvRopeStep(TritonDecodeStep):
    """TritonDecodeStep with `attention_inputs` in one kernel (wqkv's rows reordered once)."""

    def __init__(self, model, pdl: bool | None = None):
        super().__init__(model, pdl)
        cfg = model.config
        order = pair_rows(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim).to(self.device)
        self.wqkv = [layer.attention.wqkv.weight.detach()[order].contiguous() for layer in model.layers]

    def attention_inputs(self, i, x, positions, cache):
        cfg, w = self.model.config, self.wqkv[i]
        m, (n, k) = x.shape[0], w.shape
        q = torch.empty(m, cfg.n_heads, cfg.head_dim, dtype=x.dtype, device=x.device)
        kc, vc = cache.k[i], cache.v[i]
        block_n, block_k = gemv_blocks(n, k, _sm_count(x.device))
        _qkv_rope_kernel[(triton.cdiv(n, block_n),)](
            w, x, self.model.layers[i].attention_norm.weight, positions, self.model.inv_freq, q, kc, vc, n, k,
            w.stride(0), x.stride(0), q.stride(0), kc.stride(0), kc.stride(1), kc.stride(2), self.eps,
            H=cfg.n_heads, KV=cfg.n_kv_heads, D=cfg.head_dim, M=m, BLOCK_M=max(2, triton.next_power_of_2(m)),
            BLOCK_N=block_n, BLOCK_K=block_k, PDL=self.pdl, num_warps=NUM_WARPS,
            **({"launch_pdl": True} if self.pdl else {}))
        return q


def check(dtype: torch.dtype = torch.float32) -> float:
    """The fused step against the package's step on the same cache: relative logits error."""
    from course_kit.models import llama
    model = llama.Transformer.from_preset("tiny", seed=0, dtype=dtype)
    caches = [llama.StaticKVCache(model.config, 2, 64, dtype) for _ in range(2)]
    prompts = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    for c in caches:
        model.prefill(prompts, c)
    tokens, positions = torch.tensor([3, 4]), torch.tensor([6, 2])
    want = TritonDecodeStep(model)(tokens, positions, caches[0]).float()
    got = QkvRopeStep(model)(tokens, positions, caches[1]).float()
    torch.testing.assert_close(caches[1].k, caches[0].k, rtol=0, atol=0)
    torch.testing.assert_close(caches[1].v, caches[0].v, rtol=0, atol=0)
    return ((got - want).abs().max() / want.abs().max()).item()


if __name__ == "__main__":
    for dt in (torch.float32, torch.bfloat16):
        print(dt, "relative logits error against the package's step:", check(dt))

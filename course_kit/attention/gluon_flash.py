"""A warp-specialised flash-attention forward for Hopper, in Gluon (notebook 08).

triton_flash.py is the algorithm in Triton's block language: the compiler decides which warp does
what and when it waits. This is the same algorithm with those decisions written down, in Gluon,
Triton's lower-level language, in the shape of FlashAttention-3's kernel. One program (384
threads) owns 128 query rows of one head at a time and has three roles:

* **a loading warp** (`_load`) streams each work item's Q, then its K and V tiles (128 keys each)
  into a ring of shared-memory stages with TMA. Each stage has a "ready" barrier (the TMA bytes
  arrived) and an "empty" one (both computing warpgroups are done with it), so the loader runs
  ahead as far as the ring allows, and nothing waits on a whole-program barrier;
* **two computing warpgroups** (`_attend`, 4 warps each) take 64 of the 128 rows each and share
  every K/V tile: S = Q K^T and O += P V on the tensor cores (wgmma), the online softmax between;
* **they take turns at the tensor cores** (PINGPONG): a warpgroup issues its two products (P V
  of the last block, Q K^T of this one) only in its turn, hands the turn over, and runs its
  softmax while the other's products keep the tensor cores busy;
* **one persistent program an SM**, or one program a work item, whichever the first call at a
  shape measures faster (`programs`); with two Q buffers (Q_BUFFERS) the loader brings the next
  item's Q while this one computes; causal, persistent programs take their items in snake order
  (`persistent_order`), so each holds about as much work as the others;
* **registers go where the work is**: the loading warp gives most of its registers back
  (setmaxnreg) and the computing warpgroups take them.

The online softmax is `online_softmax_fold`'s (triton_softmax.py): base 2, float32 statistics,
P rounded to V's dtype for the second product. Gluon has no CPU interpreter: this kernel runs only
on an sm_90 GPU (tests/test_gluon_flash.py compiles it for sm_90 on a CPU and checks it against
float64 on a GPU). `attention` runs it where `gluon_usable` says it can, and the Triton kernel
everywhere else. It takes lengths that are multiples of 128, head dims 64 and 128, fp16/bf16,
causal or not, and GQA.
"""
from __future__ import annotations

import functools
import math

import torch

from .. import device as _device
from ..device import use_triton_interpreter_without_cuda

# Like every kernel module here, before Triton is first imported: the Triton kernels of the same
# process run through the interpreter without CUDA. Gluon itself cannot; compile_for_hopper
# compiles in a fresh Python with the interpreter off.
use_triton_interpreter_without_cuda()

try:   # Gluon arrived with Triton 3.5; older Tritons (Colab's) simply do not get this kernel
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                                  warpgroup_mma, warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor
    HAS_GLUON = True
    # Gluon is experimental and renames things between releases: Triton 3.6 (the H200's) has
    # async_copy_global_to_shared / async_copy_shared_to_global, later ones async_load / async_store.
    _tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
    _tma_store = tma.async_store if hasattr(tma, "async_store") else tma.async_copy_shared_to_global
except (ImportError, AttributeError):   # pragma: no cover - a Triton without Gluon, or an early Gluon
    HAS_GLUON = False

from .triton_softmax import LOG2E  # noqa: E402
from ..device import multiprocessors
LOG2E_ = gl.constexpr(LOG2E) if HAS_GLUON else LOG2E   # kernels read globals only as constexprs
from .gluon_schedule import (BLOCK_M, BLOCK_N, order_table, persistent_order,  # noqa: E402,F401
                             program_key_blocks)
STAGES = 2             # K/V tiles in flight; at head dim 128, with two Q buffers and O, 224 KB of shared memory
SUPPORTED_HEAD_DIMS = (64, 128)


if HAS_GLUON:
    @gluon.jit
    def _work(t, n_bh, n_tiles_m, n_q_heads, group, seq_q, seq_k, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              CAUSAL: gl.constexpr):
        """Work item t -> (its first row in the [B*H*S, D] views of Q and O, the first row of its K/V
        head, its first query, its key blocks, how many of them need no mask).

        Heads outermost: the programs running at one time work on few heads, whose K and V then
        stay in L2 for all of them. Within a head, the heaviest causal blocks (the last query
        blocks see the most keys) come first, so the light ones fill the tail.
        """
        off_bh = t // n_tiles_m
        if CAUSAL:
            start_m = n_tiles_m - 1 - t % n_tiles_m
        else:
            start_m = t % n_tiles_m
        off_b = off_bh // n_q_heads
        off_kvh = off_b * (n_q_heads // group) + (off_bh % n_q_heads) // group     # GQA
        first_query = start_m * BLOCK_M
        if CAUSAL:   # keys past the block's last query are never visible
            n_blocks = gl.cdiv(gl.minimum(first_query + BLOCK_M, seq_k), BLOCK_N)
            n_unmasked = gl.minimum(first_query, seq_k) // BLOCK_N
        else:
            n_blocks = seq_k // BLOCK_N
            n_unmasked = n_blocks
        return off_bh * seq_q + first_query, off_kvh * seq_k, first_query, n_blocks, n_unmasked

    @gluon.jit
    def _load(ORDER, q_desc, k_desc, v_desc, q_smem, q_ready, q_empty, k_smem, v_smem, k_ready, v_ready,
              kv_empty, n_tiles, n_bh, n_tiles_m, n_q_heads, group, seq_q, seq_k,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              Q_BUFFERS: gl.constexpr):
        """The loading warp. The i-th work item's Q goes to buffer i % Q_BUFFERS as soon as the item
        that used that buffer last is done with it (with two buffers, the next item's Q arrives
        while this one computes); its K and V tiles go round a ring, the program's c-th tile into
        stage c % STAGES."""
        BLOCK_H: gl.constexpr = BLOCK_M // 2
        c = 0
        i = 0
        for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
            q_row, kv_row, first_query, n_blocks, n_unmasked = _work(gl.load(ORDER + t), n_bh, n_tiles_m,
                                                                     n_q_heads, group, seq_q, seq_k, BLOCK_M,
                                                                     BLOCK_N, CAUSAL)
            # The r-th reuse of a slot waits for the r-th phase of its "empty" barrier. A fresh
            # barrier counts as having completed the phase before its first, so round 0 passes.
            buf = i % Q_BUFFERS
            mbarrier.wait(q_empty.index(buf), ((i // Q_BUFFERS) & 1) ^ 1)
            mbarrier.expect(q_ready.index(buf), 2 * q_desc.block_type.nbytes)
            _tma_load(q_desc, [q_row, 0], q_ready.index(buf), q_smem.index(2 * buf))
            _tma_load(q_desc, [q_row + BLOCK_H, 0], q_ready.index(buf), q_smem.index(2 * buf + 1))
            for j in range(n_blocks):
                stage = c % STAGES
                mbarrier.wait(kv_empty.index(stage), ((c // STAGES) & 1) ^ 1)
                mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
                _tma_load(k_desc, [kv_row + j * BLOCK_N, 0], k_ready.index(stage), k_smem.index(stage))
                mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
                _tma_load(v_desc, [kv_row + j * BLOCK_N, 0], v_ready.index(stage), v_smem.index(stage))
                c += 1
            i += 1

    @gluon.jit
    def _softmax(s, m_i, l_i, rows, j, masked, qk_scale, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
        """The online softmax of triton_softmax.online_softmax_fold, in base 2, for key block j's
        raw scores: returns P, the rescale alpha for what was summed so far, and the new (m, l).

        A masked block (the causal diagonal) only sets its hidden scores to -inf first, so every
        block runs the same code, which keeps the program short. The scale is positive, so the
        max commutes with it, and it is applied in one fused multiply-add a score.
        """
        if masked:
            cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            s = gl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        p = gl.exp2(s * qk_scale - m_new[:, None])
        alpha = gl.exp2(m_i - m_new)
        return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)

    @gluon.jit
    def _attend(ORDER, q_smem, q_ready, q_empty, k_smem, v_smem, k_ready, v_ready, kv_empty, turn, o_smem, o_desc,
                LSE, half, n_tiles, n_bh, n_tiles_m, n_q_heads, group, seq_q, seq_k, qk_scale,
                HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                CAUSAL: gl.constexpr, Q_BUFFERS: gl.constexpr, PINGPONG: gl.constexpr):
        """One computing warpgroup: query rows [half * 64, half * 64 + 64) of every work item,
        against each K/V tile the loader brings."""
        BLOCK_H: gl.constexpr = BLOCK_M // 2
        # wgmma's accumulator layouts: 4 warps stacked along the rows, one instruction spanning
        # the tile's width (scores: BLOCK_N keys; output: HEAD_DIM), k = 16 for 16-bit inputs.
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_DIM, 16])
        # P feeds the second product from registers, with no trip through shared memory
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        acc_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
        dtype: gl.constexpr = q_smem.dtype
        zeros_s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
        c = 0          # K/V tiles this program has used so far: tile c sits in ring stage c % STAGES
        i = 0          # work items so far: item i's Q sits in buffer i % Q_BUFFERS
        turns = 0      # PINGPONG: turns at the tensor cores so far
        for t in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
            q_row, kv_row, first_query, n_blocks, n_unmasked = _work(gl.load(ORDER + t), n_bh, n_tiles_m,
                                                                     n_q_heads, group, seq_q, seq_k, BLOCK_M,
                                                                     BLOCK_N, CAUSAL)
            q_row += half * BLOCK_H
            rows = first_query + half * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_layout)
            m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=row_layout)
            l_i = gl.full([BLOCK_H], 0.0, gl.float32, layout=row_layout)
            acc = gl.zeros([BLOCK_H, HEAD_DIM], gl.float32, layout=o_layout)
            buf = i % Q_BUFFERS
            q = q_smem.index(2 * buf + half)
            mbarrier.wait(q_ready.index(buf), (i // Q_BUFFERS) & 1)
            if PINGPONG:
                # The two warpgroups take turns at the tensor cores: each issues its products
                # (P V of the last block and Q K^T of this one, back to back) only in its turn,
                # then hands the turn over and runs its softmax while the other's products run.
                # Warpgroup 0 goes first: its first wait is on a fresh barrier's "previous" phase.
                mbarrier.wait(turn.index(half), (turns & 1) ^ (1 - half))
                mbarrier.wait(k_ready.index(c % STAGES), (c // STAGES) & 1)
                s_tok = warpgroup_mma(q, k_smem.index(c % STAGES).permute((1, 0)), zeros_s, use_acc=False,
                                      is_async=True)
                mbarrier.arrive(turn.index(1 - half), count=1)
                s = warpgroup_mma_wait(0, deps=(s_tok, ))
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, rows, 0, n_unmasked == 0, qk_scale, BLOCK_N, s_layout)
                for j in range(1, n_blocks):
                    prev = c + j - 1
                    cur = c + j
                    p_op = gl.convert_layout(p.to(dtype), p_layout)
                    mbarrier.wait(turn.index(half), ((turns + j) & 1) ^ (1 - half))
                    mbarrier.wait(v_ready.index(prev % STAGES), (prev // STAGES) & 1)
                    o_tok = warpgroup_mma(p_op, v_smem.index(prev % STAGES), acc, is_async=True)
                    mbarrier.wait(k_ready.index(cur % STAGES), (cur // STAGES) & 1)
                    s_tok = warpgroup_mma(q, k_smem.index(cur % STAGES).permute((1, 0)), zeros_s, use_acc=False,
                                          is_async=True)
                    mbarrier.arrive(turn.index(1 - half), count=1)
                    acc, p_op, s = warpgroup_mma_wait(0, deps=(o_tok, p_op, s_tok))
                    mbarrier.arrive(kv_empty.index(prev % STAGES), count=1)   # K and V of block j-1 are free
                    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, rows, j, j >= n_unmasked, qk_scale, BLOCK_N,
                                                  s_layout)
                    acc = acc * gl.convert_layout(alpha, acc_rows)[:, None]
                last = c + n_blocks - 1
                p_op = gl.convert_layout(p.to(dtype), p_layout)
                mbarrier.wait(turn.index(half), ((turns + n_blocks) & 1) ^ (1 - half))
                mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
                o_tok = warpgroup_mma(p_op, v_smem.index(last % STAGES), acc, is_async=True)
                mbarrier.arrive(turn.index(1 - half), count=1)
                acc, p_op = warpgroup_mma_wait(0, deps=(o_tok, p_op))
                mbarrier.arrive(kv_empty.index(last % STAGES), count=1)
                turns += n_blocks + 1
            else:
                for j in range(n_blocks):
                    stage = (c + j) % STAGES
                    phase = ((c + j) // STAGES) & 1
                    mbarrier.wait(k_ready.index(stage), phase)
                    s = warpgroup_mma(q, k_smem.index(stage).permute((1, 0)), zeros_s, use_acc=False, is_async=True)
                    s = warpgroup_mma_wait(0, deps=(s, ))
                    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, rows, j, j >= n_unmasked, qk_scale, BLOCK_N,
                                                  s_layout)
                    acc = acc * gl.convert_layout(alpha, acc_rows)[:, None]
                    p_op = gl.convert_layout(p.to(dtype), p_layout)
                    mbarrier.wait(v_ready.index(stage), phase)
                    o_tok = warpgroup_mma(p_op, v_smem.index(stage), acc, is_async=True)
                    acc, p_op = warpgroup_mma_wait(0, deps=(o_tok, p_op))
                    mbarrier.arrive(kv_empty.index(stage), count=1)     # K and V of this stage are free
            mbarrier.arrive(q_empty.index(buf), count=1)                # and so is this Q

            acc = acc / gl.convert_layout(l_i, acc_rows)[:, None]
            # natural-log LSE, what a backward pass recomputes P from (as triton_flash writes it)
            gl.store(LSE + q_row + gl.arange(0, BLOCK_H, layout=row_layout), (m_i + gl.log2(l_i)) / LOG2E_)
            tma.store_wait(0)              # the previous item's output has left o_smem
            o_smem.store(acc.to(dtype))
            fence_async_shared()
            _tma_store(o_desc, [q_row, 0], o_smem)
            c += n_blocks
            i += 1
        tma.store_wait(0)

    @gluon.jit
    def _gluon_flash_fwd(ORDER, q_desc, k_desc, v_desc, o_desc, LSE, seq_q, seq_k, n_q_heads, group, n_bh,
                         qk_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                         STAGES: gl.constexpr, CAUSAL: gl.constexpr, Q_BUFFERS: gl.constexpr,
                         PINGPONG: gl.constexpr):
        """Program p takes the work items in slots p, p + programs, ... of ORDER (persistent_order's
        table): one each when launched one program per item, or a share of them when launched one
        program an SM (persistent)."""
        BLOCK_H: gl.constexpr = BLOCK_M // 2
        n_tiles_m = seq_q // BLOCK_M
        n_tiles = n_tiles_m * n_bh
        dtype: gl.constexpr = q_desc.dtype
        # shared memory at head dim 128: Q 2 items x 32 KB, O 32 KB, K and V 2 stages x 64 KB: 224 KB
        q_smem = gl.allocate_shared_memory(dtype, [2 * Q_BUFFERS, BLOCK_H, HEAD_DIM], q_desc.layout)
        o_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_H, HEAD_DIM], o_desc.layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_ready = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(Q_BUFFERS):
            mbarrier.init(q_ready.index(b), count=1)
            mbarrier.init(q_empty.index(b), count=2)        # one arrival from each computing warpgroup
        for b in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(b), count=1)
            mbarrier.init(v_ready.index(b), count=1)
            mbarrier.init(kv_empty.index(b), count=2)
        for b in gl.static_range(2):
            mbarrier.init(turn.index(b), count=1)
        fence_async_shared()

        gl.warp_specialize([
            (_attend, (ORDER, q_smem, q_ready, q_empty, k_smem, v_smem, k_ready, v_ready, kv_empty, turn,
                       o_smem.index(0), o_desc, LSE, 0, n_tiles, n_bh, n_tiles_m, n_q_heads, group, seq_q, seq_k,
                       qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL, Q_BUFFERS, PINGPONG)),
            (_attend, (ORDER, q_smem, q_ready, q_empty, k_smem, v_smem, k_ready, v_ready, kv_empty, turn,
                       o_smem.index(1), o_desc, LSE, 1, n_tiles, n_bh, n_tiles_m, n_q_heads, group, seq_q, seq_k,
                       qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL, Q_BUFFERS, PINGPONG)),
            (_load, (ORDER, q_desc, k_desc, v_desc, q_smem, q_ready, q_empty, k_smem, v_smem, k_ready, v_ready,
                     kv_empty, n_tiles, n_bh, n_tiles_m, n_q_heads, group, seq_q, seq_k, BLOCK_M, BLOCK_N, STAGES,
                     CAUSAL, Q_BUFFERS)),
        ], [4, 1], [240, 24])


def gluon_usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[bool, str]:
    """Whether this kernel can run on these tensors, with the reason if not."""
    if not HAS_GLUON:
        return False, "this Triton has no Gluon (Triton >= 3.5)"
    if not q.is_cuda or _device.current_capability() != (9, 0):
        return False, "wgmma needs an sm_90 GPU (Hopper)"
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        return False, f"dtype {q.dtype}: float16 or bfloat16 only"
    if q.shape[3] not in SUPPORTED_HEAD_DIMS:
        return False, f"head dim {q.shape[3]}: one of {SUPPORTED_HEAD_DIMS} only"
    if q.shape[2] % BLOCK_M or k.shape[2] % BLOCK_N:
        return False, f"lengths {q.shape[2]}, {k.shape[2]}: multiples of {BLOCK_M} only"
    return True, "ok"


def runs_here(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this kernel runs on `device` for `dtype`, at a shape it takes."""
    probe = torch.empty(1, 1, BLOCK_M, SUPPORTED_HEAD_DIMS[0], device=device, dtype=dtype)
    return gluon_usable(probe, probe, probe)[0]


@functools.lru_cache(maxsize=None)
def _tile_layout(block_rows: int, head_dim: int, dtype: torch.dtype) -> "gl.NVMMASharedLayout":
    """The shared-memory layout of a [block_rows, head_dim] tile. Built once per tile shape: Gluon
    works it out in Python, and at short lengths, where a call's time is the host's, building it
    for all four descriptors on every call was a large part of that time."""
    gl_dtype = gl.float16 if dtype == torch.float16 else gl.bfloat16
    return gl.NVMMASharedLayout.get_default_for([block_rows, head_dim], gl_dtype)


def _descriptor(t: torch.Tensor, block_rows: int) -> "GluonDescriptor":
    """A TMA descriptor over the [B*H*S, D] view of t, read in [block_rows, D] tiles."""
    flat = t.view(-1, t.shape[-1])
    return GluonDescriptor(flat, list(flat.shape), list(flat.stride()), [block_rows, flat.shape[1]],
                           _tile_layout(block_rows, flat.shape[1], t.dtype))


def gluon_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                          scale: float | None = None, programs: int | None = None, q_buffers: int = 2,
                          pingpong: bool = True, snake: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward on [B, H, S, D] tensors (K/V heads dividing H); returns O and the natural-log LSE.

    programs: how many programs to launch (None: the faster of one an SM and one a work item,
    measured at the first call for this shape); q_buffers 1 or 2; pingpong: the computing
    warpgroups take turns at the tensor cores; snake: persistent programs take their items in
    snake order (`persistent_order`), else round-robin (None: snake order when causal, where the
    items' work differs; with equal items it balances nothing, and measured slower). These are
    the steps notebook 08 times.
    """
    usable, reason = gluon_usable(q, k, v)
    if not usable:
        raise ValueError(f"the Gluon kernel cannot run here: {reason}")
    if q_buffers not in (1, 2):
        raise ValueError(f"q_buffers must be 1 or 2; got {q_buffers}")
    if programs is not None and programs < 1:
        raise ValueError(f"programs must be >= 1; got {programs}")
    batch, n_q_heads, seq_q, head_dim = q.shape
    n_kv_heads, seq_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if not scale > 0:
        raise ValueError(f"scale must be > 0; got {scale}")
    snake = causal if snake is None else snake
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty((batch, n_q_heads, seq_q), dtype=torch.float32, device=q.device)
    descs = (_descriptor(q, BLOCK_M // 2), _descriptor(k, BLOCK_N), _descriptor(v, BLOCK_N),
             _descriptor(out, BLOCK_M // 2))
    n_items = seq_q // BLOCK_M * batch * n_q_heads

    def launch(n_programs: int) -> None:
        n_programs = min(n_programs, n_items)
        _gluon_flash_fwd[(n_programs, )](
            order_table(n_items, n_programs, snake, q.device), *descs, lse, seq_q, seq_k, n_q_heads,
            n_q_heads // n_kv_heads, batch * n_q_heads, scale * LOG2E,
            HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, STAGES=STAGES, CAUSAL=causal,
            Q_BUFFERS=q_buffers, PINGPONG=pingpong, num_warps=4)

    if programs is None:
        key = (seq_q, seq_k, batch * n_q_heads, n_kv_heads, head_dim, causal, q.dtype, q_buffers, pingpong,
               snake, q.device)
        if key not in _chosen_programs:
            sms = multiprocessors(q.device)
            _chosen_programs[key] = _faster(launch, (sms, n_items), q.device)
        programs = _chosen_programs[key]
    launch(programs)
    return out, lse


# programs per shape, as measured at its first call (the autotuner's `_chosen` in triton_flash)
_chosen_programs: dict[tuple, int] = {}


def chosen_programs(seq_len: int, batch_heads: int, head_dim: int, causal: bool) -> int | None:
    """How many programs the default kernel (two Q buffers, ping-pong, snake order when causal)
    launches at this shape, as its first call there measured; None before any."""
    default = (seq_len, batch_heads, head_dim, causal, 2, True, causal)
    for key, programs in _chosen_programs.items():
        if (key[0], key[2], key[4], key[5], *key[7:10]) == default:
            return programs
    return None


def _faster(launch, choices: tuple[int, ...], device: torch.device) -> int:
    """The choice of program count whose launches take least time (bench.timeit's median: CUDA
    events on a GPU)."""
    from .. import bench
    return min(choices, key=lambda n: bench.timeit(lambda: launch(n), warmup=1, repeat=5, device=device).median_s)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """The course's fastest forward for these tensors: this kernel where `gluon_usable` allows,
    else triton_flash.flash_attention (which also runs on CPUs through the interpreter)."""
    global gluon_failed
    if gluon_failed is None and gluon_usable(q, k, v)[0]:
        try:
            return gluon_flash_attention(q, k, v, causal=causal, scale=scale)[0]
        except ValueError:        # a bad argument, which the Triton kernel would refuse too
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. a Gluon older than this kernel: fall back for good
            gluon_failed = f"{type(exc).__name__}: {exc}"[:300]
    from .triton_flash import flash_attention
    return flash_attention(q, k, v, causal=causal, scale=scale)


gluon_failed: str | None = None   # why `attention` stopped trying this kernel, if it did

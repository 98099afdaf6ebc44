"""A flash-attention forward kernel in Triton.

The algorithm is tiled.py's, run by one Triton program per (query block, batch x head):

* the program loads its BLOCK_M queries once and keeps them on chip;
* it streams the keys and values in blocks of BLOCK_N, computing scores, the online-softmax
  rescale and the running output in registers: the S x S matrix never reaches memory;
* it writes BLOCK_M output rows and their log-sum-exp (from which triton_flash_bwd recomputes P).

Choices that matter for speed, each explained where it is made below: exp2 with log2(e) folded
into the scale, causal work split into unmasked and masked (diagonal) phases, heavy causal blocks
scheduled first, float32 accumulators with bf16/fp16 tensor-core inputs, TMA tensor descriptors
where the GPU and Triton have them (built once on the host for long sequences, by each program for
short ones), and a short autotune list keyed on the shape, whose pick is then launched directly.

On a machine without CUDA, importing this module sets TRITON_INTERPRET=1 before its kernels are
defined, and the same kernel runs on CPU tensors through Triton's interpreter (slowly: use small
shapes).
"""
from __future__ import annotations

import math

import torch

from .. import device as _device
from ..device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .triton_softmax import LOG2E, interpreting, mma, online_softmax_fold  # noqa: E402,F401
from .triton_flash_configs import (_CONFIGS, _INTERPRETER_BLOCKS, HOST_DESCRIPTORS_FROM,  # noqa: E402,F401
                                   _prune_configs, _set_host_blocks, bh_bucket, seq_bucket)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128)
LOADERS = ("auto", "pointer", "descriptor")


# Device-side TMA descriptors arrived with Triton 3.3/3.4; older Tritons (Colab) use plain pointers.
HAS_DESCRIPTORS = hasattr(tl, "make_tensor_descriptor")
from .triton_flash_configs import TensorDescriptor  # noqa: E402  (None in Tritons before 3.4)

# How K/V (and Q) tiles are loaded, the kernel's USE_DESC constexpr:
POINTER, DEVICE_DESC, HOST_DESC = 0, 1, 2


if HAS_DESCRIPTORS:
    @triton.jit
    def _tensor_desc(base, rows, row_stride, BLOCK_R: tl.constexpr, HEAD_DIM: tl.constexpr):
        """A [rows, HEAD_DIM] TMA descriptor that loads [BLOCK_R, HEAD_DIM] tiles."""
        return tl.make_tensor_descriptor(base, shape=[rows, HEAD_DIM], strides=[row_stride, 1],
                                         block_shape=[BLOCK_R, HEAD_DIM])
else:
    @triton.jit
    def _tensor_desc(base, rows, row_stride, BLOCK_R: tl.constexpr, HEAD_DIM: tl.constexpr):
        # Older Tritons scan every attribute a kernel names, even in branches that are never
        # compiled, so `tl.make_tensor_descriptor` must not appear in their kernels at all. This
        # stand-in is never traced: the descriptor loader is refused before any launch.
        return base


@triton.jit
def _load_tile(ptrs, desc, off_b, off_h, row, rows_valid,
               BLOCK_R: tl.constexpr, HEAD_DIM: tl.constexpr, USE_DESC: tl.constexpr, MASKED: tl.constexpr):
    """One [BLOCK_R, HEAD_DIM] tile starting at sequence row `row`.

    POINTER: plain loads from `ptrs`, masked past `rows_valid` when MASKED. DEVICE_DESC: a per-(batch,
    head) 2-D descriptor. HOST_DESC: one 4-D [B, H, S, D] descriptor built on the host, indexed by
    (batch, head). TMA zero-fills rows past the sequence either way, so descriptors need no mask.
    """
    if USE_DESC == 2:
        return desc.load([off_b, off_h, row, 0]).reshape(BLOCK_R, HEAD_DIM)
    elif USE_DESC == 1:
        return desc.load([row, 0])
    elif MASKED:
        return tl.load(ptrs, mask=rows_valid[:, None], other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def _fold_key_block(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, off_b, off_kvh, start_n, offs_m,
                    offs_d, stride_ks, stride_vs, seq_k, qk_scale,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                    MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_DESC: tl.constexpr, DOT_F32: tl.constexpr):
    """Fold the key block at `start_n` into the running (acc, l_i, m_i) of one query block."""
    start_n = tl.multiple_of(start_n, BLOCK_N)
    # -- load K and V for this block (TMA: one instruction per tile, zero-filled past seq_k) ------
    rows = start_n + tl.arange(0, BLOCK_N)
    k = _load_tile(k_base + rows[:, None] * stride_ks + offs_d[None, :], k_desc, off_b, off_kvh, start_n,
                   rows < seq_k, BLOCK_N, HEAD_DIM, USE_DESC, MASKED)
    v = _load_tile(v_base + rows[:, None] * stride_vs + offs_d[None, :], v_desc, off_b, off_kvh, start_n,
                   rows < seq_k, BLOCK_N, HEAD_DIM, USE_DESC, MASKED)
    # -- scores, in float32 on the tensor cores -------------------------------------------------
    qk = mma(q, tl.trans(k), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), DOT_F32)
    # -- online softmax in base 2: qk_scale already holds softmax_scale * log2(e) ---------------
    if MASKED:
        keep = rows[None, :] < seq_k
        if CAUSAL:
            keep = keep & (rows[None, :] <= offs_m[:, None])
        # -inf never meets -inf here: the first masked block holds key 0, which every row may
        # see, or an unmasked block already ran, so m_i is finite before any all-masked row.
        return online_softmax_fold(acc, l_i, m_i, qk, keep, v, qk_scale, True, DOT_F32)
    else:
        return online_softmax_fold(acc, l_i, m_i, qk, None, v, qk_scale, False, DOT_F32)


@triton.jit
def _flash_attend_blocks(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, off_b, off_kvh, lo, hi, offs_m,
                         offs_d, stride_ks, stride_vs, seq_k, qk_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                         MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_DESC: tl.constexpr, DOT_F32: tl.constexpr):
    """Fold key blocks [lo, hi) into the running (acc, l_i, m_i) of one query block.

    MASKED=False is the hot loop: every key in range is valid for every query, so no comparisons
    and no bounds checks are spent. MASKED=True handles the few blocks that straddle the causal
    diagonal or the ragged end of the sequence. The softmax itself is `online_softmax_fold`
    (triton_softmax.py), shared with the engine's paged kernels.
    """
    for start_n in range(lo, hi, BLOCK_N):
        acc, l_i, m_i = _fold_key_block(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, off_b, off_kvh,
                                        start_n, offs_m, offs_d, stride_ks, stride_vs, seq_k, qk_scale,
                                        BLOCK_M, BLOCK_N, HEAD_DIM, MASKED, CAUSAL, USE_DESC, DOT_F32)
    return acc, l_i, m_i


@triton.jit
def _flash_fwd_kernel(Q, K, V, O, LSE, Q_DESC, K_DESC, V_DESC,
                      stride_qb, stride_qh, stride_qs,
                      stride_kb, stride_kh, stride_ks,
                      stride_vb, stride_vh, stride_vs,
                      stride_ob, stride_oh, stride_os,
                      n_q_heads, group, seq_q, seq_k, qk_scale, seq_bucket, bh_bucket,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      CAUSAL: tl.constexpr, USE_DESC: tl.constexpr, DOT_F32: tl.constexpr):
    # (seq_bucket and bh_bucket are not read here: they are the autotuner's keys; Q_DESC, K_DESC and
    # V_DESC are the host's 4-D descriptors when USE_DESC == HOST_DESC, unused placeholders otherwise)
    # -- which tile am I? -----------------------------------------------------------------------
    # Under a causal mask, query block i does i+1 blocks of work. Launching the last (heaviest)
    # blocks first lets the light ones fill the gaps at the end instead of leaving a long tail.
    pid_m = tl.program_id(0)
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - pid_m
    else:
        start_m = pid_m
    off_bh = tl.program_id(1)
    off_b = off_bh // n_q_heads
    off_h = off_bh % n_q_heads
    off_kvh = off_h // group                  # GQA: `group` query heads share one K/V head

    q_base = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    k_base = K + off_b.to(tl.int64) * stride_kb + off_kvh.to(tl.int64) * stride_kh
    v_base = V + off_b.to(tl.int64) * stride_vb + off_kvh.to(tl.int64) * stride_vh
    o_base = O + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)

    # -- load the query block once; it stays in registers for the whole key loop --------------
    if USE_DESC == 1:
        # Descriptors per (batch, head) with the true sequence length as their shape: TMA then
        # zero-fills rows past the end, so ragged lengths need no masks on the loads.
        k_desc = _tensor_desc(k_base, seq_k, stride_ks, BLOCK_N, HEAD_DIM)
        v_desc = _tensor_desc(v_base, seq_k, stride_vs, BLOCK_N, HEAD_DIM)
        q = _tensor_desc(q_base, seq_q, stride_qs, BLOCK_M, HEAD_DIM).load([start_m * BLOCK_M, 0])
    else:
        k_desc = K_DESC   # the host's descriptors, or unused placeholders for the pointer loader
        v_desc = V_DESC
        q = _load_tile(q_base + offs_m[:, None] * stride_qs + offs_d[None, :], Q_DESC, off_b, off_h,
                       start_m * BLOCK_M, offs_m < seq_q, BLOCK_M, HEAD_DIM, USE_DESC, True)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # -- split the keys into an unmasked phase and a masked phase -------------------------------
    # Causal (top-left aligned, key j visible to query i iff j <= i): keys below this block's
    # first query are visible to all of its rows, keys past its last query to none of them.
    if CAUSAL:
        kv_end = tl.minimum(seq_k, (start_m + 1) * BLOCK_M)
        full_end = tl.minimum(seq_k, start_m * BLOCK_M)
    else:
        kv_end = seq_k
        full_end = seq_k
    full_end = (full_end // BLOCK_N) * BLOCK_N          # whole blocks only; the rest is masked

    acc, l_i, m_i = _flash_attend_blocks(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, off_b, off_kvh,
                                         0, full_end, offs_m, offs_d, stride_ks, stride_vs, seq_k, qk_scale,
                                         BLOCK_M, BLOCK_N, HEAD_DIM, False, CAUSAL, USE_DESC, DOT_F32)
    acc, l_i, m_i = _flash_attend_blocks(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, off_b, off_kvh,
                                         full_end, kv_end, offs_m, offs_d, stride_ks, stride_vs, seq_k, qk_scale,
                                         BLOCK_M, BLOCK_N, HEAD_DIM, True, CAUSAL, USE_DESC, DOT_F32)

    # -- epilogue: normalise once, store the rows that exist -----------------------------------
    acc = acc / l_i[:, None]
    # log-sum-exp of the scaled scores in natural log, what a backward pass recomputes P from
    lse = (m_i + tl.math.log2(l_i)) / 1.4426950408889634     # log2(e): kernels read no Python globals
    tl.store(LSE + off_bh.to(tl.int64) * seq_q + offs_m, lse, mask=offs_m < seq_q)
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=offs_m[:, None] < seq_q)


# -- launch configurations: measured on the H200, in triton_flash_configs.py ----------------------
for _config in _CONFIGS:
    _config.pre_hook = _set_host_blocks

_flash_fwd_tuned = triton.autotune(configs=_CONFIGS, key=["seq_bucket", "bh_bucket", "HEAD_DIM", "CAUSAL", "USE_DESC"],
                                   prune_configs_by={"early_config_prune": _prune_configs})(_flash_fwd_kernel)
# The autotuner's pick per key, kept here so that later calls launch the kernel directly: the
# autotuner's own dispatch costs host time on every call, which short launches cannot hide.
_chosen: dict[tuple, dict] = {}

_descriptor_failed: str | None = None   # set when a descriptor launch fails, so "auto" stops trying


def _tma_alloc(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def descriptor_usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[bool, str]:
    """Whether the TMA-descriptor loader can run on these tensors, with the reason if not."""
    if not HAS_DESCRIPTORS:
        return False, f"triton {triton.__version__} has no tl.make_tensor_descriptor"
    if interpreting():
        return True, "interpreter"
    if not q.is_cuda or (_device.current_capability() or (0, 0)) < (9, 0):
        return False, "TMA needs a Hopper-class GPU (sm_90+)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        # TMA wants 16-byte aligned bases and strides (every dim but the last, which is 1)
        if t.data_ptr() % 16 or any((t.stride(i) * t.element_size()) % 16 for i in range(3)):
            return False, f"{name} is not 16-byte aligned for TMA"
    return True, "ok"


def descriptor_kind(seq_len: int) -> int:
    """HOST_DESC or DEVICE_DESC for loader="descriptor" at this length (see HOST_DESCRIPTORS_FROM)."""
    if TensorDescriptor is None or seq_len < HOST_DESCRIPTORS_FROM:
        return DEVICE_DESC
    return HOST_DESC


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, H, S, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")
    if q.dtype not in SUPPORTED_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"dtype must be one of {SUPPORTED_DTYPES} for q, k and v; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[3] not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head dim must be one of {SUPPORTED_HEAD_DIMS}; got {q.shape[3]}")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ValueError(f"sequence lengths must be >= 1; got q {q.shape[2]}, k {k.shape[2]}")
    if not q.is_cuda and not interpreting():
        raise ValueError("CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 before the kernels are "
                         "defined (importing course_kit.attention.triton_flash does this when there is no CUDA)")
    if q.is_cuda and q.dtype == torch.bfloat16 and (_device.current_capability() or (0, 0)) < (8, 0):
        raise ValueError("bfloat16 tensor cores need sm_80 or newer; use torch.float16 on this GPU")


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None, loader: str = "auto", return_lse: bool = False,
                    block_m: int | None = None, block_n: int | None = None):
    """Flash-attention forward. q: [B, Hq, Sq, D]; k, v: [B, Hkv, Sk, D] with Hkv dividing Hq (GQA).

    dtype float16 or bfloat16; D in SUPPORTED_HEAD_DIMS; any lengths; causal is top-left aligned
    like SDPA's is_causal. loader: "pointer" (plain loads, every Triton), "descriptor" (TMA,
    Hopper + Triton >= 3.4), or "auto" (descriptor where usable, else pointer). block_m/block_n pin
    a configuration instead of autotuning. Returns O (and the natural-log LSE [B, Hq, Sq] float32).
    """
    global _descriptor_failed
    _check(q, k, v)
    if loader not in LOADERS:
        raise ValueError(f"loader must be one of {LOADERS}; got {loader!r}")
    if (block_m is None) != (block_n is None):
        raise ValueError(f"give both block_m and block_n or neither; got {block_m}, {block_n}")
    if loader == "pointer":
        use_desc = False
    else:
        usable, reason = descriptor_usable(q, k, v)
        if loader == "descriptor" and not usable:
            raise ValueError(f"loader='descriptor' is not available here: {reason}")
        use_desc = loader == "descriptor" or (usable and q.is_cuda and _descriptor_failed is None)
    desc = descriptor_kind(max(q.shape[2], k.shape[2])) if use_desc else POINTER
    pin = None
    if block_m is not None:
        # the same launch settings as the matching autotune config
        pin = {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": 8 if block_m >= 128 else 4,
               "num_stages": 3 if block_m >= 128 else 2}
    if desc != POINTER and loader == "auto":
        try:
            out, lse = launch_forward(q, k, v, causal=causal, scale=scale, desc=desc, config=pin)
        except Exception as exc:  # noqa: BLE001 - any compile/launch failure: fall back for good
            _descriptor_failed = f"{type(exc).__name__}: {exc}"[:300]
            out, lse = launch_forward(q, k, v, causal=causal, scale=scale, desc=POINTER, config=pin)
    else:
        out, lse = launch_forward(q, k, v, causal=causal, scale=scale, desc=desc, config=pin)
    return (out, lse) if return_lse else out


def launch_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float | None,
                   desc: int = POINTER, config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One launch of the forward kernel with a loader (POINTER, DEVICE_DESC, HOST_DESC) chosen.

    config pins BLOCK_M, BLOCK_N, num_warps, num_stages (and optionally maxnreg) instead of
    autotuning; the interpreter always runs one small fixed config. `flash_attention` checks the
    arguments and picks the loader; scripts/attn_tune.py calls this directly.
    """
    # the kernel assumes unit stride along the head dim (vectorised loads, TMA's last dim)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    batch, n_q_heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if not scale > 0:   # the kernel takes row maxima of unscaled scores, valid for a positive scale only
        raise ValueError(f"scale must be > 0; got {scale}")
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((batch, n_q_heads, seq_q), dtype=torch.float32, device=q.device)
    interp = interpreting()
    if interp:
        config = {"BLOCK_M": _INTERPRETER_BLOCKS[0], "BLOCK_N": _INTERPRETER_BLOCKS[1], "num_warps": 4,
                  "num_stages": 2}
    descs = (q, k, v)        # placeholders unless the host builds descriptors
    if desc == HOST_DESC:
        # one 4-D [B, H, S, D] descriptor per tensor; its tile is [1, 1, rows, D], set per config
        descs = tuple(TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, 16, head_dim]) for t in (q, k, v))
    elif desc == DEVICE_DESC and q.is_cuda and hasattr(triton, "set_allocator"):
        triton.set_allocator(_tma_alloc)   # device-side descriptors live in a scratch buffer
    buckets = (seq_bucket(max(seq_q, seq_k)), bh_bucket(batch * n_q_heads))
    args = (q, k, v, out, lse, *descs,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
            n_q_heads, n_q_heads // k.shape[1], seq_q, seq_k, scale * LOG2E, *buckets)
    flags = dict(HEAD_DIM=head_dim, CAUSAL=causal, USE_DESC=desc, DOT_F32=interp)
    key = (*buckets, head_dim, causal, desc, q.dtype, q.device)
    if config is None:
        config = _chosen.get(key)
    if config is not None:
        blocks = {"BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"]}
        _set_host_blocks({"Q_DESC": descs[0], "K_DESC": descs[1], "V_DESC": descs[2], "HEAD_DIM": head_dim, **blocks})
        launch = {name: config[name] for name in ("num_warps", "num_stages", "maxnreg") if config.get(name)}
        grid = (triton.cdiv(seq_q, config["BLOCK_M"]), batch * n_q_heads)
        _flash_fwd_kernel[grid](*args, **flags, **blocks, **launch)
    else:
        grid = lambda meta: (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * n_q_heads)  # noqa: E731
        _flash_fwd_tuned[grid](*args, **flags)
        best = getattr(_flash_fwd_tuned, "best_config", None)
        if best is not None:
            _chosen[key] = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
    return out, lse


def chosen_config(causal: bool, head_dim: int, loader: str = "pointer", seq_len: int = 4096,
                  batch_heads: int = 64) -> dict | None:
    """The autotuner's pick for these flags and shape (None before any autotuned GPU run)."""
    desc = descriptor_kind(seq_len) if loader == "descriptor" else POINTER
    for key, cfg in _chosen.items():
        # the key is (seq_bucket, bh_bucket, HEAD_DIM, CAUSAL, USE_DESC, dtype, device)
        if tuple(key[:5]) == (seq_bucket(seq_len), bh_bucket(batch_heads), head_dim, causal, desc):
            return dict(cfg)
    return None

"""How many HBM accesses attention needs: standard against flash (Dao et al. 2022, Theorem 2).

For one head with sequence length N, head dim d and an on-chip SRAM of M elements (d <= M <= Nd),
FlashAttention (Dao, Fu, Ermon, Rudra, Ré, NeurIPS 2022) states:

- Theorem 2: standard attention (Algorithm 0) needs Θ(N·d + N²) HBM accesses (it writes and reads
  the N x N matrices S and P); FlashAttention (Algorithm 1) needs Θ(N²·d²/M).
  In Algorithm 1 the *outer* loop loads each block K_j, V_j once (2Nd in all); the inner loop then
  reads Q_i, O_i, ℓ_i, m_i and writes O_i, ℓ_i, m_i back for every query block. So Q and O are
  re-read and re-written T_c = ⌈N/B_c⌉ times, with B_c = ⌈M/4d⌉: T_c ≈ 4Nd/M passes of Θ(Nd)
  each, Θ(N²d²/M) in all (the proof of Theorem 2 counts exactly these passes).
- Proposition 3: no exact attention algorithm makes o(N²d²/M) HBM accesses for all M in [d, Nd]:
  the lower bound, which Algorithm 1 meets up to a constant.

The ratio of the two Θ forms is (Nd + N²) / (N²d²/M) = M/(Nd) + M/d²: it *falls* as N grows and
levels off at M/d² (`theta_ratio`, `theta_ratio_limit`). Since d² is smaller than M for usual shapes
(128² = 16,384 against ~10⁵ elements of shared memory per SM), flash attention moves fewer bytes,
by a factor that tends to a constant rather than growing with N. The exact counts below level off
too, at 4·B_c/(3d + 4) ≈ M/(3d²) without a mask (`flash_ratio_limit`): standard attention's 4N²
against Algorithm 1's T_c·(3Nd + 4N). Notebook 08's exercise 08.causal_traffic finds the same for the course's
kernel. The functions count the accesses exactly, element by element, for the algorithms as
written:

- `standard_accesses`: the paper's Algorithm 0 (S = QKᵀ written, read for the softmax, P written,
  read for PV); causal adds naive.py's masking pass (S read and written once more);
- `flash_accesses`: the paper's Algorithm 1 (outer loop over K/V blocks, each loaded once; O, ℓ, m
  re-read and re-written for every one), with its block sizes B_c = ⌈M/4d⌉, B_r = min(⌈M/4d⌉, d);
  `flash_access_parts` splits the count into those loads;
- `kernel_accesses`: the course's Triton kernel (FlashAttention-2's loop order, notebook 08):
  Q read once, K and V read once per query block for the tiles it computes (tiles.py), O and the
  log-sum-exp written once.

Notebook 08 computes them at the learner's shapes and SRAM size (`sram_here`), and holds the bytes
against measured times (explain.explain_io).
"""
from __future__ import annotations

import math
from pathlib import Path

from .tiles import visited_key_rows
from ..device import current_capability, has_cuda

# Shared memory per SM (the SRAM a thread block can use, bytes), from the CUDA C++ Programming
# Guide's table "Technical Specifications per Compute Capability".
SHARED_MEMORY_PER_SM = {(7, 0): 96 * 1024, (7, 2): 96 * 1024, (7, 5): 64 * 1024, (8, 0): 164 * 1024,
                        (8, 6): 100 * 1024, (8, 7): 164 * 1024, (8, 9): 100 * 1024, (9, 0): 228 * 1024,
                        (10, 0): 228 * 1024, (12, 0): 100 * 1024}
CPU_STAND_IN_BYTES = 256 * 1024     # a common per-core L2 size, used when the machine does not say


def _check(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")


def standard_accesses(n: int, d: int, causal: bool = False) -> int:
    """HBM element accesses of standard attention for one head (Algorithm 0 of the paper).

    1. read Q, K (2Nd), write S (N²); 2. read S, write P (2N²); 3. read P, V (N² + Nd), write O (Nd):
    4Nd + 4N². With `causal`, the masking pass of naive.py reads and writes S once more (+2N²).
    """
    _check(n=n, d=d)
    return 4 * n * d + 4 * n * n + (2 * n * n if causal else 0)


def flash_block_sizes(d: int, sram_elements: int) -> tuple[int, int]:
    """(B_r, B_c) of Algorithm 1: B_c = ⌈M/4d⌉ (so K, V, Q and O blocks fit in M), B_r = min(B_c, d)."""
    _check(d=d, sram_elements=sram_elements)
    b_c = math.ceil(sram_elements / (4 * d))
    return min(b_c, d), b_c


def flash_access_parts(n: int, d: int, sram_elements: int) -> dict[str, int]:
    """Algorithm 1's HBM element accesses for one head, by line of the paper.

    "init" (line 2): O, ℓ, m written (Nd + 2N). "K, V" (line 6, outer loop): each key block K_j,
    V_j loaded once, 2Nd in all, whatever M is. "Q, O, ℓ, m" (lines 8 and 12-13, inner loop): for
    each of the T_c = ⌈N/B_c⌉ key blocks, every query block reads Q_i, O_i, ℓ_i, m_i (2Nd + 2N over
    all i) and writes O_i, ℓ_i, m_i (Nd + 2N): T_c·(3Nd + 4N), with T_c ≈ 4Nd/M.
    """
    _check(n=n, d=d, sram_elements=sram_elements)
    _, b_c = flash_block_sizes(d, sram_elements)
    t_c = math.ceil(n / b_c)
    return {"init": n * d + 2 * n, "K, V": 2 * n * d, "Q, O, ℓ, m": t_c * (3 * n * d + 4 * n), "T_c": t_c}


def flash_accesses(n: int, d: int, sram_elements: int) -> int:
    """HBM element accesses of FlashAttention's Algorithm 1 for one head, counted line by line.

    Line 2 writes O, ℓ, m (Nd + 2N). Lines 5-6: every key block K_j, V_j is read once (2Nd in all).
    Lines 7-13: for each of the T_c = ⌈N/B_c⌉ key blocks, every query block reads Q_i, O_i, ℓ_i,
    m_i (Nd + Nd + 2N over all i) and writes O_i, ℓ_i, m_i (Nd + 2N). Total
    Nd + 2N + 2Nd + T_c·(3Nd + 4N) = Θ(N²d²/M), since T_c ≈ 4Nd/M.
    """
    parts = flash_access_parts(n, d, sram_elements)
    return parts["init"] + parts["K, V"] + parts["Q, O, ℓ, m"]


def kernel_accesses(n: int, d: int, block_m: int, block_n: int, causal: bool = True) -> int:
    """HBM element accesses of the course's Triton kernel for one head (FlashAttention-2's order).

    Q is read once (Nd) and O written once (Nd); each query block reads K and V (2d per key row)
    for the tiles it computes (tiles.visited_key_rows), and writes one log-sum-exp per row (N).
    Non-causal: 2Nd + N + ⌈N/BLOCK_M⌉·2Nd; causal about half the K/V term.
    """
    _check(n=n, d=d, block_m=block_m, block_n=block_n)
    return 2 * n * d + n + 2 * d * sum(visited_key_rows(n, block_m, block_n, causal))


def theta_standard(n: int, d: int) -> float:
    """The scale Nd + N² of Theorem 2 for standard attention (constants dropped)."""
    return float(n * d + n * n)


def theta_flash(n: int, d: int, sram_elements: int) -> float:
    """The scale N²d²/M of Theorem 2 for FlashAttention (constants dropped); by Proposition 3 no
    exact algorithm does asymptotically better for all M in [d, Nd]."""
    return n * n * d * d / sram_elements


def theta_ratio(n: int, d: int, sram_elements: int) -> float:
    """Theorem 2's standard over flash scale, (Nd + N²)·M / (N²d²) = M/(Nd) + M/d²: falls with N."""
    return theta_standard(n, d) / theta_flash(n, d, sram_elements)


def theta_ratio_limit(d: int, sram_elements: int) -> float:
    """Where theta_ratio levels off as N grows: M/d²."""
    _check(d=d, sram_elements=sram_elements)
    return sram_elements / (d * d)


def flash_ratio_limit(d: int, sram_elements: int) -> float:
    """Where standard_accesses / flash_accesses (no mask) levels off as N grows: 4N² against
    T_c·(3Nd + 4N) with T_c -> N/B_c, so 4·B_c/(3d + 4), about M/(3d²)."""
    _, b_c = flash_block_sizes(d, sram_elements)
    return 4 * b_c / (3 * d + 4)


def hbm_bytes(accesses: int, batch_heads: int, element_bytes: int) -> float:
    """Bytes for `batch_heads` heads of `accesses` elements each (the log-sum-exp counted like the rest)."""
    _check(batch_heads=batch_heads, element_bytes=element_bytes)
    return float(accesses) * batch_heads * element_bytes


def sram_bytes_for(capability: tuple[int, int] | None) -> int | None:
    """Shared memory per SM of a compute capability, from the CUDA guide's table (None if not listed)."""
    if capability is None:
        return None
    return SHARED_MEMORY_PER_SM.get(tuple(capability))


def _cpu_l2_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """This CPU core's L2 size from sysfs (Linux), or None."""
    try:
        for index in sorted(root.glob("index*")):
            if (index / "level").read_text().strip() == "2":
                text = (index / "size").read_text().strip().upper()
                scale = {"K": 1024, "M": 1024 ** 2}.get(text[-1], 1)
                return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        return None
    return None


def sram_here() -> tuple[int, str]:
    """(bytes, where the number comes from): the SRAM size M that the IO counts use on this machine.

    On CUDA: the device's shared memory per SM as PyTorch reports it (else the CUDA guide's table).
    On a CPU, which has no software-managed SRAM: one core's L2 cache as a stand-in, read from
    sysfs, or 256 KiB, said so.
    """
    import torch
    if has_cuda():
        props = torch.cuda.get_device_properties(0)
        value = getattr(props, "shared_memory_per_multiprocessor", None)
        if value:
            return int(value), f"{props.name}: shared memory per SM, from the driver"
        table = sram_bytes_for(current_capability(0))
        if table:
            return table, f"{props.name}: shared memory per SM, from the CUDA guide's table"
    l2 = _cpu_l2_bytes()
    if l2:
        return l2, "CPU stand-in: one core's L2 cache (from /sys), as a CPU has no shared memory"
    return CPU_STAND_IN_BYTES, "CPU stand-in: 256 KiB, a typical per-core L2 (this machine does not report one)"


def traffic(n: int, d: int, block_m: int, block_n: int, causal: bool, sram_bytes: int,
            element_bytes: int = 2, batch_heads: int = 1) -> dict:
    """Every count at one shape, for the tiles widget and notebook 08's table.

    Returns {"sram_elements", "standard", "flash", "kernel"} (element accesses per head),
    {"theta_standard", "theta_flash"} (the Theorem's scales), and "rows": [{name, accesses, bytes}]
    for `batch_heads` heads of `element_bytes`-byte elements, standard attention first.
    """
    _check(sram_bytes=sram_bytes, element_bytes=element_bytes)
    m = max(1, sram_bytes // element_bytes)
    counts = {"standard": standard_accesses(n, d, causal), "flash": flash_accesses(n, d, m),
              "kernel": kernel_accesses(n, d, block_m, block_n, causal)}
    names = {"standard": "standard attention (Algorithm 0" + (" + mask)" if causal else ")"),
             "flash": f"FlashAttention, Algorithm 1 (M = {sram_bytes // 1024:,} KiB)",
             "kernel": f"course kernel, {block_m}x{block_n} tiles"}
    return {"sram_elements": m, **counts, "theta_standard": theta_standard(n, d),
            "theta_flash": theta_flash(n, d, m),
            "rows": [{"name": names[k], "accesses": counts[k],
                      "bytes": hbm_bytes(counts[k], batch_heads, element_bytes)} for k in counts]}

"""What holds a training step's peak GPU memory, from a `torch.cuda.memory` snapshot (notebook 02).

`torch.cuda.memory._record_memory_history()` makes the caching allocator log every allocation and
free ("alloc", "free_requested", "free_completed", with address and size) in
`torch.cuda.memory._snapshot()["device_traces"]`; the snapshot's "segments" list the blocks alive
when it was taken. `breakdown` replays one step's log from the blocks alive at its start, finds the
moment the allocated bytes peaked, and says what held them then:

- blocks whose address is a known tensor's: the weights (fp32, autocast's "masters"), their
  gradients, the optimizer's state;
- blocks allocated in the forward pass: the 16-bit copies of weights that autocast caches (their
  size is a weight's element count x 2 bytes) and, the rest, the activations saved for backward;
- blocks allocated in the backward pass or the optimizer step that are not gradients or state:
  their temporaries;
- blocks alive before the step that no known tensor owns: the batch and anything left over.

Pure: the log, the phase boundaries and the known addresses come in as data (tested on a synthetic
snapshot); `amp.snapshot.step_memory` gathers them on a GPU.
"""
from __future__ import annotations

import bisect
from typing import Iterable, Mapping, Sequence

WEIGHTS, GRADS, OPT_STATE = "weights", "gradients", "optimizer state"
CAST = "autocast cache (16-bit weight copies)"
ACTIVATIONS = "activations (saved for backward)"
OTHER = "other (allocated before the step: batch, leftovers)"
CATEGORIES = (WEIGHTS, GRADS, OPT_STATE, CAST, ACTIVATIONS, "backward temporaries", "optimizer temporaries", OTHER)
_PHASE_TEMP = {"backward": "backward temporaries", "optimizer": "optimizer temporaries"}
_BLOCK = 512          # the caching allocator rounds every request up to a multiple of 512 bytes


def live_blocks(snapshot: Mapping, device: int = 0) -> dict[int, int]:
    """{address: size} of the blocks allocated when `snapshot` was taken (a block's address is its
    segment's plus the sizes of the blocks before it, as torch's own memory viewer computes it)."""
    out = {}
    for seg in snapshot.get("segments", []):
        if seg.get("device", device) != device:
            continue
        addr = int(seg["address"])
        for blk in seg.get("blocks", []):
            if blk.get("state") == "active_allocated":
                out[int(blk.get("address", addr))] = int(blk["size"])
            addr += int(blk["size"])
    return out


def _rounded(n: int) -> int:
    return max(_BLOCK, -(-n // _BLOCK) * _BLOCK)


def _owner(tags: Sequence[tuple[int, str]], addr: int, size: int) -> str | None:
    """The category of the first tagged address inside [addr, addr + size), if any."""
    i = bisect.bisect_left(tags, (addr, ""))
    return tags[i][1] if i < len(tags) and tags[i][0] < addr + size else None


def breakdown(entries: Sequence[Mapping], start: Mapping[int, int], phases: Sequence[tuple[str, int]],
              tags: Mapping[int, str], cast_sizes: Iterable[int] = ()) -> dict:
    """The peak of allocated bytes over a step and what held it (see the module docstring).

    entries: the allocator's log of the step, oldest first; start: {address: size} alive before it;
    phases: [("forward", i0), ("backward", i1), ("optimizer", i2)]: entry indices where each begins;
    tags: {address of a known tensor: WEIGHTS | GRADS | OPT_STATE}; cast_sizes: the byte sizes of
    16-bit copies of the weights (empty when nothing is autocast)."""
    if not phases or [i for _, i in phases] != sorted(i for _, i in phases):
        raise ValueError(f"phases {list(phases)} must be non-empty and in log order")
    casts = {s for n in cast_sizes for s in (int(n), _rounded(int(n)))}
    has_completed = any(e.get("action") == "free_completed" for e in entries)
    free_action = "free_completed" if has_completed else "free_requested"

    def replay(stop: int | None) -> tuple[dict[int, tuple[int, str]], int, int]:
        live = {a: (s, "before") for a, s in start.items()}
        total = peak = sum(start.values())
        peak_at = -1
        phase_at = [(i, name) for name, i in phases]
        for k, e in enumerate(entries[:stop]):
            act, addr = e.get("action"), int(e.get("addr", 0))
            if act == "alloc":
                phase = next((n for i, n in reversed(phase_at) if i <= k), phases[0][0])
                live[addr] = (int(e["size"]), phase)
                total += int(e["size"])
                if total > peak:
                    peak, peak_at = total, k
            elif act == free_action and addr in live:
                total -= live.pop(addr)[0]
        return live, peak, peak_at

    _, peak, peak_at = replay(None)
    live, _, _ = replay(peak_at + 1)
    tagged = sorted((int(a), c) for a, c in tags.items())
    sums = dict.fromkeys(CATEGORIES, 0)
    for addr, (size, phase) in live.items():
        cat = _owner(tagged, addr, size)
        if cat is None:
            if phase == "before":
                cat = OTHER
            elif phase == "forward":
                cat = CAST if size in casts else ACTIVATIONS
            else:
                cat = _PHASE_TEMP.get(phase, OTHER)
        sums[cat] += size
    peak_phase = next((n for n, i in reversed(phases) if i <= peak_at), "before") if peak_at >= 0 else "before"
    return {"peak_bytes": peak, "peak_phase": peak_phase, "by_category": sums,
            "start_bytes": sum(start.values())}

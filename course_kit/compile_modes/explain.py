"""Where a compiled training step's time goes against its peer, from the bench record's own numbers.

The compile bench keeps, per mode, the steady step time and its spread, launches and GPU kernels per
step, the total GPU kernel time per step (newer records) and the top kernels by GPU time. Comparing a
mode with a peer kernel by kernel says whether the gap is in the kernels the mode chose, or outside
them (host-side time, timing noise).
"""
from __future__ import annotations

import re

from .. import narrate

_SUFFIX = re.compile(r"_\d+$")


def kernel_key(name: str) -> str:
    """A kernel's name without Inductor's trailing counter (triton_..._19 and triton_..._22 match)."""
    return _SUFFIX.sub("", name.strip())


def _kernels(row: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in row.get("top_kernels") or []:
        if "#" in k["kernel"]:   # a user range such as "Optimizer.step#AdamW.step", not a kernel
            continue
        key = kernel_key(k["kernel"])
        out[key] = out.get(key, 0.0) + float(k["gpu_us_per_call"])
    return out


def _is_gemm(name: str) -> bool:
    n = name.lower()
    return any(w in n for w in ("nvjet", "gemm", "cutlass", "xmma", "triton_mm", "triton_tem"))


def gpu_us_per_step(row: dict) -> tuple[float, bool]:
    """(GPU kernel µs per step, complete?): the recorded total, else the sum of the top kernels only."""
    if row.get("gpu_us_per_call_total") is not None:
        return float(row["gpu_us_per_call_total"]), True
    return sum(_kernels(row).values()), False


def kernel_deltas(row: dict, peer: dict, min_us: float = 5.0) -> list[dict]:
    """Kernels (among both rows' top kernels) whose µs per step differ by more than `min_us`, the
    largest increase first. "status": "both" where the kernel is in both top lists, "new" where only
    the row's lists it, "gone" where only the peer's does; the missing side counts 0 in "delta_us"."""
    a, b = _kernels(row), _kernels(peer)
    out = [{"kernel": k, "us": a.get(k, 0.0), "peer_us": b.get(k, 0.0), "delta_us": a.get(k, 0.0) - b.get(k, 0.0),
            "status": "both" if k in a and k in b else ("new" if k in a else "gone")}
           for k in set(a) | set(b)]
    return sorted((d for d in out if abs(d["delta_us"]) > min_us), key=lambda d: -d["delta_us"])


def describe_deltas(deltas: list[dict], mode: str, peer: str, limit: int = 3) -> str:
    """The kernel changes in words: slower ones (in both top lists), then kernels in only one of the two
    lists, named as such and never as slower or faster "from 0"."""
    def name(d: dict) -> str:
        return f"`{d['kernel'][:60]}`"
    slower = [d for d in deltas if d["status"] == "both" and d["delta_us"] > 0][:limit]
    new = [d for d in deltas if d["status"] == "new"][:limit]
    gone = sorted((d for d in deltas if d["status"] == "gone"), key=lambda d: d["delta_us"])[:limit]
    text = ("Kernels slower than in `{}`: ".format(peer) + "; ".join(
        f"{name(d)} {d['peer_us']:.0f} -> {d['us']:.0f} µs" for d in slower) + ". " if slower else
        f"No kernel in both top lists is slower than in `{peer}` by more than 5 µs. ")
    if new:
        text += (f"New among `{mode}`'s top kernels (not among `{peer}`'s): "
                 + "; ".join(f"{name(d)} {d['us']:.0f} µs" for d in new) + ". ")
    if gone:
        text += (f"Gone from them (among `{peer}`'s only): "
                 + "; ".join(f"{name(d)} {d['peer_us']:.0f} µs" for d in gone) + ". ")
    return text


def explain_train(rows: dict[str, dict], mode: str, target: float = 1.2) -> dict:
    """Explain `mode`'s training-step speed-up over eager against `default` (or eager), from the rows
    by mode. Returns {"text", "kernel_deltas", "gpu_us", "wall_us"}; text states the numbers only."""
    if mode not in rows or "eager" not in rows:
        return {"text": f"no measured rows for {mode!r} and eager", "kernel_deltas": []}
    m, e = rows[mode], rows["eager"]
    peer_name = "default" if "default" in rows else "eager"
    p = rows[peer_name]
    speed = e["steady_s"] / m["steady_s"]
    wall = {k: r["steady_s"] * 1e6 for k, r in (("mode", m), ("peer", p), ("eager", e))}
    g_m, full_m = gpu_us_per_step(m)
    g_p, full_p = gpu_us_per_step(p)
    scope = "all GPU kernels" if full_m and full_p else "the recorded top kernels only"
    deltas = kernel_deltas(m, p)
    # `target` stays in the signature for callers; learner text never names it (issue 19).
    text = (f"`{mode}`: {wall['mode'] / 1e3:.2f} ms per training step, {narrate.ratio_words(speed)} eager "
            f"({wall['eager'] / 1e3:.2f} ms). ")
    if peer_name != "eager":
        gap = wall["mode"] - wall["peer"]
        same = abs(gap) <= narrate.SAME_WITHIN * wall["peer"]   # a gap inside the timing noise is not explained
        if same:
            text += (f"`{peer_name}` took {wall['peer'] / 1e3:.2f} ms: the two are about as fast (within "
                     f"{narrate.SAME_WITHIN:.0%}), so autotuning gained nothing measurable over `{peer_name}` here. ")
        else:
            text += (f"`{peer_name}` took {wall['peer'] / 1e3:.2f} ms, so `{mode}` is {abs(gap) / 1e3:.2f} ms "
                     f"{narrate.direction(gap, 'slower', 'faster')} than `{peer_name}`. ")
        kgap = g_m - g_p
        text += (f"Profiled GPU kernel time per step ({scope}): {g_m / 1e3:.2f} ms against {g_p / 1e3:.2f} ms, "
                 f"a difference of {kgap / 1e3:+.2f} ms. ")
        if gap > 0 and not same:
            if kgap < 0.5 * gap:
                text += ("The kernels autotuning chose account for less than half of the gap: the rest is outside "
                         "the kernels (host-side launch and Python time, or noise in the timing: spread "
                         f"{100 * m.get('spread', float('nan')):.0f}% for `{mode}`, "
                         f"{100 * p.get('spread', float('nan')):.0f}% for `{peer_name}`). ")
            else:
                text += "Most of the gap is in the kernels; the slower ones are listed. "
        if m.get("launch_calls_per_call") is not None and p.get("launch_calls_per_call") is not None:
            text += (f"Launches per step: `{mode}` {m['launch_calls_per_call']:.0f}, "
                     f"`{peer_name}` {p['launch_calls_per_call']:.0f}. ")
        text += describe_deltas(deltas, mode, peer_name)
    gemm = {k for k in _kernels(m) if _is_gemm(k)}
    not_faster = m["steady_s"] >= p["steady_s"] * (1 - narrate.SAME_WITHIN)
    if not_faster and peer_name == "default" and gemm and gemm == {k for k in _kernels(p) if _is_gemm(k)}:
        text += (f"Its top matrix-multiply kernels are the same cuBLAS kernels `default` runs "
                 f"({', '.join(sorted(k[:40] for k in gemm))}): for the largest matmuls autotuning kept cuBLAS, "
                 f"so it had nothing to gain over `default` there, and `default` itself reached "
                 f"{e['steady_s'] / p['steady_s']:.2f}x eager.")
    return {"text": text.strip(), "kernel_deltas": deltas, "gpu_us": {mode: g_m, peer_name: g_p},
            "gpu_us_complete": bool(full_m and full_p)}

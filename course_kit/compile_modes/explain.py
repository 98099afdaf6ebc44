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
    largest slowdown first. A kernel missing from one row's top list counts 0 there."""
    a, b = _kernels(row), _kernels(peer)
    out = [{"kernel": k, "us": a.get(k, 0.0), "peer_us": b.get(k, 0.0), "delta_us": a.get(k, 0.0) - b.get(k, 0.0)}
           for k in set(a) | set(b)]
    return sorted((d for d in out if abs(d["delta_us"]) > min_us), key=lambda d: -d["delta_us"])


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
            text += (f"Launches per step: {m['launch_calls_per_call']:.0f} against {p['launch_calls_per_call']:.0f}. ")
        slower = [d for d in deltas if d["delta_us"] > 0][:3]
        if slower:
            text += "Kernels slower than in `{}`: ".format(peer_name) + "; ".join(
                f"`{d['kernel'][:60]}` {d['peer_us']:.0f} -> {d['us']:.0f} µs" for d in slower) + ". "
        else:
            text += f"No top kernel is slower than in `{peer_name}` by more than 5 µs. "
    gemm = {k for k in _kernels(m) if _is_gemm(k)}
    not_faster = m["steady_s"] >= p["steady_s"] * (1 - narrate.SAME_WITHIN)
    if not_faster and peer_name == "default" and gemm and gemm == {k for k in _kernels(p) if _is_gemm(k)}:
        text += (f"Its top matrix-multiply kernels are the same cuBLAS kernels `default` runs "
                 f"({', '.join(sorted(k[:40] for k in gemm))}): for the largest matmuls autotuning kept cuBLAS, "
                 f"so it had nothing to gain over `default` there, and `default` itself reached "
                 f"{e['steady_s'] / p['steady_s']:.2f}x eager.")
    return {"text": text.strip(), "kernel_deltas": deltas, "gpu_us": {mode: g_m, peer_name: g_p},
            "gpu_us_complete": bool(full_m and full_p)}

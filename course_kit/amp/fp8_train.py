"""Training the course's TinyGPT in fp8 against bf16 autocast, and what the scales did (notebook 02, §6).

The loop is `amp.train`'s, unchanged: an fp8 run is its "bf16" mode (autocast for everything else)
on a model whose block linears were swapped for `Fp8Linear` (`fp8.to_fp8`), with `ScaleHistory`
reading every layer's amax and scale after each step. Same seed, same batches as the bf16 run.

Runs: "bf16" (the peer), "fp8" (dynamic per-tensor scaling), "fp8_delayed" (amax history) and
"fp8_noscale" (scale 1: what fp8's narrow range does to the tensors without scaling).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

from .. import narrate
from ..models.tiny_gpt import TinyGPT
from .fp8 import E4M3, FORMAT_OF, ScaleHistory, fp8_max, to_fp8
from .train import LAST_STEPS, RunResult, final_loss, saved_bytes_by_dtype, train, train_data

RUNS = {"bf16": None, "fp8": "dynamic", "fp8_delayed": "delayed", "fp8_noscale": "none"}
# How close fp8 (dynamic scaling) training must stay to bf16's: the final loss (amp.train's
# final_loss: the mean of the last LAST_STEPS losses) within LOSS_TOLERANCE (relative).
# tests/test_fp8.py holds the CPU run to it.
LOSS_TOLERANCE = 0.02
FORMAT_NAMES = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
ROLE_WORDS = {"input": "input", "weight": "weight", "grad_output": "output gradient"}


@dataclass
class Fp8Comparison:
    runs: dict[str, RunResult]
    histories: dict[str, ScaleHistory] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)     # run -> the path its matmuls took, and why
    ranges_timed: bool = False   # whether the fp8 casts computed range statistics inside the timed steps

    def final_loss(self, name: str, last: int = LAST_STEPS) -> float:
        return final_loss(self.runs[name].losses, last)


def make_data(preset: str, batch: int, steps: int, seed: int = 0,
              device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """The batches `amp.train` would draw for these settings (`amp.train_data`: the same stream, the
    same windows), so that an fp8 run and an `amp.train` run of the same settings see the same data."""
    return train_data(preset, batch, steps, seed, device)


def _probe_saved(res: RunResult, scaling: str | None, preset: str, seed: int, dev: torch.device,
                 tokens: torch.Tensor) -> None:
    """Replace `res`'s saved bytes by `saved_bytes` on a fresh copy of the run's model (a probe on
    the trained model would add one cast to a delayed-scaling history)."""
    model = TinyGPT.from_preset(preset, seed=seed, device=dev)
    if scaling is not None:
        to_fp8(model, scaling=scaling)
    res.saved_by_dtype = saved_bytes_by_dtype(model, tokens, "bf16")
    res.saved_bytes = sum(res.saved_by_dtype.values())


def train_fp8(scaling: str = "dynamic", *, preset: str = "smoke", steps: int = 30, batch: int = 8,
              lr: float = 3e-3, seed: int = 0, device: str | torch.device = "cpu",
              data: list[torch.Tensor] | None = None, history: int = 16, path: str = "auto",
              track_ranges: bool = True) -> tuple[RunResult, ScaleHistory]:
    """`amp.train`'s loop in bf16 autocast on a TinyGPT whose block linears run in fp8."""
    dev = torch.device(device)
    data = data if data is not None else make_data(preset, batch, steps, seed, dev)
    model = TinyGPT.from_preset(preset, seed=seed, device=dev)
    to_fp8(model, scaling=scaling, history=history, path=path, track_ranges=track_ranges)
    scales = ScaleHistory(model)
    res = train("bf16", model=model, data=data, steps=steps, batch=batch, lr=lr, seed=seed, device=dev,
                track_grads=False, on_step=scales.snapshot)
    res.precision = next(k for k, v in RUNS.items() if v == scaling)
    scales.release()           # the history outlives the model: it must not keep its weights alive
    del model
    _probe_saved(res, scaling, preset, seed, dev, data[0])
    return res, scales


def compare(runs: Sequence[str] = ("bf16", "fp8", "fp8_noscale"), *, preset: str = "smoke", steps: int = 30,
            batch: int = 8, lr: float = 3e-3, seed: int = 0, device: str | torch.device = "cpu",
            data: list[torch.Tensor] | None = None, track_ranges: bool = True) -> Fp8Comparison:
    """Each run from the same seed on the same batches: bf16 autocast and the fp8 scalings asked for."""
    bad = [r for r in runs if r not in RUNS]
    if bad:
        raise ValueError(f"unknown runs {bad}; choose from {list(RUNS)}")
    data = data if data is not None else make_data(preset, batch, steps, seed, device)
    out = Fp8Comparison({}, ranges_timed=track_ranges)
    for name in runs:
        kw = dict(preset=preset, steps=steps, batch=batch, lr=lr, seed=seed, device=device, data=data)
        if RUNS[name] is None:
            out.runs[name] = train(name, track_grads=False, **kw)
            _probe_saved(out.runs[name], None, preset, seed, torch.device(device), data[0])
            continue
        out.runs[name], out.histories[name] = train_fp8(RUNS[name], track_ranges=track_ranges, **kw)
        out.why[name] = next(iter(out.histories[name].paths().values()))
    return out


def out_of_range(scales: ScaleHistory) -> dict:
    """The step and tensor where scaling mattered most: an unscaled tensor past its format's max
    (overflow; the largest amax / max) if any step had one, else the largest fraction of non-zero
    values that the unscaled cast would have flushed to zero (underflow)."""
    worst_over, worst_under = None, None
    for step, layers in enumerate(scales.steps):
        for layer, roles in layers.items():
            for role, s in roles.items():
                fmt = FORMAT_OF[role]
                row = {"step": step, "layer": layer, "role": role, "format": FORMAT_NAMES[fmt],
                       "format_max": fp8_max(fmt), **s}
                ratio = s["amax"] / fp8_max(fmt)
                if s.get("overflow_unscaled") and (worst_over is None or ratio > worst_over["amax_over_max"]):
                    worst_over = {**row, "kind": "overflow", "amax_over_max": ratio}
                gain = s.get("flushed_unscaled", 0.0) - s.get("flushed_scaled", 0.0)
                if worst_under is None or gain > worst_under["rescued"]:
                    worst_under = {**row, "kind": "underflow", "rescued": gain, "amax_over_max": ratio}
    if worst_over is not None:
        return worst_over
    if worst_under is None or worst_under["rescued"] <= 0:
        return {"kind": None}
    return worst_under


def explain_loss(comparison: Fp8Comparison, tolerance: float = LOSS_TOLERANCE) -> str:
    """Each fp8 run's final loss against bf16's, and whether it is within the tolerance."""
    if "bf16" not in comparison.runs:
        raise ValueError(f"need the bf16 run to compare against, got {sorted(comparison.runs)}")
    base = comparison.final_loss("bf16")
    parts = [f"Mean loss of the last {LAST_STEPS} steps: bf16 autocast **{base:.3f}**"]
    for name in comparison.runs:
        if name == "bf16":
            continue
        v = comparison.final_loss(name)
        gap = (v - base) / base
        within = "within" if abs(gap) <= tolerance else "outside"
        parts.append(f"`{name}` **{v:.3f}** ({abs(gap):.1%} {'above' if gap > 0 else 'below'} bf16, "
                     f"{within} the {tolerance:.0%} tolerance the course holds fp8 training to)")
    return "; ".join(parts) + "."


def explain_speed(times_s: Mapping[str, float], why: str, *, ranges_timed: bool = False,
                  layer_rows: Sequence[Mapping] | None = None, has_record: bool = True) -> str:
    """fp8's step time against bf16's; on the emulated path, said to measure the emulation. Where fp8
    on its tensor cores was not faster, what this run shows about it: `ranges_timed`, whether the
    timed fp8 steps also computed the casts' range statistics; `layer_rows`, one linear of each of the
    model's shapes timed alone in this run (benchmarks.fp8_train.layer_times). Without them the
    numbers are stated and no cause is named. `has_record`: whether an fp8_train record exists for the
    emulated path to point to."""
    if "bf16" not in times_s or "fp8" not in times_s:
        raise ValueError(f"need the bf16 and fp8 step times, got {sorted(times_s)}")
    text = (f"A training step took {times_s['fp8'] * 1e3:.1f} ms in fp8 and {times_s['bf16'] * 1e3:.1f} ms in "
            f"bf16: fp8 ran {narrate.speed(times_s['fp8'], times_s['bf16'])} bf16. The fp8 matmuls ran {why}.")
    if why.startswith("emulated"):
        return text + (" So this time measures the emulation (each cast, the amax reductions and fp32 matmuls), "
                       "not fp8 hardware; " + ("the H200 record below has the real one." if has_record else
                                               "no fp8_train record exists yet to show the real one."))
    if times_s["fp8"] <= times_s["bf16"] * (1 + narrate.SAME_WITHIN):
        return text
    if ranges_timed:
        text += (" These timed fp8 steps also computed every cast's range statistics (the fractions flushed and "
                 "saturated, which the next section reads): more passes over each tensor; `course-kit bench "
                 "fp8_train` times fp8 without them.")
    if layer_rows:
        text += " " + explain_slow_layers(layer_rows)
    else:
        text += " This run timed no layer on its own, so it does not show where fp8's time went."
    return text


def _span(ratios: Sequence[float]) -> str:
    """'1.10x to 1.52x faster than' for speed ratios (>1: fp8 faster), one direction or 'between'."""
    lo, hi = min(ratios), max(ratios)
    if lo == hi:
        return narrate.ratio_words(lo)
    if lo > 1 + narrate.SAME_WITHIN:
        return f"{lo:.2f}x to {hi:.2f}x faster than"
    if hi < 1 - narrate.SAME_WITHIN:
        return f"{1 / hi:.2f}x to {1 / lo:.2f}x slower than"
    return f"between {lo:.2f}x and {hi:.2f}x the speed of"


def explain_slow_layers(rows: Sequence[Mapping]) -> str:
    """Where an fp8 step's time went, from one linear of each shape timed alone (layer_times rows):
    the fp8 matmul against bf16's, the whole fp8 linear against bf16's, and a cause only where the
    numbers show one (the casts outweighing faster matmuls, or matmuls that were not faster)."""
    if not rows:
        raise ValueError("no layer timings to explain")
    same = narrate.SAME_WITHIN
    mm = {r["name"]: r["matmul_bf16_s"] / r["matmul_fp8_s"] for r in rows}
    lin = {r["name"]: r["linear_bf16_s"] / r["linear_fp8_s"] for r in rows}
    text = (f"Timed alone in this run at {rows[0]['tokens']:,} tokens, one linear of each of the model's "
            f"{len(rows)} shapes: the fp8 matmul ran {_span(list(mm.values()))} bf16's; the whole fp8 linear "
            f"(forward and backward, its casts included) {_span(list(lin.values()))} bf16's.")
    not_faster = [n for n, v in mm.items() if v <= 1 + same]
    cast_bound = [r for r in rows if mm[r["name"]] > 1 + same and lin[r["name"]] < 1 - same
                  and r["cast_overhead_s"] > 3 * r["matmul_fp8_s"]]
    if cast_bound:
        worst = max(cast_bound, key=lambda r: r["cast_overhead_s"] / (3 * r["matmul_fp8_s"]))
        widths = sorted({r["in"] for r in rows} | {r["out"] for r in rows})
        text += (f" In {len(cast_bound)} of {len(rows)} shapes the fp8 matmuls were faster, but the work around "
                 f"them (amax reductions, scaling, casts, transposed copies) took longer than the three matmuls "
                 f"themselves: for `{worst['name']}`, {worst['cast_overhead_s'] * 1e6:,.0f} µs against "
                 f"{3 * worst['matmul_fp8_s'] * 1e6:,.0f} µs. At these sizes (widths {widths[0]:,} to "
                 f"{widths[-1]:,}) the matrices are too small for fp8's faster matmuls to repay its scaling.")
    if not_faster:
        text += (f" For {', '.join(f'`{n}`' for n in not_faster)} the fp8 matmul alone was not faster than "
                 f"bf16's: at that shape the fp8 tensor cores gained nothing even before the casts.")
    if min(lin.values()) >= 1 - same:
        text += (" Alone, no fp8 linear was slower than bf16's, so the step's extra time lies outside the "
                 "linears; this run does not show where.")
    return text


MISSING_RECORD = ("No `fp8_train` record exists yet (for this GPU or the reference H200), so this section has "
                  "nothing to show: `course-kit bench fp8_train`, run on a GPU, writes it.")


def explain_bf16_peer(section4: Mapping, here: Mapping, same_batches: bool, device: str) -> str:
    """This comparison's bf16 run against notebook 02's section 4 bf16 run: the settings that differ,
    or, where nothing does, how close their final losses (`amp.final_loss`) came. Each mapping holds
    preset, steps, batch, lr and final_loss."""
    for m in (section4, here):
        missing = [k for k in ("preset", "steps", "batch", "lr", "final_loss") if k not in m]
        if missing:
            raise ValueError(f"a run description needs {missing}, got {sorted(m)}")
    labels = {"preset": "the model preset", "steps": "steps", "batch": "batch", "lr": "learning rate"}
    diffs = [f"{label} {here[k]!s} here, {section4[k]!s} there" for k, label in labels.items() if here[k] != section4[k]]
    if not same_batches:
        diffs.append("other batches")
    a, b = here["final_loss"], section4["final_loss"]
    loss = (f"final loss (mean of the last {LAST_STEPS} steps) {a:.3f} here against {b:.3f} in section 4")
    if diffs:
        return f"This bf16 run is not section 4's: {'; '.join(diffs)}. So their losses differ: {loss}."
    text = f"This bf16 run repeats section 4's bf16 run (same model, steps, batch, learning rate and batches): {loss}"
    if a == b:
        return text + ", identical."
    if device == "cuda":
        return text + (". With nothing else different, that gap is run-to-run variation: on a GPU the backward "
                       "pass adds partial sums in a varying order (section 3).")
    return text + "."


def _bytes(saved: Mapping[str, int], prefix: str = "") -> int:
    return sum(v for k, v in saved.items() if k.startswith(prefix))


def explain_memory(saved_by_dtype: Mapping[str, Mapping[str, int]]) -> str:
    """Bytes kept for the backward pass by fp8 against bf16 autocast, and how many of fp8's are fp8."""
    for m in ("bf16", "fp8"):
        if m not in saved_by_dtype:
            raise ValueError(f"need the saved bytes of {m!r}, got {sorted(saved_by_dtype)}")
    b16, b8 = _bytes(saved_by_dtype["bf16"]), _bytes(saved_by_dtype["fp8"])
    in_fp8 = _bytes(saved_by_dtype["fp8"], "float8")
    mib = 2**20
    return (f"For the backward pass, the fp8 run kept {b8 / mib:.2f} MiB against bf16 autocast's {b16 / mib:.2f} MiB "
            f"({narrate.more_or_less(b8 / mib, b16 / mib, 'MiB')} bf16); {in_fp8 / mib:.2f} MiB of it "
            f"({in_fp8 / max(b8, 1):.0%}) are fp8 tensors (the linears' inputs and weights, 1 byte each). The rest "
            f"(attention, LayerNorm, GELU, the output layer) stays as autocast keeps it.")


def explain_out_of_range(finding: Mapping, scalings: str = "the per-tensor scale") -> str:
    """The step where a tensor would have left its fp8 format's range without scaling, in words."""
    kind = finding.get("kind")
    if kind is None:
        return ("No tensor in this run would have left its fp8 format's range without scaling: every amax sat "
                "inside the format and nothing would have flushed to zero.")
    where = (f"At step {finding['step']}, the {ROLE_WORDS[finding['role']]} of `{finding['layer']}` "
             f"(cast to {finding['format']})")
    if kind == "overflow":
        return (f"{where} had amax {finding['amax']:.3g}, {finding['amax_over_max']:.1f}x {finding['format']}'s "
                f"largest value {finding['format_max']:g}: cast as it was, it would have overflowed "
                f"({'NaN' if finding['format'] == 'e4m3' else 'inf'} or clamped values). {scalings.capitalize()} "
                f"({finding['scale']:.3g}) mapped its amax onto {finding['format_max']:g} instead.")
    return (f"{where} had amax {finding['amax']:.3g}, far below {finding['format']}'s largest value "
            f"{finding['format_max']:g}: cast as it was, **{finding['flushed_unscaled']:.1%}** of its non-zero values "
            f"would have flushed to zero; multiplied by {scalings} ({finding['scale']:.3g}) first, "
            f"{finding['flushed_scaled']:.1%} did. No tensor overflowed unscaled in this run: here fp8's problem "
            f"was underflow, as it was fp16's in §2.")


def scale_summary(scales: ScaleHistory, layers: Sequence[str] | None = None) -> dict:
    """What a record keeps of a history: per role and step, the smallest, median and largest scale
    and amax over the layers; and every statistic of a few layers (by default the first, a middle
    and the last one), step by step."""
    import statistics
    names = list(scales.layers)
    layers = list(layers) if layers is not None else list(dict.fromkeys([names[0], names[len(names) // 2], names[-1]]))
    per_role: dict[str, dict[str, list[float]]] = {}
    for row in scales.steps:
        for role in FORMAT_OF:
            for key in ("scale", "amax"):
                vals = [r[role][key] for r in row.values() if role in r]
                if not vals:
                    continue
                d = per_role.setdefault(role, {})
                for stat, v in (("min", min(vals)), ("median", statistics.median(vals)), ("max", max(vals))):
                    d.setdefault(f"{key}_{stat}", []).append(v)
    return {"roles": per_role, "layers": {n: {role: {k: scales.series(n, role, k) for k in scales.steps[0][n][role]}
                                              for role in scales.steps[0][n]} for n in layers},
            "steps": len(scales.steps), "n_layers": len(names)}


def explain_scales(summary: Mapping) -> str:
    """What the scales were, from `scale_summary`: per role, their range over layers and steps in
    powers of two."""
    import math
    roles = summary.get("roles") or {}
    if not roles:
        raise ValueError("the summary holds no steps")
    parts = [f"{ROLE_WORDS[role]}s ({FORMAT_NAMES[FORMAT_OF[role]]}) from 2^{math.log2(min(d['scale_min'])):.1f} "
             f"to 2^{math.log2(max(d['scale_max'])):.1f}" for role, d in roles.items()]
    return (f"Over {summary['steps']} steps and {summary['n_layers']} layers the scales ran: " + "; ".join(parts)
            + f". A scale above 1 stretches a tensor toward the format's largest value ({fp8_max(E4M3):g} for e4m3, "
              f"{fp8_max(torch.float8_e5m2):g} for e5m2): the smaller a tensor's values, the larger its scale.")


def explain_layer_times(rows: Sequence[Mapping]) -> str:
    """Per linear shape: the fp8 matmul alone against bf16's, and the whole fp8 linear (forward +
    backward: its three matmuls and the casts around them) against bf16's; the casts are named as
    the cause only where the numbers show the gap."""
    if not rows:
        raise ValueError("no layer timings to explain")
    parts, cast_bound = [], 0
    for r in rows:
        mm, lin = r["matmul_bf16_s"] / r["matmul_fp8_s"], r["linear_bf16_s"] / r["linear_fp8_s"]
        parts.append(f"`{r['name']}` ({r['in']}->{r['out']}): the matmul {narrate.ratio_words(mm)} bf16's, the "
                     f"whole linear {narrate.ratio_words(lin)} bf16's")
        if lin < mm and r["cast_overhead_s"] > 3 * r["matmul_fp8_s"]:
            cast_bound += 1
    text = f"For {rows[0]['tokens']:,} tokens: " + "; ".join(parts) + "."
    if cast_bound:
        worst = max(rows, key=lambda r: r["cast_overhead_s"] / (3 * r["matmul_fp8_s"]))
        text += (f" In {cast_bound} of {len(rows)} shapes the fp8 linear's time outside its three matmuls (amax "
                 f"reductions, scaling, casts, the transposed copies the backward's matmuls need) exceeded the matmuls' "
                 f"own: for `{worst['name']}`, {worst['cast_overhead_s'] * 1e6:,.0f} µs against "
                 f"{3 * worst['matmul_fp8_s'] * 1e6:,.0f} µs. Unfused, in eager mode, those elementwise passes over "
                 f"memory cost what the tensor cores saved; fused casts (torch.compile, Transformer Engine) remove most "
                 f"of them.")
    return text


def explain_record(summary: Mapping, gpu: str) -> str:
    """The reference run's headline: fp8 against bf16 per step, and the loss gap against the tolerance."""
    bits = [f"On the {gpu} (fp8 matmuls: {summary.get('why') or 'path not recorded'}):"]
    if summary.get("fp8_speedup_vs_bf16"):
        bits.append(f"a training step in fp8 ran **{narrate.ratio_words(summary['fp8_speedup_vs_bf16'])}** bf16 autocast;")
    if summary.get("fp8_loss_gap") is not None:
        gap, tol = summary["fp8_loss_gap"], summary.get("loss_tolerance", LOSS_TOLERANCE)
        bits.append(f"its final loss was {abs(gap):.2%} {'above' if gap > 0 else 'below'} bf16's, "
                    f"{'within' if abs(gap) <= tol else 'outside'} the {tol:.0%} tolerance.")
    return " ".join(bits)


def explain_noscale(comparison: Fp8Comparison) -> str:
    """fp8 without scaling against fp8 with it: the final losses, worded from their gap."""
    for m in ("fp8", "fp8_noscale"):
        if m not in comparison.runs:
            raise ValueError(f"need the {m!r} run, got {sorted(comparison.runs)}")
    a, b = comparison.final_loss("fp8_noscale"), comparison.final_loss("fp8")
    return (f"Without any scaling (`fp8_noscale`, every scale fixed at 1) each cast kept only what the unscaled "
            f"format could hold, and the final loss (mean of the last {LAST_STEPS} steps) was {a:.3f}, "
            f"{narrate.more_or_less(a, b, same_within=0.005)} the scaled run's {b:.3f}.")

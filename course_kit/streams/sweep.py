"""What a `course-kit bench async` sweep shows across batch sizes and models, in words that follow
its rows (notebook 07, section 7), and which cases a record holds.

- `idle_share_key(rows)`: the profiler's GPU idle where every row has it, else the host's picture;
- `sweep_words(rows)`: per model, how the sync loop's idle share and async's gain moved from the
  smallest batch to the largest, and, where models share a batch, which idled more;
- `record_holds(rows)`: "one case: llama-1b at batch 16" or the cases, so that no sentence claims a
  sweep the record does not hold; `describe_record(rows)`: that, then the trends when there are any.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from .. import narrate

SAME_POINTS = 0.02      # idle shares within 2 points of the window are "about the same"
IDLE_NAMES = {"gpu_idle_fraction": "GPU idle (profiler)",
              "host_step_gap_fraction": "time outside the step brackets (the host's picture)"}


def idle_share_key(rows: Sequence[Mapping]) -> str:
    """"gpu_idle_fraction" where every row has it, else "host_step_gap_fraction" (CPU runs)."""
    return ("gpu_idle_fraction" if rows and all(r.get("gpu_idle_fraction") is not None for r in rows)
            else "host_step_gap_fraction")


def _cases(rows: Sequence[Mapping]) -> dict[str, dict[int, dict[str, Mapping]]]:
    """{model: {batch: {mode: row}}}, in the rows' order."""
    out: dict[str, dict[int, dict[str, Mapping]]] = {}
    for r in rows:
        out.setdefault(r["model"], {}).setdefault(int(r["batch"]), {})[r["mode"]] = r
    return out


def record_holds(rows: Sequence[Mapping]) -> str:
    """Which (model, batch) cases the rows hold, said plainly."""
    cases = _cases(rows)
    n = sum(len(b) for b in cases.values())
    if n == 0:
        return "It holds no case."
    listed = "; ".join(f"{m} at batch{'es' if len(b) > 1 else ''} {', '.join(map(str, sorted(b)))}"
                       for m, b in cases.items())
    if n == 1:
        return f"It holds one case: {listed}, so it shows no trend across batch sizes or models."
    return f"It holds {n} cases: {listed}."


def _gain(case: Mapping[str, Mapping]) -> float | None:
    s, a = case.get("sync"), case.get("async")
    return a["tokens_per_s"] / s["tokens_per_s"] if s and a and s.get("tokens_per_s") else None


def _model_trend(model: str, by_batch: Mapping[int, Mapping[str, Mapping]], key: str) -> str | None:
    """How the sync idle and the async gain moved from the smallest batch to the largest."""
    batches = [b for b in sorted(by_batch) if "sync" in by_batch[b]]
    if len(batches) < 2:
        return None
    lo, hi = batches[0], batches[-1]
    i_lo, i_hi = by_batch[lo]["sync"][key], by_batch[hi]["sync"][key]
    moved = narrate.direction(i_hi - i_lo, "rose", "fell", "stayed about the same", tolerance=SAME_POINTS)
    path = " → ".join(f"{by_batch[b]['sync'][key]:.1%}" for b in batches)
    text = (f"{model}: from batch {lo} to batch {hi} the sync loop's {IDLE_NAMES.get(key, key)} {moved} "
            f"({path})")
    g_lo, g_hi = _gain(by_batch[lo]), _gain(by_batch[hi])
    if g_lo and g_hi:
        went = narrate.direction(g_hi / g_lo - 1, "grew", "shrank", "stayed about the same",
                                 tolerance=narrate.SAME_WITHIN)
        text += f", and async's throughput over sync's {went} ({g_lo:.2f}x → {g_hi:.2f}x)"
    return text + "."


def _model_pair(cases: Mapping[str, Mapping[int, Mapping[str, Mapping]]], key: str) -> str | None:
    """At the largest batch two models share: which one's sync loop idled more."""
    models = list(cases)
    if len(models) < 2:
        return None
    a, b = models[0], models[-1]
    shared = sorted(k for k in set(cases[a]) & set(cases[b]) if "sync" in cases[a][k] and "sync" in cases[b][k])
    if not shared:
        return None
    batch = shared[-1]
    i_a, i_b = cases[a][batch]["sync"][key], cases[b][batch]["sync"][key]
    more = narrate.direction(i_b - i_a, "more", "less", "about as much", tolerance=SAME_POINTS)
    return (f"At batch {batch}, {b}'s sync loop idled {more} than {a}'s ({i_b:.1%} against {i_a:.1%}).")


def sweep_words(rows: Sequence[Mapping]) -> str:
    """The sweep's trends, each computed from its rows; a sweep of one batch per model says so."""
    if not rows:
        return "The sweep holds no rows."
    key = idle_share_key(rows)
    cases = _cases(rows)
    lines = [t for m, by_batch in cases.items() if (t := _model_trend(m, by_batch, key))]
    pair = _model_pair(cases, key)
    if pair:
        lines.append(pair)
    if not lines:
        return "One batch size per model: the sweep shows no trend with the batch."
    return " ".join(lines)


def describe_record(rows: Sequence[Mapping]) -> str:
    """`record_holds`, followed by `sweep_words` when the record holds more than one case."""
    text = record_holds(rows)
    return text + " " + sweep_words(rows) if sum(len(b) for b in _cases(rows).values()) > 1 else text

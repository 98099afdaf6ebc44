"""Pipeline schedules as pure functions: GPipe, 1F1B and interleaved 1F1B (notebook 09, §5 and
its schedule widget).

A schedule is, for every rank, the ordered list of its actions ("F" or "B", micro-batch, model
chunk). `simulate` runs those lists with fixed step costs and free communication: an action starts
when its rank is free and its input is ready (the previous virtual stage's forward, the next one's
backward). From the timeline come the idle fraction and the activations each rank holds.

Interleaved 1F1B (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC 2021, section 2.2.2): each rank holds v model chunks (rank r holds virtual
stages r, r+p, ..., r+(v-1)p), so a forward or backward step costs 1/v of a plain one. The paper
gives the bubble time (p-1)(t_f+t_b)/v, i.e. a bubble of (p-1)/(v m) *relative to the ideal time*
m (t_f+t_b); as a fraction of the whole step (idle / total, the convention of this course) that is
(p-1)/(v m + p-1), which is GPipe's (p-1)/(m+p-1) at v = 1. The order of actions follows
Megatron-LM's `forward_backward_pipelining_with_interleaving` (micro-batches in groups of p, warm-up
of 2(p-r-1) + (v-1)p forwards on rank r); like the paper's, it needs m to be a multiple of p.
"""
from __future__ import annotations
from .. import narrate

KINDS = ("gpipe", "1f1b", "interleaved")

Action = tuple[str, int, int]          # ("F" | "B", micro-batch, model chunk)


def _validate(kind: str, p: int, m: int, v: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"schedule={kind!r}; choose one of {KINDS}")
    for name, value in (("p", p), ("m", m), ("v", v)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}; it must be an integer >= 1")
    if kind != "interleaved" and v != 1:
        raise ValueError(f"v={v}: only the interleaved schedule has model chunks (use v=1)")
    if kind == "interleaved" and m % p:
        raise ValueError(f"m={m}: interleaved 1F1B needs m to be a multiple of p={p}")


def actions(kind: str, p: int, m: int, rank: int, v: int = 1) -> list[Action]:
    """The ordered actions of stage `rank` (0 <= rank < p) for m micro-batches."""
    _validate(kind, p, m, v)
    if not 0 <= rank < p:
        raise ValueError(f"rank={rank}; it must be in [0, {p})")
    if kind == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if kind == "1f1b":
        warm = min(p - rank - 1, m)
        acts: list[Action] = [("F", i, 0) for i in range(warm)]
        f, b = warm, 0
        while f < m:
            acts += [("F", f, 0), ("B", b, 0)]
            f, b = f + 1, b + 1
        return acts + [("B", i, 0) for i in range(b, m)]
    # interleaved: the k-th forward (or backward) of this rank, k = 0 .. m*v-1
    total = m * v

    def unit(k: int, forward: bool) -> tuple[int, int]:
        group, inside = divmod(k, p * v)
        chunk = inside // p
        mb = group * p + inside % p
        return mb, (chunk if forward else v - 1 - chunk)

    warm = min((p - rank - 1) * 2 + (v - 1) * p, total)
    acts = [("F",) + unit(k, True) for k in range(warm)]
    for i in range(total - warm):
        acts.append(("F",) + unit(warm + i, True))
        acts.append(("B",) + unit(i, False))
    acts += [("B",) + unit(k, False) for k in range(total - warm, total)]
    return acts


def bubble_theory(p: int, m: int, v: int = 1) -> float:
    """Idle fraction of the step: (p-1)/(v m + p-1); GPipe's (p-1)/(m+p-1) at v = 1."""
    for name, value in (("p", p), ("m", m), ("v", v)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}; it must be an integer >= 1")
    return (p - 1) / (v * m + p - 1)


def simulate(kind: str, p: int, m: int, v: int = 1, t_f: float = 1.0,
             t_b: float = 2.0) -> list[dict]:
    """Timeline of a schedule: events {rank, kind, mb, chunk, start, end}.

    t_f and t_b are the costs of a whole stage's forward and backward; a chunk of an interleaved
    schedule costs 1/v of them. Communication is free.
    """
    if not (t_f > 0 and t_b > 0):
        raise ValueError(f"step costs must be > 0; got t_f={t_f}, t_b={t_b}")
    orders = [actions(kind, p, m, r, v) for r in range(p)]
    last = p * v - 1                                   # the last virtual stage
    done: dict[tuple[str, int, int], float] = {}       # (kind, mb, virtual stage) -> end
    pos, free = [0] * p, [0.0] * p
    events: list[dict] = []
    while any(pos[r] < len(orders[r]) for r in range(p)):
        progressed = False
        for r in range(p):
            if pos[r] >= len(orders[r]):
                continue
            k, i, c = orders[r][pos[r]]
            s = c * p + r                              # virtual stage of this action
            if k == "F":
                dep = ("F", i, s - 1) if s > 0 else None
            else:
                dep = ("B", i, s + 1) if s < last else ("F", i, s)
            if dep is not None and dep not in done:
                continue
            start = max(free[r], done[dep] if dep else 0.0)
            end = start + (t_f if k == "F" else t_b) / v
            done[(k, i, s)] = free[r] = end
            events.append({"rank": r, "kind": k, "mb": i, "chunk": c, "start": start, "end": end})
            pos[r] += 1
            progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {kind} deadlocks for p={p}, m={m}, v={v}")
    return events


def bubble_of(events: list[dict]) -> float:
    """Idle fraction: 1 - busy time / (ranks * makespan)."""
    if not events:
        raise ValueError("no events")
    ranks = {e["rank"] for e in events}
    t0, t1 = min(e["start"] for e in events), max(e["end"] for e in events)
    busy = sum(e["end"] - e["start"] for e in events)
    return 1.0 - busy / (len(ranks) * (t1 - t0))


def peak_in_flight(events: list[dict], rank: int) -> float:
    """Most activations rank `rank` holds at once, in micro-batches of a whole stage (a chunk's
    forward holds 1/v of a stage's activations, so interleaving counts chunks as fractions)."""
    evs = sorted((e for e in events if e["rank"] == rank), key=lambda e: e["start"])
    v = 1 + max((e.get("chunk", 0) for e in events), default=0)
    live, peak = 0.0, 0.0
    for e in evs:
        live += (1.0 if e["kind"] == "F" else -1.0) / v
        peak = max(peak, live)
    return peak


def schedule_summary(kind: str, p: int, m: int, v: int = 1, t_f: float = 1.0,
                     t_b: float = 2.0) -> dict:
    """What the schedule widget shows: the timeline, its bubble, the formula, activations held."""
    ev = simulate(kind, p, m, v, t_f, t_b)
    return {"events": ev, "bubble": bubble_of(ev), "theory": bubble_theory(p, m, v),
            "makespan": max(e["end"] for e in ev),
            "peak_in_flight": [peak_in_flight(ev, r) for r in range(p)]}


def explain_simulation(kind: str, p: int, m: int, v: int = 1, t_f: float = 1.0,
                       t_b: float = 2.0) -> str:
    """The schedule widget's readout: the simulated bubble against its formula, and against plain
    1F1B at the same p and m (computed, both ways)."""
    s = schedule_summary(kind, p, m, v, t_f, t_b)
    names = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": f"interleaved 1F1B (v={v})"}
    formula = "(p-1)/(v·m+p-1)" if kind == "interleaved" else "(p-1)/(m+p-1)"
    text = (f"{names[kind]}, p={p}, m={m}: idle **{s['bubble']:.1%}** of the step; "
            f"{formula} = {s['theory']:.1%}. Activations held at most (in micro-batches of a stage): "
            f"{', '.join(f'{x:g}' for x in s['peak_in_flight'])} on ranks 0..{p - 1}.")
    if kind != "1f1b":
        ref = schedule_summary("1f1b", p, m, 1, t_f, t_b)
        d, peak, peak_ref = s["bubble"] - ref["bubble"], max(s["peak_in_flight"]), max(ref["peak_in_flight"])
        idle = narrate.direction(d, f"{abs(d) * 100:.1f} points more idle than",
                                 f"{abs(d) * 100:.1f} points less idle than", "the same idle fraction as", 1e-9)
        held = narrate.direction(peak - peak_ref, "more", "fewer", "as many", 1e-9)
        text += (f" Against 1F1B at the same p and m: {idle} 1F1B, and {held} activations on "
                 f"the busiest rank ({peak:g} against {peak_ref:g}).")
    return text

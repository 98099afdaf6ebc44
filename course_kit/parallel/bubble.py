"""Why a measured pipeline bubble differs from (p-1)/(m+p-1): read from its own timeline
(notebook 09, §5).

The formula assumes every stage's forward and backward take the same time and that messages are
free. A measured timeline (pipeline.measure_pp) breaks both, and it says by how much:

- `replay` re-runs the recorded steps, each with its recorded duration, in the recorded order, but
  starts each one as soon as its rank is free and its input is ready: messages become free.
  The replay's bubble minus the formula is what the *step times* add (stages of unequal length,
  slower first steps); the measured bubble minus the replay's is what the *time between steps*
  adds (sending and receiving, and host work between steps; the record does not separate them).
- `handoff_delays` measures, for every message, how long after its step ended the neighbour's
  dependent step began, when the neighbour was free and waiting for it.

The explainers word only what these numbers show, and say "unknown" where the record is silent
(the record holds times, not memory, so GPipe's stored activations are never named as a cause).
"""
from __future__ import annotations

import statistics
from typing import Iterator, Mapping, Sequence

from ..narrate import speed
from . import schedules

NOISE = 0.01          # bubble parts under one percentage point are not named as causes


def _check(events: Sequence[Mapping]) -> None:
    if not events:
        raise ValueError("a timeline needs at least one event")


def _dep(e: Mapping, p: int) -> tuple[int, str, int] | None:
    """(rank, kind, micro-batch) of the step that must end before `e` can start (one chunk per rank)."""
    r, k, i = e["rank"], e["kind"], e["mb"]
    if k == "F":
        return (r - 1, "F", i) if r > 0 else None
    return (r + 1, "B", i) if r < p - 1 else (r, "F", i)


def _by_rank(events: Sequence[Mapping]) -> dict[int, list[Mapping]]:
    ranks = sorted({e["rank"] for e in events})
    return {r: sorted((e for e in events if e["rank"] == r), key=lambda e: e["start"]) for r in ranks}


def replay(events: Sequence[Mapping]) -> list[dict]:
    """The recorded steps with their recorded durations and order, and free messages."""
    _check(events)
    by = _by_rank(events)
    p = max(by) + 1
    done: dict[tuple[int, str, int], float] = {}
    pos = {r: 0 for r in by}
    free = {r: 0.0 for r in by}
    out: list[dict] = []
    while any(pos[r] < len(by[r]) for r in by):
        progressed = False
        for r in by:
            if pos[r] >= len(by[r]):
                continue
            e = by[r][pos[r]]
            dep = _dep(e, p)
            if dep is not None and dep not in done:
                continue
            start = max(free[r], done[dep] if dep is not None else 0.0)
            end = start + (e["end"] - e["start"])
            done[(r, e["kind"], e["mb"])] = free[r] = end
            out.append({**e, "start": start, "end": end})
            pos[r] += 1
            progressed = True
        if not progressed:
            raise ValueError("the timeline's steps wait on each other in a cycle")
    return out


def handoff_delays(events: Sequence[Mapping]) -> dict[str, list[float]]:
    """Per direction ("forward", "backward"): for each message whose receiver was idle and waiting,
    the time from the end of the sender's step to the start of the receiver's step."""
    _check(events)
    end = {(e["rank"], e["kind"], e["mb"]): e["end"] for e in events}
    out: dict[str, list[float]] = {"forward": [], "backward": []}
    for e, dep in _awaited_messages(events):
        out["forward" if e["kind"] == "F" else "backward"].append(e["start"] - end[dep])
    return out


def _awaited_messages(events: Sequence[Mapping]) -> Iterator[tuple[Mapping, tuple]]:
    """(step, the step on another rank it needs) for every step whose rank was free before that
    step's message could come: the receiver waited for the message."""
    by = _by_rank(events)
    p = max(by) + 1
    end = {(e["rank"], e["kind"], e["mb"]): e["end"] for e in events}
    for r, evs in by.items():
        for j, e in enumerate(evs):
            dep = _dep(e, p)
            if dep is None or dep[0] == r or dep not in end:
                continue
            ready = evs[j - 1]["end"] if j else float("-inf")
            if end[dep] >= ready:
                yield e, dep


def late_by_a_step(events: Sequence[Mapping]) -> float:
    """Fraction of messages that reached an idle receiver only after the sender had finished its
    *next* step as well (a message held back until the sender's next step)."""
    nxt: dict[tuple[int, str, int], float] = {}
    for r, evs in _by_rank(events).items():
        for a, b in zip(evs, evs[1:]):
            nxt[(r, a["kind"], a["mb"])] = b["end"]
    # a sender's last step has no next step: its messages cannot be late by one
    awaited = [(e, dep) for e, dep in _awaited_messages(events) if dep in nxt]
    late = sum(e["start"] >= nxt[dep] for e, dep in awaited)
    return late / len(awaited) if awaited else 0.0


def bubble_parts(events: Sequence[Mapping]) -> dict:
    """The measured bubble split into the formula, the step times' share and the gaps' share."""
    _check(events)
    by = _by_rank(events)
    p = len(by)
    m = len({e["mb"] for e in events})
    rp = replay(events)
    measured, replayed = schedules.bubble_of(list(events)), schedules.bubble_of(rp)
    theory = schedules.bubble_theory(p, m)
    span = lambda evs: max(e["end"] for e in evs) - min(e["start"] for e in evs)  # noqa: E731
    steps = {r: {k: statistics.median([e["end"] - e["start"] for e in evs if e["kind"] == k])
                 for k in ("F", "B") if any(e["kind"] == k for e in evs)} for r, evs in by.items()}
    delays = handoff_delays(events)
    return {"p": p, "m": m, "measured": measured, "theory": theory, "replayed": replayed,
            "step_times": replayed - theory, "gaps": measured - replayed,
            "makespan_s": span(events), "replay_makespan_s": span(rp),
            "busy_s": sum(e["end"] - e["start"] for e in events),
            "median_step_s": steps,
            "handoff_s": {k: statistics.median(v) for k, v in delays.items() if v},
            "late_by_a_step": late_by_a_step(events)}


def _pts(x: float) -> str:
    return f"{abs(x) * 100:.1f} points"


def _ms(x: float) -> str:
    return f"{x * 1e3:,.2f} ms"


def explain_bubble(events: Sequence[Mapping], where: str) -> str:
    """One paragraph on a measured timeline: measured against the formula, and which of the two
    shown causes (step times, time between steps) accounts for how much."""
    d = bubble_parts(events)
    head = (f"On {where}, with p={d['p']} stages and m={d['m']} micro-batches, the measured bubble is "
            f"**{d['measured']:.1%}** against (p-1)/(m+p-1) = **{d['theory']:.1%}**")
    diff = d["measured"] - d["theory"]
    if abs(diff) < NOISE:
        return head + ": the formula holds to within a percentage point."
    out = [head + f", {_pts(diff)} {'above' if diff > 0 else 'below'} it."]
    st, gp = d["step_times"], d["gaps"]
    if abs(st) >= NOISE:
        med = d["median_step_s"]
        b = {r: v["B"] for r, v in med.items() if "B" in v}
        f = {r: v["F"] for r, v in med.items() if "F" in v}
        detail = ""
        if b and f:
            slow_b, fast_b = max(b, key=b.get), min(b, key=b.get)
            detail = (f" (median backward {_ms(b[slow_b])} on rank {slow_b} against {_ms(b[fast_b])} "
                      f"on rank {fast_b}; median forward {_ms(min(f.values()))} to {_ms(max(f.values()))})")
        out.append(f"Replaying the recorded steps with free messages gives {d['replayed']:.1%}: the step "
                   f"times themselves {'add' if st > 0 else 'remove'} {_pts(st)}, because the formula "
                   f"assumes every stage's steps are equal and they are not{detail}.")
    else:
        out.append(f"Replaying the recorded steps with free messages gives {d['replayed']:.1%}, the formula's "
                   f"figure: the step times are even enough.")
    if abs(gp) >= NOISE:
        hand = d["handoff_s"]
        hs = "; ".join(f"{k} messages {_ms(v)}" for k, v in hand.items())
        text = (f"The time between steps {'adds' if gp > 0 else 'removes'} the other {_pts(gp)}: the whole "
                f"training step took {_ms(d['makespan_s'])} against {_ms(d['replay_makespan_s'])} with free messages.")
        if hs:
            text += f" Median wait of an idle rank for its neighbour's message: {hs}."
        if d["late_by_a_step"] >= 0.5:
            text += (f" {d['late_by_a_step']:.0%} of those messages arrived only after the sender had "
                     f"finished its next step too: they left late, not slowly.")
        else:
            text += (" The record does not say how much of that wait is the transfer itself and how "
                     "much host work (cause unknown).")
        out.append(text)
    return " ".join(out)


def explain_schedules(gpipe: Sequence[Mapping], one_f_one_b: Sequence[Mapping], where: str) -> str:
    """Why two schedules that the formula says are equal measured different bubbles."""
    a, b = bubble_parts(gpipe), bubble_parts(one_f_one_b)
    if a["p"] != b["p"] or a["m"] != b["m"]:
        raise ValueError(f"compare equal shapes; got p={a['p']}, m={a['m']} and p={b['p']}, m={b['m']}")
    diff = a["measured"] - b["measured"]
    head = (f"On {where} at m={a['m']}: GPipe idles **{a['measured']:.1%}** and 1F1B **{b['measured']:.1%}**, "
            f"where the formula gives both {a['theory']:.1%}.")
    if abs(diff) < NOISE:
        return head + " They agree to within a percentage point, as the formula says."
    lower, higher = ("1F1B", "GPipe") if diff > 0 else ("GPipe", "1F1B")
    lo, hi = (b, a) if diff > 0 else (a, b)
    out = [head, f"The whole step of {lower} ran {speed(lo['makespan_s'], hi['makespan_s'])} {higher}'s "
                 f"({_ms(lo['makespan_s'])} against {_ms(hi['makespan_s'])})."]
    busy = lo["busy_s"] / hi["busy_s"] - 1
    shares = {"the time between steps": hi["gaps"] - lo["gaps"],
              "the step times": hi["step_times"] - lo["step_times"]}
    main = max(shares, key=lambda k: abs(shares[k]))
    if abs(busy) > 0.03 and abs(lo["makespan_s"] / hi["makespan_s"] - 1) <= 0.03:
        out.append(f"So {lower}'s lower idle fraction is not a shorter step: its ranks were busy "
                   f"{abs(busy):.0%} {'longer' if busy > 0 else 'shorter'} in total ({_ms(lo['busy_s'])} against "
                   f"{_ms(hi['busy_s'])}), so the same wall time holds less idle time. Why its steps took "
                   f"longer the record does not show (cause unknown).")
    else:
        other = next(k for k in shares if k != main)
        if shares[other] < 0:     # the parts pull opposite ways: "most of" would read as more than all
            out.append(f"{higher}'s extra idle time ({_pts(diff)}) is {main} ({_pts(shares[main])} more), "
                       f"partly offset by {other} ({_pts(-shares[other])} less).")
        else:
            out.append(f"Most of the difference ({_pts(shares[main])} of {_pts(diff)}) comes from {main}.")
        if main == "the time between steps" and hi["late_by_a_step"] >= 0.5 > lo["late_by_a_step"]:
            out.append(f"In {higher}, {hi['late_by_a_step']:.0%} of the messages reached an idle neighbour "
                       f"only after the sender's next step had ended too.")
    return " ".join(out)

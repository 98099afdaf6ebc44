"""Pipeline schedules (GPipe, 1F1B, interleaved 1F1B) and the bubble explainers (notebook 09, §5)."""
import json
from pathlib import Path

import pytest

from course_kit.parallel import bubble, schedules

REC = Path(__file__).resolve().parents[1] / "data" / "reference" / "h200x2" / "parallel.json"
EARLIER = Path(__file__).resolve().parent / "data" / "pipeline_timelines_h200x2_s5.json"


@pytest.mark.parametrize("kind,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 1), ("interleaved", 2),
                                    ("interleaved", 4)])
@pytest.mark.parametrize("p,m", [(2, 2), (2, 8), (4, 4), (4, 12), (8, 8)])
@pytest.mark.parametrize("t_b", [1.0, 2.0, 3.0])
def test_simulated_bubble_matches_the_published_formula(kind, v, p, m, t_b):
    s = schedules.schedule_summary(kind, p, m, v, t_f=1.0, t_b=t_b)
    # Narayanan et al. 2021: bubble time (p-1)(t_f+t_b)/v; as a fraction of the step (p-1)/(vm+p-1)
    assert s["bubble"] == pytest.approx((p - 1) / (v * m + p - 1))
    assert s["makespan"] == pytest.approx(m * (1 + t_b) + (p - 1) * (1 + t_b) / v)


def test_interleaving_shrinks_the_bubble_and_holds_more_activations():
    one = schedules.schedule_summary("1f1b", 4, 8)
    inter = schedules.schedule_summary("interleaved", 4, 8, v=2)
    assert inter["bubble"] < one["bubble"]
    assert one["peak_in_flight"] == [4, 3, 2, 1]          # rank r holds p - r micro-batches
    assert inter["peak_in_flight"][0] > one["peak_in_flight"][0]
    assert schedules.schedule_summary("gpipe", 4, 8)["peak_in_flight"] == [8] * 4


def test_every_action_once_and_chunks_in_range():
    for kind, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 3)):
        for r in range(4):
            acts = schedules.actions(kind, 4, 8, r, v)
            want = sorted((k, i, c) for k in "FB" for i in range(8) for c in range(v))
            assert sorted(acts) == want


def test_schedule_arguments_are_checked():
    with pytest.raises(ValueError, match="multiple of p"):
        schedules.actions("interleaved", 4, 6, 0, 2)
    with pytest.raises(ValueError, match="schedule"):
        schedules.actions("zigzag", 2, 2, 0)
    with pytest.raises(ValueError, match="v=2"):
        schedules.actions("1f1b", 2, 2, 0, 2)
    with pytest.raises(ValueError, match="rank"):
        schedules.actions("gpipe", 2, 2, 2)
    with pytest.raises(ValueError, match="m=0"):
        schedules.bubble_theory(2, 0)


# ------------------------------------------------------------------------- the explainers

def _events(p, m, kind="gpipe", slow_rank=None, slow=1.0, gap=0.0, late=False):
    """A hand-made timeline: simulate, make one rank's backward `slow` x longer, then delay every
    message by `gap`, or (late=True, GPipe) hold it until the sender's next step of the same kind
    has ended, as a send held back until the sender's next message would."""
    ev = schedules.simulate(kind, p, m)
    for e in ev:
        if e["rank"] == slow_rank and e["kind"] == "B":
            e["end"] = e["start"] + (e["end"] - e["start"]) * slow
    ev = bubble.replay(ev)
    if not gap and not late:
        return ev
    by = {r: sorted((e for e in ev if e["rank"] == r), key=lambda e: e["start"]) for r in range(p)}
    nxt = {(r, a["kind"], a["mb"]): (r, b["kind"], b["mb"]) for r in by for a, b in zip(by[r], by[r][1:])
           if a["kind"] == b["kind"]}
    done, out = {}, []
    pos, free = [0] * p, [0.0] * p
    while any(pos[r] < len(by[r]) for r in range(p)):
        progressed = False
        for r in range(p):
            if pos[r] >= len(by[r]):
                continue
            e = by[r][pos[r]]
            dep = bubble._dep(e, p)
            if dep is not None and dep[0] != r and late and dep in nxt:
                dep = nxt[dep]                   # the message leaves with the sender's next step
            if dep is not None and dep not in done:
                continue
            ready = done[dep] + (gap if dep[0] != r else 0.0) if dep else 0.0
            start = max(free[r], ready)
            done[(r, e["kind"], e["mb"])] = free[r] = start + e["end"] - e["start"]
            out.append({**e, "start": start, "end": free[r]})
            pos[r] += 1
            progressed = True
        assert progressed, "the hand-made timeline deadlocks"
    return out


def test_equal_steps_and_free_messages_give_the_formula():
    ev = schedules.simulate("1f1b", 4, 8)
    d = bubble.bubble_parts(ev)
    assert d["measured"] == pytest.approx(d["theory"]) and abs(d["gaps"]) < 1e-12
    assert "formula holds" in bubble.explain_bubble(ev, "a test")


def test_unequal_steps_are_named_and_gaps_are_not():
    ev = _events(2, 8, slow_rank=1, slow=2.0)
    d = bubble.bubble_parts(ev)
    assert d["step_times"] > 0.05 and abs(d["gaps"]) < 1e-9
    text = bubble.explain_bubble(ev, "a test")
    assert "above it" in text and "step times themselves add" in text and "between steps" not in text
    assert "rank 1" in text


def test_message_delays_are_the_gaps_and_the_cause_stays_unknown():
    ev = _events(2, 8, gap=0.5)
    d = bubble.bubble_parts(ev)
    assert d["gaps"] > 0.02 and abs(d["step_times"]) < 1e-9
    assert d["handoff_s"]["forward"] == pytest.approx(0.5)
    text = bubble.explain_bubble(ev, "a test")
    assert "time between steps adds" in text and "cause unknown" in text and "step times are even" in text


def test_messages_held_until_the_next_step_are_detected():
    ev = _events(2, 8, late=True)
    assert bubble.late_by_a_step(ev) >= 0.5
    assert "left late" in bubble.explain_bubble(ev, "a test")
    assert bubble.late_by_a_step(_events(2, 8, gap=0.01)) == 0.0


def test_parts_add_up_on_the_h200_record():
    rec = json.loads(REC.read_text())
    for key, ev in rec["timelines"].items():
        d = bubble.bubble_parts(ev)
        assert d["theory"] + d["step_times"] + d["gaps"] == pytest.approx(d["measured"]), key


def test_the_current_record_is_explained_from_its_own_numbers():
    rec = json.loads(REC.read_text())["timelines"]
    for m in (4, 16):
        g, f = rec[f"gpipe_p2_m{m}"], rec[f"1f1b_p2_m{m}"]
        text = bubble.explain_schedules(g, f, "2x H200")
        idle_g, idle_f = bubble.bubble_parts(g)["measured"], bubble.bubble_parts(f)["measured"]
        assert f"GPipe idles **{idle_g:.1%}** and 1F1B **{idle_f:.1%}**" in text
        assert ("agree to within a percentage point" in text) == (abs(idle_g - idle_f) < 0.01)


def test_schedules_compared_both_ways():
    # an earlier 2x H200 record (tests/data), whose two schedules differed: the explainer's
    # other branches on real timelines
    rec = json.loads(EARLIER.read_text())["timelines"]
    # m=16: about the same wall time, 1F1B's ranks busier
    t16 = bubble.explain_schedules(rec["gpipe_p2_m16"], rec["1f1b_p2_m16"], "2x H200")
    assert "not a shorter step" in t16 and "cause unknown" in t16
    # m=4: the same wall time; GPipe's extra idle time is the time between
    # steps, partly offset by its shorter steps -- the parts pull opposite ways, so never "most of"
    t4 = bubble.explain_schedules(rec["gpipe_p2_m4"], rec["1f1b_p2_m4"], "2x H200")
    assert "1F1B ran" in t4 and "time between steps" in t4 and "partly offset by the step times" in t4
    assert "Most of the difference" not in t4
    # the other direction: swap which schedule got the slow messages
    slow_1f1b = _events(2, 8, kind="1f1b", gap=0.5)
    t = bubble.explain_schedules(schedules.simulate("gpipe", 2, 8), slow_1f1b, "a test")
    assert "The whole step of GPipe ran" in t and "faster than 1F1B" in t
    assert "Most of the difference (11.5 points of 11.5 points) comes from the time between steps" in t
    same = bubble.explain_schedules(schedules.simulate("gpipe", 2, 8), schedules.simulate("1f1b", 2, 8), "x")
    assert "agree" in same
    with pytest.raises(ValueError, match="equal shapes"):
        bubble.explain_schedules(schedules.simulate("gpipe", 2, 8), schedules.simulate("1f1b", 2, 4), "x")

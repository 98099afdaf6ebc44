"""The part of a check that runs where the learner's code lives (their notebook, or the sandbox):
turn the answer into data. Values are taken as they are; a function is called on the checker's
cases and its outputs (or what it raised) are recorded. Nothing here decides a verdict.
"""
from __future__ import annotations

from typing import Any

from .codec import Opaque, Raised, raised
from .registry import probe_function


def call(target: Any, args: tuple) -> Any:
    """target(*args) as data: its output, or a Raised for an exception (interrupts still propagate)."""
    try:
        return target(*args)
    except Exception as exc:  # the learner's error is part of the answer, not a crash of the check
        return raised(exc)


def probe(plan: dict, values: tuple) -> dict:
    """The answer of one check as a dict of plain values, from the values given to `check`.

    plan: {"cases": list of argument tuples or None, "instantiate": bool, "probe": name or None}.
    """
    cases = plan.get("cases")
    if cases is None:
        return {"values": list(values)}
    if not values:
        return {"results": [Raised("TypeError", "check() was given no answer")] * len(cases), "values": []}
    target, rest = values[0], list(values[1:])
    if plan.get("instantiate") and isinstance(target, type):
        try:
            target = target()
        except Exception as exc:
            return {"results": [raised(exc)] * len(cases), "values": rest}
    if plan.get("probe"):
        return {"probe": probe_function(plan["probe"])(target, cases), "values": rest}
    if not callable(target):
        return {"results": [Opaque(type(target).__name__)] * len(cases), "values": rest, "not_callable": True}
    return {"results": [call(target, tuple(args)) for args in cases], "values": rest}

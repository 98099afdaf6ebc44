"""The words of "what just happened": comparisons whose wording follows the numbers.

Every comparative or causal sentence a notebook prints is built from the numbers it talks about
(DESIGN.md, notebook anatomy). The lesson modules' explainers use these few phrases, so that
"faster", "slower", "fits" and "about the same" mean the same thing in every lecture:

- `speed(new, old)`: times (lower is better) -> "1.53x faster than" / "1.15x slower than" /
  "about as fast as (within 3%)".
- `rate(new, old)`: throughputs (higher is better), same wording.
- `more_or_less(a, b, unit)`: "2.1 GiB more than" / "less than" / "about the same as".
- `fits(need_bytes, have_bytes)`: "fits (12.0 of 139.8 GiB)" / "does not fit (...)".
- `above_or_below(value, bound)`: "above" / "below" / "at".
- `gib(n_bytes)`: one memory unit everywhere (GiB, 2**30 bytes), said so.
- `direction(delta, above, below, same)`: the word for the sign of a difference, for sentences the
  phrases above do not fit ("0.12 ms slower than", "2 points less idle than"); modules choose their
  words through it, never with an inline `'slower' if x > 0 else 'faster'`.
- `live_vs_record(live, recorded, ...)`: a figure measured in this run, named as this run's with the
  record's beside it when the two differ by more than 15% (a busy GPU, another card, a smaller size).

Each phrase is tested in both directions and at its edges (tests/test_narrate.py).
"""
from __future__ import annotations

import math

SAME_WITHIN = 0.03     # ratios within 3% of 1 are "about the same": below timing noise of most runs


def _check(*values: float) -> None:
    for v in values:
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"a comparison needs finite positive numbers, got {v!r}")


def ratio_words(ratio: float, same_within: float = SAME_WITHIN, better: str = "faster",
                worse: str = "slower", same: str = "about as fast as") -> str:
    """'1.53x faster than' for ratio 1.53 (>1 is better), '1.15x slower than' for 0.87, 'about as fast as'
    within `same_within` of 1."""
    _check(ratio)
    if abs(ratio - 1.0) <= same_within:
        return f"{same} (within {same_within:.0%})"
    if ratio > 1.0:
        return f"{ratio:.2f}x {better} than"
    return f"{1.0 / ratio:.2f}x {worse} than"


def speed(new_s: float, old_s: float, same_within: float = SAME_WITHIN) -> str:
    """Compare two times (seconds; lower is better): how `new` runs against `old`."""
    _check(new_s, old_s)
    return ratio_words(old_s / new_s, same_within)


def rate(new: float, old: float, same_within: float = SAME_WITHIN) -> str:
    """Compare two throughputs (higher is better): how `new` runs against `old`."""
    _check(new, old)
    return ratio_words(new / old, same_within)


def more_or_less(a: float, b: float, unit: str = "", same_within: float = SAME_WITHIN) -> str:
    """'0.6 GiB more than' / 'less than' / 'about the same as' for two non-negative amounts."""
    for v in (a, b):
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"an amount must be finite and >= 0, got {v!r}")
    scale = max(a, b)
    if scale == 0 or abs(a - b) <= same_within * scale:
        return "about the same as"
    sep = " " if unit else ""
    return f"{abs(a - b):.3g}{sep}{unit} {'more' if a > b else 'less'} than"


def above_or_below(value: float, bound: float, same_within: float = 0.0) -> str:
    """'above', 'below' or 'at' (within `same_within`, relative)."""
    if abs(value - bound) <= same_within * max(abs(bound), 1e-300):
        return "at"
    return "above" if value > bound else "below"


def direction(delta: float, above: str, below: str, same: str | None = None, tolerance: float = 0.0) -> str:
    """`above` when delta > tolerance, `below` when delta < -tolerance, else `same` (which must be
    given when a zero difference can occur)."""
    if not isinstance(delta, (int, float)) or math.isnan(delta):
        raise ValueError(f"a direction needs a number, got {delta!r}")
    if delta > tolerance:
        return above
    if delta < -tolerance:
        return below
    if same is None:
        raise ValueError(f"difference {delta!r} is within {tolerance!r} of zero and no word for 'the same' was given")
    return same


def gib(n_bytes: float) -> float:
    """Bytes in GiB (2**30): the one memory unit of the course's text."""
    return n_bytes / 2**30


def fits(need_bytes: float, have_bytes: float) -> str:
    """'fits (12.0 of 139.8 GiB)' or 'does not fit (148.7 GiB needed, 139.8 GiB available)'."""
    if need_bytes < 0 or have_bytes <= 0:
        raise ValueError(f"need {need_bytes!r} must be >= 0 and have {have_bytes!r} > 0 bytes")
    if need_bytes <= have_bytes:
        return f"fits ({gib(need_bytes):.1f} of {gib(have_bytes):.1f} GiB)"
    return f"does not fit ({gib(need_bytes):.1f} GiB needed, {gib(have_bytes):.1f} GiB available)"


RECORD_AGREES_WITHIN = 0.15   # DESIGN.md, performance method: past 15%, a live figure is named as this run's


def agrees_with_record(live: float, recorded: float, within: float = RECORD_AGREES_WITHIN) -> bool:
    """Whether a live figure is within `within` (relative to the record) of the recorded one."""
    _check(live, recorded)
    return abs(live - recorded) <= within * recorded


def live_vs_record(live: float, recorded: float | None, unit: str = "", digits: int = 1,
                   within: float = RECORD_AGREES_WITHIN, why: str = "") -> str:
    """A live figure as a notebook states it, next to the record of the same GPU.

    '794.1 TFLOP/s' where there is no record or the two agree within 15%; otherwise
    '615.0 TFLOP/s in this run (the record: 794.1, 23% lower)', so an executed copy never prints
    another run's number as the GPU's own. `why`: what the caller knows makes the two differ (e.g.
    'the record's model has 337M parameters, this one 29.7M'), added after a semicolon; no cause is
    guessed without it."""
    sep = " " if unit else ""
    text = f"{live:,.{digits}f}{sep}{unit}"
    if recorded is None or agrees_with_record(live, recorded, within):
        return text
    off = abs(live - recorded) / recorded
    direction = "lower" if live < recorded else "higher"
    return f"{text} in this run (the record: {recorded:,.{digits}f}, {off:.0%} {direction}" + (f"; {why})" if why else ")")

"""Checks for notebook 10 (capstone)."""
from __future__ import annotations

import math

from .. import exercise


def _rows() -> list[list[dict]]:
    return [
        [{"name": "engine: continuous + paged KV", "throughput_tok_s": 900.0},
         {"name": "engine: + async loop", "throughput_tok_s": 1200.0},
         {"name": "HF generate", "throughput_tok_s": 300.0},
         {"name": "HF generate_batch", "skipped": "off at this size"}],
        [{"name": "HF generate", "throughput_tok_s": 2.5e3},
         {"name": "engine: + CUDA graphs", "throughput_tok_s": 4.0e4},
         {"name": "HF generate_batch", "throughput_tok_s": 5.0e3}],
    ]


@exercise("10.ratios")
def ratios(fn) -> None:
    for rows in _rows():
        peer = next(r["throughput_tok_s"] for r in rows if r["name"] == "HF generate")
        expected = {r["name"]: r["throughput_tok_s"] / peer for r in rows if "throughput_tok_s" in r}
        found = fn([dict(r) for r in rows])
        assert isinstance(found, dict), f"expected a dict name -> ratio, found {type(found).__name__}"
        assert set(found) == set(expected), (
            f"expected one ratio per measured row {sorted(expected)} (skipped rows left out), "
            f"found keys {sorted(found)}")
        for name, value in expected.items():
            assert math.isclose(found[name], value, rel_tol=1e-9), (
                f"{name}: expected throughput / HF generate's = {value:.4g}, found {found[name]!r}")

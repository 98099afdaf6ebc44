"""Notebook 08's tiles widget, headless: each control changes the figures and the numbers, and the
numbers are the pure functions' (tiles, IO counts, the online-softmax row)."""
from __future__ import annotations

import time

import pytest
import torch

from course_kit.attention import io_complexity, tiles
from course_kit.widgets.attention import TilesExplorer

SRAM = (228 * 1024, "H200 shared memory per SM (test)")


def _tile_z(fig):
    return [list(r) for r in fig.data[0].z]


def test_initial_state_matches_the_pure_functions():
    e = TilesExplorer(seq_len=1000, block_m=128, block_n=64, causal=True, sram=SRAM)
    assert e.numbers["counts"] == tiles.tile_counts(tiles.tile_grid(1000, 128, 64, True))
    assert e.numbers["kernel"] == io_complexity.kernel_accesses(1000, 128, 128, 64, True)
    assert e.numbers["flash"] == io_complexity.flash_accesses(1000, 128, 228 * 1024 // 2)
    assert "56</b> tiles unmasked" in e.text.value and "228 KiB" in e.text.value
    assert [r.name for r in e.tiles_figure.data][1:] == ["no mask: 56", "masked: 16", "skipped: 56"]
    assert e.step.max == len(e.walk.steps) == 16          # last row sees all 1000 keys, 64 at a time


def test_controls_change_figures_and_numbers():
    e = TilesExplorer(seq_len=512, block_m=64, block_n=64, causal=True, sram=SRAM)
    z0, text0, traffic0 = _tile_z(e.tiles_figure), e.text.value, e.traffic_figure.data[0].x
    e.causal.value = False
    assert e.numbers["counts"]["skipped"] == 0 and _tile_z(e.tiles_figure) != z0 and e.text.value != text0
    assert e.traffic_figure.data[0].x != traffic0       # the mask pass leaves standard attention's count
    z1 = _tile_z(e.tiles_figure)
    e.block_m.value = 128
    assert len(_tile_z(e.tiles_figure)) == 4 and _tile_z(e.tiles_figure) != z1
    k0 = e.numbers["kernel"]
    e.head_dim.value = 64
    assert e.numbers["kernel"] < k0
    e.seq_len.value = 2048
    assert e.row.max == 2047 and e.row.value == 2047
    assert e.numbers["counts"]["no mask"] == 16 * 32


def test_row_stepper_follows_the_online_softmax():
    e = TilesExplorer(seq_len=300, block_m=64, block_n=32, causal=True, sram=SRAM)
    e.row.value = 99                                     # causal: sees keys 0..99, four blocks of 32
    assert e.step.max == 4 and e.step.value == 1
    fig1, text1 = e.row_figure.layout.title.text, e.row_text.value
    e.step.value = 4
    assert e.row_figure.layout.title.text != fig1 and e.row_text.value != text1
    last = e.walk.steps[-1]
    scores = (e._k[:100].double() @ e._q[99].double()) / 4.0
    exact = torch.softmax(scores, 0) @ e._v[:100].double()
    assert torch.allclose(torch.tensor(last["out"], dtype=torch.float64), exact, atol=1e-12)
    assert last["m"] == pytest.approx(scores.max().item())
    assert f"{last['m']:.4f}" in e.row_text.value and "block 4 of 4" in e.row_text.value
    e.causal.value = False                               # every row sees all 300 keys
    assert e.step.max == 10


def test_responsive_and_refuses_bad_values():
    e = TilesExplorer(seq_len=1024, sram=SRAM)
    t = time.perf_counter()
    e.seq_len.value = 4096
    e.block_n.value = 32
    assert time.perf_counter() - t < 4.0      # generous on a loaded 2-core CI; ~0.2 s each when idle
    with pytest.raises(ValueError, match="block_m must be one of"):
        TilesExplorer(block_m=48)
    with pytest.raises(ValueError, match="seq_len must be in"):
        TilesExplorer(seq_len=8)


def test_readable_figures():
    import json
    from pathlib import Path
    from course_kit.plots import attention as aplots
    # the causal-tiles title is short enough never to be cut; its counts are in the legend
    fig = aplots.causal_tiles_figure(1000, 128, 64)
    assert len(fig.layout.title.text) < 40 and "skipped: 56" in [t.name for t in fig.data]
    # the roofline names kernels in the legend (no overlapping text) and keeps one ridge label
    ref = Path(__file__).resolve().parents[1] / "data" / "reference" / "h200"
    rec, roof = (json.loads((ref / f"{t}.json").read_text()) for t in ("attention", "roofline"))
    fig = aplots.attention_roofline(rec["results"], rec["summary"]["acceptance_shape"], roof)
    assert not any(t.mode and "text" in t.mode for t in fig.data)
    points = {r["variant"] for r in rec["results"]}       # the kernels, named as the record names them
    # the kernels' dtype only: bf16's measured roof and ridge, and its datasheet roof (one grey legend entry)
    roofs = [t.name for t in fig.data if t.name not in points and t.legendgroup != "spec"]
    assert roofs and all(name.startswith("bf16") for name in roofs), roofs
    assert all(t.name.startswith(("bf16", "datasheet")) for t in fig.data if t.legendgroup == "spec")
    assert {t.name for t in fig.data if t.mode == "markers"} >= {"naive", "triton", "sdpa flash"}


def test_log_axes_are_labelled_at_the_plotted_lengths():
    """Issue 42: a dtick of log10(2) labelled a tick '8,192.001'; the ticks are now the S values."""
    from course_kit.plots import attention as aplots
    rows = [{"variant": v, "seq_len": s, "head_dim": 128, "causal": True, "median_s": 1e-3 * s / 512,
             "peak_bytes": s * 1e3, "tflops": 100.0} for v in ("naive", "triton") for s in (512, 1024, 4096, 8192)]
    fig = aplots.time_memory_figure(rows)
    assert list(fig.layout.xaxis.tickvals) == [512, 1024, 4096, 8192]
    assert list(fig.layout.xaxis.ticktext) == ["512", "1,024", "4,096", "8,192"]
    sweep = aplots.sweep_figure([{"seq_len": s, "head_dim": 128, "causal": True, "per_call": 1.1, "graph": 1.3}
                                 for s in (512, 8192, 16384)])
    assert list(sweep.layout.xaxis.ticktext) == ["512", "8,192", "16,384"] and sweep.layout.xaxis.dtick is None

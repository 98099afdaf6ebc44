"""Notebook 08's new pure pieces: IO counts (against hand counts), tiles, one row stepped through
the online softmax, the Triton/xFormers probes (with triton made unimportable), and the explainers
in both directions."""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from course_kit.attention import explain, io_complexity as io, row_steps, tiles

ROOT = Path(__file__).resolve().parents[1]


# ---- IO counts: hand counts on tiny cases -------------------------------------------------------

def test_standard_accesses_hand_count():
    # N=4, d=2. Algorithm 0: read Q, K (8 + 8), write S (16); read S (16), write P (16);
    # read P (16) and V (8), write O (8): 96.
    assert io.standard_accesses(4, 2) == 8 + 8 + 16 + 16 + 16 + 16 + 8 + 8 == 96
    assert io.standard_accesses(4, 2, causal=True) == 96 + 16 + 16      # the mask reads and writes S


def _simulate_algorithm_1(n: int, d: int, m: int) -> int:
    """Algorithm 1 of Dao et al. (2022) walked line by line, counting every HBM element moved."""
    b_c = math.ceil(m / (4 * d))
    b_r = min(b_c, d)
    count = n * d + n + n                                  # line 2: O, l, m initialised in HBM
    for j0 in range(0, n, b_c):
        rows_kv = min(b_c, n - j0)
        count += 2 * rows_kv * d                           # line 6: load K_j, V_j
        for i0 in range(0, n, b_r):
            rows_q = min(b_r, n - i0)
            count += rows_q * d + rows_q * d + rows_q + rows_q   # line 8: Q_i, O_i, l_i, m_i
            count += rows_q * d + rows_q + rows_q                # lines 12-13: write O_i, l_i, m_i
    return count


def test_flash_accesses_hand_count():
    # N=4, d=2, M=16: B_c = 2, B_r = 2, T_c = 2. Init 16; K, V 16; per key block 2 x (12 read + 8 written).
    assert io.flash_block_sizes(2, 16) == (2, 2)
    assert io.flash_accesses(4, 2, 16) == 16 + 16 + 2 * (2 * 12 + 2 * 8) == 112
    for n, d, m in [(4, 2, 16), (37, 8, 100), (128, 16, 1000), (100, 64, 4096)]:
        assert io.flash_accesses(n, d, m) == _simulate_algorithm_1(n, d, m)


def test_kernel_accesses_hand_count():
    # N=5, d=2, 2x2 blocks, causal: query block 0 loads key rows 0-1 (2), block 1 rows 0-3 (4),
    # block 2 rows 0-4 (5). K and V: 2 * 2 * 11 = 44; Q 10, O 10, one lse per row 5: 69.
    assert tiles.visited_key_rows(5, 2, 2, causal=True) == [2, 4, 5]
    assert io.kernel_accesses(5, 2, 2, 2, causal=True) == 44 + 10 + 10 + 5
    assert io.kernel_accesses(5, 2, 2, 2, causal=False) == 2 * 2 * 15 + 25


def test_algorithm_1_loads_k_and_v_once_and_rereads_q_o_t_c_times():
    """Dao et al. 2022, Algorithm 1: K_j, V_j are loaded once, in the outer loop (2Nd whatever M is);
    Q_i, O_i, ℓ_i, m_i are re-read and O_i, ℓ_i, m_i re-written once per key block, T_c = ⌈N/B_c⌉
    ≈ 4Nd/M times (issue 41 item 11: not 'K and V stream past every query block')."""
    n, d = 4096, 128
    for m in (4096, 32768, 116736):
        parts = io.flash_access_parts(n, d, m)
        assert parts["K, V"] == 2 * n * d                                   # independent of M
        assert parts["T_c"] == math.ceil(n / math.ceil(m / (4 * d)))
        assert parts["Q, O, ℓ, m"] == parts["T_c"] * (3 * n * d + 4 * n)
        assert parts["T_c"] == pytest.approx(4 * n * d / m, rel=0.05)        # T_c ≈ 4Nd/M
    # more SRAM: the same K/V traffic, fewer passes over Q and O
    small, big = io.flash_access_parts(n, d, 32768), io.flash_access_parts(n, d, 65536)
    assert small["K, V"] == big["K, V"] and big["Q, O, ℓ, m"] < small["Q, O, ℓ, m"]


def test_theorem_2_and_proposition_3_scales():
    """Theorem 2: Θ(Nd + N²) and Θ(N²d²/M); the exact counts stay within constant factors of those
    scales over the theorem's whole range d <= M <= Nd (Proposition 3 says no exact algorithm beats
    N²d²/M for all such M, so Algorithm 1 is optimal up to that constant)."""
    n, d = 2048, 64
    for m in (d, 4 * d, 64 * d, 1024, 8192, n * d // 4, n * d):
        r = io.flash_accesses(n, d, m) / io.theta_flash(n, d, m)
        assert 3.0 <= r <= 16.0, (m, r)      # T_c·3Nd ≈ (4Nd/M)·3Nd = 12·N²d²/M in the middle of the range
    assert io.flash_accesses(n, d, 8192) / io.theta_flash(n, d, 8192) == pytest.approx(12, rel=0.05)
    for n2 in (256, 1024, 8192):
        assert 1.0 <= io.standard_accesses(n2, d) / io.theta_standard(n2, d) <= 4.0
    # the Theta forms: N^2 d^2 / M grows like N^2 and falls like 1/M
    assert io.theta_flash(2048, 64, 1000) == pytest.approx(4 * io.theta_flash(1024, 64, 1000))
    assert io.theta_flash(1024, 64, 2000) == pytest.approx(io.theta_flash(1024, 64, 1000) / 2)
    # more SRAM, fewer accesses; a tiny SRAM is worse than standard attention
    m = 228 * 1024 // 2
    assert io.flash_accesses(4096, 128, 2 * m) < io.flash_accesses(4096, 128, m)
    assert io.flash_accesses(1024, 128, 512) > io.standard_accesses(1024, 128)


def test_the_advantage_levels_off_instead_of_growing():
    """Issue 41 item 13: Theorem 2's ratio is M/(Nd) + M/d², which falls toward M/d² as N grows;
    the exact counts level off too, at 4·B_c/(3d + 4). At the H200's 228 KiB and bf16, d = 128."""
    d, m = 128, 228 * 1024 // 2
    for n in (512, 4096, 65536):
        assert io.theta_ratio(n, d, m) == pytest.approx(m / (n * d) + m / d ** 2)
    thetas = [io.theta_ratio(n, d, m) for n in (1024, 4096, 16384, 65536)]
    assert thetas == sorted(thetas, reverse=True) and thetas[-1] > io.theta_ratio_limit(d, m) == m / d ** 2
    assert thetas[-1] == pytest.approx(m / d ** 2, rel=0.01)
    exact = [io.standard_accesses(n, d) / io.flash_accesses(n, d, m) for n in (4096, 16384, 65536, 262144)]
    limit = io.flash_ratio_limit(d, m)
    assert all(1 < r < limit for r in exact) and exact[-1] == pytest.approx(limit, rel=0.01)
    assert exact[-1] / exact[1] < 1.01          # a 16x longer sequence gains under 1% more
    assert limit == pytest.approx(m / (3 * d ** 2), rel=0.02)


def test_io_errors_and_sram():
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        io.standard_accesses(0, 64)
    with pytest.raises(ValueError, match="sram_elements"):
        io.flash_accesses(64, 64, 0)
    assert io.sram_bytes_for((9, 0)) == 228 * 1024 and io.sram_bytes_for((7, 5)) == 64 * 1024
    assert io.sram_bytes_for(None) is None
    n_bytes, source = io.sram_here()
    assert n_bytes > 0 and source
    assert io.hbm_bytes(10, 4, 2) == 80.0


# ---- tiles ---------------------------------------------------------------------------------------

def test_tile_grid_matches_the_kernel_bounds():
    g = tiles.tile_grid(5, 2, 2, causal=True)
    assert g == [["masked", "skipped", "skipped"], ["no mask", "masked", "skipped"], ["no mask", "no mask", "masked"]]
    assert tiles.tile_counts(g) == {"no mask": 3, "masked": 3, "skipped": 3}
    # non-causal: every tile computed; only a ragged last key block needs bounds checks
    g = tiles.tile_grid(5, 2, 2, causal=False)
    assert all(row == ["no mask", "no mask", "masked"] for row in g)
    assert tiles.tile_counts(tiles.tile_grid(256, 64, 64, causal=False)) == {"no mask": 16, "masked": 0, "skipped": 0}
    # causal computes about half of the scores
    assert tiles.computed_fraction(4096, 128, 128, causal=False) == 1.0
    assert 0.5 < tiles.computed_fraction(4096, 128, 128, causal=True) < 0.52
    with pytest.raises(ValueError, match="block_n must be an integer >= 1"):
        tiles.tile_grid(10, 2, 0)


def test_tile_grid_against_the_masked_scores():
    # a tile is computed iff it holds at least one visible score (j <= i), and "no mask" iff all are
    s, bm, bn = 77, 16, 8
    visible = torch.ones(s, s, dtype=torch.bool).tril()
    for i, row in enumerate(tiles.tile_grid(s, bm, bn, causal=True)):
        for j, state in enumerate(row):
            block = visible[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
            assert (state != "skipped") == bool(block.any())
            if state == "no mask":
                assert bool(block.all()) and block.shape[1] == bn


# ---- one row through the online softmax ---------------------------------------------------------

def test_row_walk_ends_at_the_attention_row():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(16, generator=g), torch.randn(50, 16, generator=g), torch.randn(50, 16, generator=g)
    walk = row_steps.row_walk(q, k, v, block_n=8, visible=37)
    assert [s["start"] for s in walk.steps] == [0, 8, 16, 24, 32] and walk.steps[-1]["end"] == 37
    ref = torch.softmax((k[:37].double() @ q.double()) / 4.0, 0) @ v[:37].double()
    assert torch.allclose(torch.tensor(walk.steps[-1]["out"], dtype=torch.float64), ref, atol=1e-12)
    # the running max never falls; alpha is 1 exactly when it did not grow
    ms = [s["m"] for s in walk.steps]
    assert ms == sorted(ms) and ms[-1] == pytest.approx(max(walk.scores))
    for prev, step in zip(walk.steps, walk.steps[1:]):
        assert (step["alpha"] == 1.0) == (step["m"] == prev["m"])
    assert walk.steps[-1]["l"] == pytest.approx(sum(math.exp(x - ms[-1]) for x in walk.scores))
    with pytest.raises(ValueError, match="visible must be in"):
        row_steps.row_walk(q, k, v, 8, visible=51)


# ---- probes: Triton made unimportable -------------------------------------------------------------

def _run(code: str, extra_path: Path | None = None) -> str:
    env_code = textwrap.dedent(code)
    cmd = [sys.executable, "-c", env_code]
    import os
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(extra_path or ""), str(ROOT)) if p)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_triton_guard_without_triton():
    out = _run("""
        import sys
        sys.modules['triton'] = None            # as if triton were not installed
        from course_kit.attention import availability, naive, tiled
        ok, why = availability.triton_status()
        print(ok, '|', why)
        from course_kit.benchmarks import attention as b
        import torch
        print(sorted(b.variants(torch.device('cpu'), torch.float32)))
    """)
    first, second = out.strip().splitlines()
    assert first.startswith("False | triton is not installed")
    assert "triton" not in second and "naive" in second


def test_triton_guard_with_a_broken_triton(tmp_path):
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("raise ImportError('built for another Python')\n")
    out = _run("""
        from course_kit.attention import availability
        ok, why = availability.triton_status()
        print(ok, '|', why)
    """, extra_path=tmp_path)
    assert out.startswith("False |") and "built for another Python" in out


def test_xformers_probe_says_why(tmp_path):
    from course_kit.attention import availability
    ok, why = availability.xformers_status()
    if not ok:
        assert "xformers" in why.lower()
    (tmp_path / "xformers").mkdir()
    (tmp_path / "xformers" / "__init__.py").write_text("raise OSError('undefined symbol: _ZN3c10')\n")
    out = _run("""
        from course_kit.attention import availability
        import torch
        q = torch.randn(1, 1, 8, 8)
        print(availability.xformers_status(), availability.xformers_probe(q, q, q))
    """, extra_path=tmp_path)
    assert out.count("undefined symbol") == 2 and "False" in out


# ---- explainers, both directions and the edges --------------------------------------------------

def test_times_more_or_less():
    assert explain.times_more_or_less(1, 4, "memory") == "4x less memory than"
    assert explain.times_more_or_less(3, 2) == "1.5x more than"
    assert explain.times_more_or_less(1.02, 1.0, "memory") == "about the same memory as"
    with pytest.raises(ValueError):
        explain.times_more_or_less(0, 1)


def test_explain_naive_growth_both_ways():
    row = lambda s, p: {"seq_len": s, "peak_MiB": p, "scores_MiB": p / 3}   # noqa: E731
    assert "as the square law predicts" in explain.explain_naive_growth(row(128, 1), row(256, 4))
    less = explain.explain_naive_growth(row(128, 1), row(256, 2))
    assert "less than the square law's 4x" in less and "2.0x" in less
    assert "more than the square law's 4x; this run does not show why" in explain.explain_naive_growth(row(128, 1), row(256, 9))


def test_explain_tiled_memory_both_ways():
    assert "4x less memory than naive" in explain.explain_tiled_memory(2**28, 2**30, 1024)
    assert "never allocated" in explain.explain_tiled_memory(2**28, 2**30, 1024)
    worse = explain.explain_tiled_memory(2**31, 2**30, 1024)
    assert "2x more memory than naive" in worse and "never allocated" not in worse


def test_explain_io_row_names_the_bound():
    gbs, peak = 4000.0, 800.0
    # memory-bound: 40 GB at 4000 GB/s = 10 ms of 12 ms; FLOPs 1e12 at 800 TFLOP/s = 1.25 ms
    mem = explain.explain_io_row("naive", 40e9, 0.012, 1e12, gbs, peak)
    assert "memory-bound" in mem and "83%" in mem and "compute-bound" not in mem
    # compute-bound: 0.1 GB (25 us) of 1 ms; 6e11 FLOPs at 800 TFLOP/s = 0.75 ms
    comp = explain.explain_io_row("triton", 1e8, 1e-3, 6e11, gbs, peak)
    assert "compute-bound" in comp and "memory-bound" not in comp
    # both shares above one half: the run cannot tell (the H200 record's Triton: 92% and 57%)
    both = explain.explain_io_row("triton (TMA)", 2.35e9, 0.6e-3, 2.75e11, 4262.0, 800.7)
    assert "cannot tell which bounds it" in both and "-bound" not in both.split("cannot tell")[0]
    # neither: what the count leaves out is named as not counted, not as a cause
    neither = explain.explain_io_row("tiled", 1e8, 1e-2, 1e11, gbs, peak, uncounted="eager tiles")
    assert "does not show what the rest is" in neither and "Not counted: eager tiles." in neither
    # no peak known: memory share alone decides; the edge at exactly one half
    assert "memory-bound" in explain.explain_io_row("x", 2e9, 1e-3, 1.0, gbs, None)
    assert "does not show" in explain.explain_io_row("x", 1.9e9, 1e-3, 1.0, gbs, None)
    # faster than the bytes allow
    assert "overstates" in explain.explain_io_row("x", 8e9, 1e-3, 1.0, gbs, None)
    # FLOPs faster than the measured matmul "peak": that rate is left out, memory decides
    odd = explain.explain_io_row("naive", 3.7e6, 0.5e-3, 1.7e7, 8.0, 0.0084)
    assert "no ceiling" in odd and "compute-bound" not in odd and "memory-bound" in odd


def test_explain_ratios_both_ways():
    fast = explain.explain_ratios({"triton_variant": "triton (TMA)", "triton_tflops": 458, "triton_over_flash": 1.51,
                                   "triton_over_cudnn": 0.79})
    assert "1.51x faster than the SDPA flash backend" in fast and "1.27x slower than the cuDNN backend" in fast
    assert "slower than the SDPA flash" not in fast
    assert "target" not in fast and "met" not in fast.split()
    assert "about as fast as" in explain.explain_ratios({"triton_variant": "t", "triton_tflops": 1, "triton_over_flash": 1.01})
    assert "no Triton timing" in explain.explain_ratios({})


def test_explain_fastest_and_backward():
    text = explain.explain_fastest({"naive": 2.0, "sdpa flash": 10.0, "triton": None}, where="at S = 256")
    assert "rate at S = 256 is **sdpa flash**" in text and "5.00x slower than sdpa flash" in text
    assert "naive reached" not in explain.explain_fastest({"naive": 3.0})
    bwd = explain.explain_backward({"triton fwd+bwd": 100.0, "sdpa flash fwd+bwd": 200.0})
    assert "2.00x slower than FlashAttention-2's" in bwd and "plain" not in bwd
    fast = explain.explain_backward({"triton fwd+bwd": 300.0, "sdpa flash fwd+bwd": 200.0, "sdpa cudnn fwd+bwd": 400.0})
    assert "1.50x faster than FlashAttention-2's" in fast and "cuDNN's run 1.33x faster than the course's" in fast


def test_explain_sweep_both_ways():
    from course_kit.benchmarks.attention import sweep_against_flash

    def row(variant, s, tflops, graph_tflops, causal=True):
        return {"variant": variant, "batch": 4, "heads": 16, "seq_len": s, "head_dim": 128, "causal": causal,
                "median_s": 1.0 / tflops, "tflops": tflops, "graph_median_s": 1.0 / graph_tflops,
                "graph_tflops": graph_tflops}
    # ahead everywhere, per call and in graphs
    ahead = sweep_against_flash([row("triton", 4096, 500, 510), row("sdpa flash", 4096, 300, 310),
                                 row("triton (TMA)", 512, 90, 200), row("sdpa flash", 512, 80, 150)])
    text = explain.explain_sweep(ahead)
    assert "never slower than SDPA flash at any of the 2 shapes" in text and "never slower than flash either" in text
    assert ahead["sweep_min_over_flash_graph"]["seq_len"] == 512
    # behind per call at a short, host-bound shape, ahead in GPU time
    host = sweep_against_flash([row("triton", 4096, 500, 510), row("sdpa flash", 4096, 300, 310),
                                row("triton", 512, 40, 200), row("sdpa flash", 512, 80, 150)])
    text = explain.explain_sweep(host)
    assert "slower than flash at 1 of 2 shapes (S = 512, D = 128, causal: 2.00x slower than flash" in text
    assert "5.0x its GPU time, so the host's launch" in text and "never slower than SDPA flash" in text
    # behind in GPU time too, and not host-bound: no cause invented
    slow = sweep_against_flash([row("triton", 4096, 200, 205), row("sdpa flash", 4096, 300, 310, )])
    text = explain.explain_sweep(slow)
    assert "slower than SDPA flash at 1 of 1 shapes" in text and "host's launch" not in text
    assert "no sweep" in explain.explain_sweep({})


def test_explain_roofline_sides():
    pts = [{"name": "triton", "intensity": 1000.0}, {"name": "sdpa flash", "intensity": 1000.0},
           {"name": "naive", "intensity": 30.0}]
    text = explain.explain_roofline(pts, 200.0)
    assert "**triton**, **sdpa flash** at 1,000 FLOP/B, 5x the ridge's 200: right of the ridge" in text
    assert "**naive** at 30 FLOP/B, 0.15x the ridge's 200: left of the ridge" in text
    assert "left of" not in explain.explain_roofline(pts[:1], 200.0)
    assert "right of" not in explain.explain_roofline(pts[2:], 200.0)
    assert "right of" in explain.explain_roofline([{"name": "x", "intensity": 200.0}], 200.0)   # at the ridge


def test_explain_xformers_both_ways():
    no = explain.explain_xformers(False, "ModuleNotFoundError: No module named 'xformers'")
    assert "cannot run here" in no and "No module named 'xformers'" in no
    yes = explain.explain_xformers(True, "xformers 0.0.35", {"xformers": 2e-3, "sdpa flash": 1e-3, "triton": 4e-3})
    assert "2.00x slower than **sdpa flash**" in yes and "2.00x faster than **triton**" in yes
    assert "not timed" in explain.explain_xformers(True, "xformers 0.0.35", {})


def test_explain_io_counts():
    text = explain.explain_io_counts(4096, 128, 6.9e7, 3.0e7, 228 * 1024, 116736, kernel=1.8e7)
    assert "2.3x fewer accesses than standard" in text and "228 KiB" in text
    assert "tiles above the diagonal skipped" in text
    worse = explain.explain_io_counts(1024, 128, 1e6, 3e6, 1024, 512, kernel=2e6, causal=False)
    assert "3x more accesses than standard" in worse and "diagonal" not in worse


def test_traffic_table():
    t = io.traffic(4, 2, 2, 2, False, sram_bytes=32, element_bytes=2)      # M = 16 elements
    assert (t["sram_elements"], t["standard"], t["flash"]) == (16, 96, 112)
    assert [r["bytes"] for r in t["rows"]] == [192.0, 224.0, 2.0 * t["kernel"]]
    assert t["rows"][0]["name"].startswith("standard")
    assert io.traffic(4, 2, 2, 2, True, 32, 2, batch_heads=3)["rows"][0]["bytes"] == 3 * 2 * 128


def test_notebook_08_guards_every_triton_use():
    """Issue 22: every line of notebook 08 that touches a Triton module sits under `if ok_triton`
    (or is itself guarded by `ok_triton and ...`), so the notebook runs where triton is missing."""
    import re
    src = (ROOT / "notebooks" / "src" / "08_flash_attention.py").read_text()
    uses = re.compile(r"\btriton_(flash|softmax|flash_bwd)\b")
    cells = re.split(r"^# %%.*$", src, flags=re.M)
    unguarded = []
    for cell in cells:
        lines = cell.splitlines()
        for n, line in enumerate(lines):
            if not uses.search(line) or line.lstrip().startswith("#") or "ok_triton and" in line:
                continue
            indent = len(line) - len(line.lstrip())
            guarded = False
            for above in reversed(lines[:n]):
                a_indent = len(above) - len(above.lstrip())
                if above.strip() and a_indent < indent:
                    if re.match(r"\s*if ok_triton\b", above):
                        guarded = True
                        break
                    indent = a_indent
            if not guarded:
                unguarded.append(line.strip())
    assert not unguarded, f"Triton used outside `if ok_triton:` in notebook 08: {unguarded}"
    assert "ok_triton, why_triton = availability.triton_status()" in src


def test_explain_steps_both_ways():
    steps = [{"step": "pointer", "tflops": 400.0}, {"step": "host TMA", "tflops": 480.0},
             {"step": "fewer stages", "tflops": 380.0}, {"step": "warp-specialised", "error": "failed"}]
    table = {"triton (TMA)": 470.0, "sdpa flash": 300.0, "sdpa cudnn": 600.0}
    text = explain.explain_steps(steps, table, "triton (TMA)")
    assert "**host TMA**: 480 TFLOP/s, 1.20x faster than the step before" in text
    assert "**fewer stages**: 380 TFLOP/s, 1.26x slower than the step before" in text
    assert "Not timed here: warp-specialised" in text
    assert "**triton (TMA)** at **470 TFLOP/s**, 1.57x faster than SDPA flash and 1.28x slower than cuDNN" in text
    assert "need a Hopper" in explain.explain_steps([{"step": "x", "error": "no TMA"}], {})
    assert "table of the same run" not in explain.explain_steps(steps)        # no table: no peers


def test_explain_steps_and_explain_fastest_read_the_same_numbers():
    """Issue 40: the H200 copy said cuDNN had the highest rate (578 TFLOP/s) in one cell and, from a
    separate timing pass of the steps (597), that the Gluon kernel ran 1.03x faster than cuDNN in
    another. Both now read the run's table, so they rank the kernels the same way."""
    table = {"naive": 18.7, "triton (Gluon, warp-specialised)": 570.0, "sdpa flash": 290.0, "sdpa cudnn": 578.0}
    steps = [{"step": "64-row programs", "tflops": 505.0},
             {"step": "snake order", "kernel": "gluon", "tflops": 597.0}]
    fastest = explain.explain_fastest(table, where="at S = 4096")
    text = explain.explain_steps(steps, table, "triton (Gluon, warp-specialised)")
    assert "is **sdpa cudnn** at **578 TFLOP/s**" in fastest
    assert "1.01x slower than cuDNN" in text or "about as fast as" in text.split("table of the same run")[1]
    assert "faster than cuDNN" not in text
    # and the other way round: the kernel ahead in the table is ahead in both cells
    table["triton (Gluon, warp-specialised)"] = 603.0
    assert "**triton (Gluon, warp-specialised)** at **603 TFLOP/s**" in explain.explain_fastest(table)
    assert "1.04x faster than cuDNN" in explain.explain_steps(steps, table, "triton (Gluon, warp-specialised)")


def test_explain_fastest_says_when_the_record_of_this_gpu_ranks_another_kernel_first():
    # the H200 copy of 2026-12-01: live cuDNN 578 first; the record, Gluon 603 against cuDNN 577
    live = {"naive": 18.7, "triton (Gluon, warp-specialised)": 570.0, "sdpa cudnn": 578.0}
    record = {"naive": 18.7, "triton (Gluon, warp-specialised)": 603.2, "sdpa cudnn": 577.0}
    text = explain.explain_fastest(live, "at S = 4096", record, "the NVIDIA H200 record")
    assert "is **sdpa cudnn** at **578 TFLOP/s**" in text
    assert ("The NVIDIA H200 record, a separate run at this shape, ranks **triton (Gluon, warp-specialised)** first "
            "instead (603 against 577 TFLOP/s for sdpa cudnn; here 570 against 578)") in text
    # the same leader in both runs, or no record: nothing added
    assert "separate run" not in explain.explain_fastest(record, "x", record)
    assert "separate run" not in explain.explain_fastest(live, "x", None)


def test_explain_steps_starts_a_new_kernel_from_the_old_one_at_its_best():
    steps = [{"step": "64-row programs", "tflops": 500.0}, {"step": "fewer stages", "tflops": 390.0},
             {"step": "Gluon", "kernel": "gluon", "tflops": 525.0}, {"step": "ping-pong", "kernel": "gluon", "tflops": 550.0}]
    text = explain.explain_steps(steps)
    # against the 500 of the best Triton step, not the 390 of the try listed just before it
    assert "**Gluon**: 525 TFLOP/s, 1.05x faster than the fastest step before it (64-row programs)" in text, text
    assert "**ping-pong**: 550 TFLOP/s" in text and "the step before" in text.split("**ping-pong**")[1]


def test_explain_theta_levels_off_and_names_the_theorem_s_range():
    m = 228 * 1024 // 2
    text = explain.explain_theta(8192, 128, m)
    assert "falls toward M/d² = 7.12" in text and "levels off at 2.35" in text and "outside" not in text
    cpu = explain.explain_theta(256, 64, 524288)            # a CPU's 1 MiB L2 stand-in: M > Nd
    assert "outside the theorem's range d ≤ M ≤ Nd" in cpu and "16,384" in cpu
    assert "smaller than d" in explain.explain_theta(256, 64, 32)

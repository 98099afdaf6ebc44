"""The engine's async mode gives the same tokens as the sync engine, and records a timeline."""
import dataclasses

import pytest
import torch

from course_kit.engine import Engine, SamplingParams
from course_kit.streams.async_loop import AsyncEngine, timing_summary
from course_kit.models import llama
from course_kit.models.hf import model_to_hf
from course_kit import benchmarks


@pytest.fixture(scope="module")
def model():
    # untied embeddings: a random tied tiny model tends to repeat its input token, which would
    # hide a placeholder filled from the wrong row
    cfg = dataclasses.replace(llama.ModelConfig.from_preset("tiny"), tie_embeddings=False)
    return llama.Transformer.from_config(cfg, seed=0, dtype=torch.float32, device="cpu")


@pytest.fixture(scope="module")
def prompts(model):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist()
            for n in (5, 9, 3, 12, 7, 20, 2)]


@pytest.fixture(scope="module")
def reference(model, prompts):
    return llama.generate(model, prompts, 10)


@pytest.mark.parametrize("policy", ["continuous", "static"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("padded", [False, True])
def test_greedy_tokens_match_reference(model, prompts, reference, policy, mode, padded):
    # padded: the CUDA-graph layout, decode steps padded to captured sizes (1, 2, 4 here: 3 requests run as 4 rows)
    eng = AsyncEngine(model, mode=mode, policy=policy, max_num_seqs=4 if padded else 3,
                      block_size=4, check_invariants=True)
    eng.runner.pad_shapes = padded
    outs = eng.generate(prompts, SamplingParams(max_new_tokens=10))
    assert [o.tokens for o in outs] == reference
    assert all(o.finish_reason == "length" for o in outs)
    assert eng.blocks.num_used_blocks == 0
    t = eng.timing()
    assert t["tokens"] == 70 and t["steps"] == len(eng.timeline.on("gpu"))
    assert 0.0 <= t["host_step_gap_fraction"] < 1.0 and "gpu_idle_fraction" not in t   # the host's picture


def test_matches_hf_generate(model, prompts):
    hf = model_to_hf(model).eval()
    eng = AsyncEngine(model, mode="async", max_num_seqs=4, block_size=4)
    outs = eng.generate(prompts[:3], SamplingParams(max_new_tokens=8))
    for p, o in zip(prompts[:3], outs):
        with torch.no_grad():
            ids = hf.generate(torch.tensor([p]), max_new_tokens=8, do_sample=False,
                              attention_mask=torch.ones(1, len(p), dtype=torch.long),
                              pad_token_id=0)
        assert o.tokens == ids[0, len(p):].tolist()


def test_eos_sampling_and_preemption_match_sync_engine(model, prompts, reference):
    eos = reference[1][3]   # request 1 emits it as its 4th token: finishes early in every mode
    params = ([SamplingParams(max_new_tokens=10)] * 4
              + [SamplingParams(max_new_tokens=10, temperature=0.8, seed=s) for s in range(3)])

    def run(cls, **kw):
        eng = cls(model, max_num_seqs=3, block_size=4, num_blocks=12, check_invariants=True, **kw)
        eng.eos_token_id = eos
        outs = eng.generate(prompts, params)
        assert eng.blocks.num_used_blocks == 0
        return [(o.tokens, o.finish_reason) for o in outs], eng

    base, base_eng = run(Engine)
    assert base[1] == (reference[1][:4], "eos")
    assert base_eng.scheduler.num_preemptions > 0       # the workload does force preemption
    for mode in ("sync", "async"):
        got, eng = run(AsyncEngine, mode=mode)
        assert got == base, mode
        for o in eng.sequences.values():
            assert -1 not in o.output
            assert len(o.token_times) == len(o.output)


def test_timeline_shapes(model, prompts):
    eng = AsyncEngine(model, mode="sync", max_num_seqs=4, block_size=4)
    eng.generate(prompts, SamplingParams(max_new_tokens=4))
    tl = eng.timeline
    # sync: step k's inputs are prepared before the device starts it, and the host postprocesses
    # step k before it schedules k+1
    prep = {s.name.split()[1]: s for s in tl.on("cpu") if s.name.startswith("prepare")}
    for g in tl.on("gpu"):
        assert prep[g.name.split()[1]].end_s <= g.start_s + 1e-6
    t = timing_summary(tl, 28)
    assert t["tokens"] == 28 and t["speedup_bound"] >= 1.0
    assert t["cpu_step_s_median"] > 0 and t["gpu_step_s_median"] > 0


def test_bad_mode(model):
    with pytest.raises(ValueError, match="mode"):
        AsyncEngine(model, mode="overlap")


@pytest.mark.gpu
def test_gpu_async_matches_sync_engine():
    m = llama.Transformer.from_preset("smollm-135m", seed=0, dtype=torch.bfloat16, device="cuda")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, m.config.vocab_size, (int(n),), generator=g).tolist()
               for n in torch.randint(8, 200, (24,), generator=g)]
    sp = SamplingParams(max_new_tokens=32, ignore_eos=True)
    got = {}
    for mode in ("sync", "async"):
        eng = AsyncEngine(m, mode=mode, max_num_seqs=16)
        got[mode] = [o.tokens for o in eng.generate(prompts, sp)]
        t = eng.timing()
        assert t["steps"] > 0 and "copy" in eng.timeline.lanes
        assert all(len(o) == 32 for o in got[mode])
    assert got["async"] == got["sync"]
    # and the base engine, on prompts it admits whole (no chunked prefill in this step)
    short = [p[:48] for p in prompts[:8]]     # 384 tokens at most: one step under the budget
    base = [o.tokens for o in Engine(m, max_num_seqs=16).generate(short, sp)]
    assert [o.tokens for o in AsyncEngine(m, max_num_seqs=16).generate(short, sp)] == base


def test_bench_topic_runs_on_cpu_and_headline_rule():
    from course_kit.benchmarks import async_engine
    rec = benchmarks.run_topic("async", {"size": "smoke", "batches": [2], "new_tokens": 4})
    assert rec["summary"]["tokens_identical"] is True
    assert {r["mode"] for r in rec["results"]} == {"sync", "async"}
    assert set(rec["timelines"]) == {"tiny/b2/sync", "tiny/b2/async"}
    row = rec["results"][0]
    assert "gpu_idle_fraction" not in row and 0 <= row["host_step_gap_fraction"] < 1   # no GPU: host picture
    assert rec["summary"]["headline"] is None or rec["summary"]["headline"]["idle_key"] == "host_step_gap_fraction"
    rows = [{"model": "m", "batch": 8, "mode": "sync", "host_step_gap_fraction": 0.20, "tokens_per_s": 100.0},
            {"model": "m", "batch": 8, "mode": "async", "host_step_gap_fraction": 0.02, "tokens_per_s": 122.0},
            {"model": "m", "batch": 64, "mode": "sync", "host_step_gap_fraction": 0.05, "tokens_per_s": 100.0},
            {"model": "m", "batch": 64, "mode": "async", "host_step_gap_fraction": 0.01, "tokens_per_s": 101.0}]
    h = async_engine.headline(rows)
    assert h["batch"] == 8 and h["idle_removed"] == pytest.approx(0.18) and h["idle_key"] == "host_step_gap_fraction"
    assert h["throughput_gain"] == pytest.approx(0.22) and "gpu_idle_method" not in h
    assert h["pass_async_idle_le_3pct"] and h["pass_gain_ge_0.9x_idle_removed"]
    assert async_engine.headline(rows[2:]) is None
    # with the profiler's figure on every row, the headline reads it, and names its method
    gpu = [dict(r, gpu_idle_fraction=g, gpu_idle_method="profiler kernel-interval union")
           for r, g in zip(rows, (0.30, 0.12, 0.08, 0.07))]
    h = async_engine.headline(gpu)
    assert h["idle_key"] == "gpu_idle_fraction" and h["sync_gpu_idle"] == 0.30 and h["async_idle"] == 0.12
    assert h["gpu_idle_method"] == "profiler kernel-interval union" and not h["pass_async_idle_le_3pct"]


def test_the_profiler_attributes_the_engines_work_to_its_steps(model, prompts):
    from course_kit import profiling
    eng = AsyncEngine(model, mode="sync", max_num_seqs=3, block_size=4)
    sp = SamplingParams(max_new_tokens=4)
    eng.generate(prompts, sp)
    prof = profiling.profile_run(lambda: eng.generate(prompts, sp))
    s = prof.summary
    assert s["device"] == "cpu" and s["steps"] == s["host_steps"] // 2 == len(eng.timeline.on("gpu"))
    assert s["kernels_per_step"] > 5 and 0 < s["idle_fraction"] < 1     # ops of each step, on the worker


@pytest.mark.gpu
def test_gpu_bench_async_reads_gpu_idle_from_the_profiler():
    from course_kit import profiling
    rec = benchmarks.run_topic("async", {"size": "small_gpu", "batches": [4], "new_tokens": 16, "blog": False,
                                    "progress": False})
    for row in rec["results"]:
        assert row["gpu_idle_method"] == profiling.GPU_IDLE_METHOD and 0 <= row["gpu_idle_fraction"] < 1
        assert row["gpu_idle_between_steps"] + row["gpu_idle_within_steps"] == pytest.approx(row["gpu_idle_fraction"])
        assert row["profiler_overhead"] is not None and row["kernels_per_step"] > 10


def test_step_by_step_without_generate(model, prompts, reference):
    """A serving loop drives `step()` itself; the async engine must work that way too."""
    eng = AsyncEngine(model, mode="async", max_num_seqs=3, block_size=4)
    seqs = [eng.add_request(p, SamplingParams(max_new_tokens=10)) for p in prompts]
    streamed = {s.request_id: [] for s in seqs}
    while eng.has_unfinished():
        for seq, tok in eng.step():
            streamed[seq.request_id].append(tok)
    assert [streamed[s.request_id] for s in seqs] == reference
    assert [s.output for s in seqs] == reference


def test_async_with_varlen_mixed_steps(model, prompts, reference):
    """The CUDA default layout: one Triton kernel (interpreted on CPU) over decode + prefill rows,
    mixed steps padded to a token bucket. Placeholders must land in the right rows there too."""
    eng = AsyncEngine(model, mode="async", max_num_seqs=3, block_size=4, varlen=True,
                      max_num_batched_tokens=16)
    eng.runner.pad_shapes = True
    graphs = []
    prepare = eng.runner.prepare

    def spy(*args, **kwargs):
        inputs = prepare(*args, **kwargs)
        graphs.append(inputs.graph)
        return inputs
    eng.runner.prepare = spy
    outs = eng.generate(prompts[:5], SamplingParams(max_new_tokens=6))
    assert [o.tokens for o in outs] == [r[:6] for r in reference[:5]]
    assert any(g and g[0] == "mixed" for g in graphs)   # the mixed layout was exercised


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_token_chunk_after_a_prefill_chunk(model, mode):
    """A step holding a chunked prefill and, after it, a newly admitted one-token prompt: the
    runner puts one-token rows first, so tokens must be matched to requests by row order."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, model.config.vocab_size, (20,), generator=g).tolist(), [7]]
    eng = AsyncEngine(model, mode=mode, max_num_seqs=4, block_size=4, max_num_batched_tokens=8)
    outs = eng.generate(prompts, SamplingParams(max_new_tokens=4))
    assert [o.tokens for o in outs] == llama.generate(model, prompts, 4)

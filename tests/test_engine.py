"""The engine end to end on the tiny model: token-identical to HF generate for every policy."""
import pytest
import torch

from course_kit.engine import Engine, SamplingParams
from course_kit.attention.engine_step import EngineBatch, engine_attention, gather_decode
from course_kit.attention.paged import paged_attention_reference
from course_kit.models import llama
from course_kit.models.hf import model_to_hf

PROMPT_LENS = [5, 17, 33, 9, 40, 3, 26, 12]
NEW_TOKENS = [8, 20, 5, 30, 12, 16, 3, 24]


def tiny_model(device="cpu", dtype=torch.float32):
    """The tiny preset with weights large enough that greedy outputs vary token to token."""
    model = llama.Transformer.from_preset("tiny", seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.normal_(0.0, 0.15, generator=gen)
    return model.to(device=device, dtype=dtype)


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def workload():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in PROMPT_LENS]


@pytest.fixture(scope="module")
def hf_reference(model, workload):
    hf = model_to_hf(model)
    out = []
    for p, n in zip(workload, NEW_TOKENS):
        with torch.no_grad():
            ids = hf.generate(torch.tensor([p]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        out.append(ids[0, len(p):].tolist())
    return out


@pytest.mark.parametrize("policy", ["static", "dynamic", "continuous"])
def test_greedy_matches_hf_generate(model, workload, hf_reference, policy):
    engine = Engine(model, policy=policy, max_num_seqs=3, max_num_batched_tokens=24, block_size=4,
                    check_invariants=True)
    outs = engine.generate(workload, [SamplingParams(max_new_tokens=n) for n in NEW_TOKENS])
    for i, (o, ref) in enumerate(zip(outs, hf_reference)):
        assert o.tokens == ref, f"{policy}: request {i} differs from HF generate"
        assert o.finish_reason == "length"
        assert 0.0 <= o.arrival <= o.first_token <= o.finish
    assert engine.blocks.num_used_blocks == 0
    s = engine.summary(outs)
    assert s["output_tokens"] == sum(NEW_TOKENS) and s["throughput_tok_s"] > 0
    assert 0 < s["slot_occupancy"] <= 1
    if policy == "continuous":
        assert s["padding_waste"] == 0
    else:
        assert s["padding_waste"] > 0


def test_preemption_leaves_no_leak_and_outputs_stay_correct(model, workload, hf_reference):
    # 12 blocks of 4 tokens cannot hold 3 of these requests at once: forces preemption
    engine = Engine(model, policy="continuous", max_num_seqs=3, max_num_batched_tokens=16, block_size=4,
                    num_blocks=20, check_invariants=True)
    outs = engine.generate(workload, [SamplingParams(max_new_tokens=n) for n in NEW_TOKENS])
    assert engine.scheduler.num_preemptions > 0
    assert sum(o.num_preemptions for o in outs) == engine.scheduler.num_preemptions
    assert engine.blocks.num_free_blocks == 20 and not engine.blocks.tables
    for o, ref in zip(outs, hf_reference):
        assert o.tokens == ref


def test_prefix_caching_reuses_blocks_and_keeps_outputs(model):
    g = torch.Generator().manual_seed(3)
    system = torch.randint(3, 256, (24,), generator=g).tolist()
    prompts = [system + torch.randint(3, 256, (n,), generator=g).tolist() for n in (3, 7, 1, 12)]
    params = SamplingParams(max_new_tokens=6)
    plain = Engine(model, max_num_seqs=2, block_size=4).generate(prompts, params)
    eng = Engine(model, max_num_seqs=2, block_size=4, prefix_caching=True, check_invariants=True)
    cached = eng.generate(prompts, params)
    assert [o.tokens for o in cached] == [o.tokens for o in plain]
    # the first two run together (nothing is cached yet); the last two reuse all 6 full blocks
    assert eng.blocks.prefix_hits == 2 * (24 // 4)


def test_sampled_decoding_is_seeded_and_independent_of_batching(model, workload):
    params = [SamplingParams(max_new_tokens=10, temperature=0.8, top_k=50, seed=i) for i in range(len(workload))]
    a = Engine(model, policy="continuous", max_num_seqs=4).generate(workload, params)
    b = Engine(model, policy="static", max_num_seqs=2).generate(workload, params)
    assert [o.tokens for o in a] == [o.tokens for o in b]
    greedy = Engine(model, max_num_seqs=4).generate(workload, SamplingParams(max_new_tokens=10))
    assert [o.tokens for o in a] != [o.tokens for o in greedy]


def test_trace_replay_respects_arrivals(model, workload):
    arrivals = [0.0, 0.05, 0.1, 0.1, 0.3, 0.3, 0.32, 0.4]
    engine = Engine(model, policy="continuous", max_num_seqs=4)
    outs = engine.generate(workload, SamplingParams(max_new_tokens=4), arrivals=arrivals)
    for o, a in zip(outs, arrivals):
        assert o.arrival == a and o.first_token >= a
    assert engine.steps[-1].end >= 0.4


def test_bad_requests_are_refused(model):
    engine = Engine(model, max_num_seqs=2)
    with pytest.raises(ValueError, match="outside \\[0, 256\\)"):
        engine.add_request([1, 999])
    with pytest.raises(ValueError, match="prompt is empty"):
        engine.add_request([])
    with pytest.raises(ValueError, match="more than the 512"):
        engine.add_request([1] * 500, SamplingParams(max_new_tokens=100))
    with pytest.raises(ValueError, match="unknown engine option 'batch'"):
        Engine(model, batch=3)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)


def test_engine_config_is_resolved_once_and_handed_whole_to_scheduler_and_runner(model):
    from course_kit.engine import EngineConfig
    cfg = EngineConfig(max_num_seqs=3, block_size=4, max_model_len=10 ** 6)
    engine = Engine(model, cfg)
    max_pos = model.config.max_seq_len
    assert engine.config.max_model_len == max_pos == engine.max_model_len     # capped at the model's
    assert engine.config.num_blocks == 3 * -(-max_pos // 4) == engine.blocks.num_blocks
    assert engine.config.resolved(max_pos) == engine.config                    # resolving is idempotent
    assert engine.scheduler.config is engine.config and engine.runner.config == engine.config
    assert engine.runner.max_blocks_per_seq == -(-max_pos // 4)
    assert cfg.num_blocks is None and cfg.max_model_len == 10 ** 6            # the caller's copy is kept
    with pytest.raises(ValueError, match="block_size=0"):
        Engine(model, EngineConfig(block_size=0))


def _mixed_batch(cfg, device="cpu"):
    """Two decodes and two prefill chunks (one with cached context) over shuffled blocks."""
    torch.manual_seed(0)
    bs, nb = 4, 32
    kc = torch.randn(nb, bs, cfg.n_kv_heads, cfg.head_dim, device=device)
    vc = torch.randn_like(kc)
    perm = torch.randperm(nb).tolist()
    lens_new, ctx = [1, 1, 6, 5], [9, 3, 6, 14]
    tables = torch.full((4, 4), -1, dtype=torch.int32)
    used = 0
    for r, c in enumerate(ctx):
        nblk = -(-c // bs)
        tables[r, :nblk] = torch.tensor(perm[used:used + nblk])
        used += nblk
    positions = torch.cat([torch.arange(c - n, c) for n, c in zip(lens_new, ctx)])
    qs = torch.tensor([0, 1, 2, 8, 13], dtype=torch.int32)
    batch = EngineBatch(tokens=torch.zeros(13, dtype=torch.long), positions=positions,
                        slot_mapping=torch.zeros(13, dtype=torch.long), query_start=qs,
                        context_lens=torch.tensor(ctx, dtype=torch.int32), block_tables=tables,
                        max_query_len=6, num_decode=2, prefills=[(2, 2, 8, 6), (3, 8, 13, 14)])
    q = torch.randn(13, cfg.n_heads, cfg.head_dim)
    return q, kc, vc, batch


def test_engine_attention_matches_reference():
    cfg = llama.ModelConfig.from_preset("tiny")
    q, kc, vc, batch = _mixed_batch(cfg)
    got = engine_attention(q, kc, vc, batch, 0.3)
    want = paged_attention_reference(q, kc, vc, batch, 0.3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("splits", [1, 3, None])
def test_triton_paged_decode_matches_pytorch(splits):
    # splits > 1: each context is cut into slices whose partial softmaxes are merged (flash-
    # decoding); 3 slices of 16-token tiles leave some slices of the short context empty
    pytest.importorskip("triton")
    from course_kit.attention.paged_triton import paged_decode_triton
    cfg = llama.ModelConfig.from_preset("tiny")
    q, kc, vc, batch = _mixed_batch(cfg)
    dev = "cuda" if torch.cuda.is_available() else "cpu"   # CPU: Triton's interpreter (conftest)
    tables, ctx = batch.block_tables[:2], batch.context_lens[:2]
    got = paged_decode_triton(q[:2].to(dev), kc.to(dev), vc.to(dev), tables.to(dev), ctx.to(dev), 0.3,
                              block_n=16, splits=splits)
    want = gather_decode(q[:2], kc, vc, tables, batch.positions[:2], 0.3)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("splits", [2, 3, 5])
def test_triton_split_decode_merges_long_contexts(splits):
    pytest.importorskip("triton")
    from course_kit.attention.paged_triton import paged_decode_triton
    torch.manual_seed(1)
    bs, nb, n_kv, G, D = 4, 48, 2, 3, 16
    kc, vc = torch.randn(nb, bs, n_kv, D), torch.randn(nb, bs, n_kv, D)
    ctx = torch.tensor([50, 37, 1], dtype=torch.int32)
    tables = torch.full((3, 13), -1, dtype=torch.int32)
    perm, used = torch.randperm(nb).tolist(), 0
    for r, c in enumerate(ctx.tolist()):
        tables[r, :-(-c // bs)] = torch.tensor(perm[used:used - (-c // bs)])
        used += -(-c // bs)
    q = torch.randn(3, n_kv * G, D)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    got = paged_decode_triton(q.to(dev), kc.to(dev), vc.to(dev), tables.to(dev), ctx.to(dev), 0.25,
                              block_n=16, splits=splits)
    want = gather_decode(q, kc, vc, tables, (ctx - 1).long(), 0.25)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_decode_splits_fill_the_gpu_and_depend_on_shapes_only():
    pytest.importorskip("triton")
    from course_kit.attention.paged_triton import decode_splits
    assert decode_splits(64, 3, 2048) == 3        # 192 programs -> about 4 per SM of 132
    assert decode_splits(1, 3, 2048) == 16        # capped
    assert decode_splits(1, 3, 100) == 2          # no more slices than 64-token tiles
    assert decode_splits(512, 8, 2048) == 1


@pytest.mark.gpu
def test_gpu_cuda_graphs_match_eager_and_hf(workload, hf_reference):
    model = tiny_model("cuda")
    params = [SamplingParams(max_new_tokens=n) for n in NEW_TOKENS]
    eager_engine = Engine(model, max_num_seqs=4, cuda_graphs=False)
    eager_engine.runner.pad_shapes = True          # the same padded shapes, launched one by one
    eager = eager_engine.generate(workload, params)
    graphed_engine = Engine(model, max_num_seqs=4, cuda_graphs=True, check_invariants=True)
    graphed = graphed_engine.generate(workload, params)
    assert graphed_engine.runner.graphs, "no CUDA graph was captured"
    assert [o.tokens for o in graphed] == [o.tokens for o in eager] == hf_reference
    static = Engine(model, policy="static", max_num_seqs=3, cuda_graphs=True).generate(workload, params)
    assert [o.tokens for o in static] == hf_reference


@pytest.mark.gpu
def test_gpu_bf16_smollm_shape_runs_and_agrees_with_eager():
    model = llama.Transformer.from_preset("smollm-135m", seed=0, dtype=torch.bfloat16, device="cuda")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 49152, (n,), generator=g).tolist() for n in (100, 300, 37, 700)]
    params = SamplingParams(max_new_tokens=32)
    a = Engine(model, max_num_seqs=4, cuda_graphs=True).generate(prompts, params)
    eager = Engine(model, max_num_seqs=4, cuda_graphs=False)
    eager.runner.pad_shapes = True
    b = eager.generate(prompts, params)
    # bf16: graph and eager run the same kernels on the same padded shapes, so tokens agree
    assert [o.tokens for o in a] == [o.tokens for o in b]


def _tiles_for(qs: list[int], tile_m: int, extra: int = 0):
    rows, starts, lens = [], [], []
    for r in range(len(qs) - 1):
        for lo in range(qs[r], qs[r + 1], tile_m):
            rows.append(r)
            starts.append(lo)
            lens.append(min(tile_m, qs[r + 1] - lo))
    rows += [-1] * extra
    starts += [0] * extra
    lens += [0] * extra
    return tuple(torch.tensor(x, dtype=torch.int32) for x in (rows, starts, lens))


def test_triton_varlen_matches_reference():
    pytest.importorskip("triton")
    from course_kit.attention.paged import TILE_M
    from course_kit.attention.paged_triton import paged_varlen_triton
    cfg = llama.ModelConfig.from_preset("tiny")
    q, kc, vc, batch = _mixed_batch(cfg)
    # a long prefill chunk too, so that one sequence spans several query tiles
    tiles = _tiles_for(batch.query_start.tolist(), 4, extra=2)
    got = paged_varlen_triton(q, kc, vc, batch.block_tables, batch.positions, tiles, 0.3, block_n=16)
    want = paged_attention_reference(q, kc, vc, batch, 0.3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    tiles = _tiles_for(batch.query_start.tolist(), TILE_M)
    got = paged_varlen_triton(q, kc, vc, batch.block_tables, batch.positions, tiles, 0.3, block_n=16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_varlen_layout_with_graph_padding_matches_hf(model, workload, hf_reference, policy):
    """The GPU step layout (one Triton kernel, steps padded to captured shapes), run on CPU
    through Triton's interpreter without capturing graphs."""
    pytest.importorskip("triton")
    engine = Engine(model, policy=policy, max_num_seqs=3, max_num_batched_tokens=24, block_size=4,
                    varlen=True, check_invariants=True)
    engine.runner.pad_shapes = True
    outs = engine.generate(workload[:4], [SamplingParams(max_new_tokens=n) for n in NEW_TOKENS[:4]])
    assert [o.tokens for o in outs] == hf_reference[:4]
    assert engine.blocks.num_used_blocks == 0


def test_bench_peer_helpers(model, workload, hf_reference):
    """The HF generate peer of `course-kit bench batching` (left-padded static batches) returns each
    request's own greedy tokens, and the correctness check forgives only true ties."""
    from course_kit.benchmarks.batching import _check_same, hf_generate_static
    hf = model_to_hf(model)
    got = hf_generate_static(hf, workload[:3], NEW_TOKENS[:3], batch=2, pad_id=0)
    assert got == hf_reference[:3]
    assert _check_same(hf, workload[0], hf_reference[0], hf_reference[0], "same") == 0
    wrong = list(hf_reference[0])
    wrong[2] = (wrong[2] + 1) % 256
    with pytest.raises(AssertionError, match="not a tie"):
        _check_same(hf, workload[0], hf_reference[0], wrong, "wrong")


class _FakeGraph:
    """Stands in for a captured CUDA graph on CPU: replay runs the model on the static buffers."""

    replays: dict = {}

    def __init__(self, runner, key):
        self.runner, self.key = runner, key

    def replay(self):
        _FakeGraph.replays[self.key[0]] = _FakeGraph.replays.get(self.key[0], 0) + 1
        r = self.runner
        r._out[self.key] = r.model.forward_paged(r._graph_batch(self.key), r.cache)


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_graph_replay_buffers_on_cpu(model, workload, hf_reference, policy):
    """The static-buffer bookkeeping of CUDA-graph replay (copies into views per shape, the query
    offsets of mixed steps, tiles, stale block-table entries), run on CPU with fake graphs."""
    pytest.importorskip("triton")
    engine = Engine(model, policy=policy, max_num_seqs=3, max_num_batched_tokens=24, block_size=4,
                    varlen=True, check_invariants=True)
    runner = engine.runner
    runner.use_graphs = runner.pad_shapes = True
    runner._alloc_buffers()
    runner._out = {}
    keys = [("decode", s) for s in runner.decode_sizes()] + [("mixed", b) for b in runner.token_buckets]
    runner.graphs = {k: _FakeGraph(runner, k) for k in keys}
    _FakeGraph.replays = {}
    outs = engine.generate(workload[:5], [SamplingParams(max_new_tokens=n) for n in NEW_TOKENS[:5]])
    assert [o.tokens for o in outs] == hf_reference[:5]
    assert _FakeGraph.replays.get("decode", 0) > 10
    if policy == "continuous":
        assert _FakeGraph.replays.get("mixed", 0) > 0


def _spy_order(engine) -> list[bool]:
    """Record, per step, whether the runner's row order differs from the scheduler's order."""
    reordered, prepare = [], engine.prepare

    def spy(sched):
        inputs = prepare(sched)
        reordered.append([id(s) for s in inputs.order] != [id(s) for s in sched.scheduled])
        return inputs
    engine.prepare = spy
    return reordered


@pytest.mark.parametrize("varlen", [False, True])
def test_one_token_chunk_after_longer_chunks_gets_its_own_token(model, workload, hf_reference, varlen):
    """Regression (the H200 256-slot batching run died on `assert token is not None`): a prefill chunk
    cut to the last token of the step's budget is a one-token row, which the runner lays out before
    the longer chunks scheduled ahead of it. Each sampled token must still reach its own request."""
    if varlen:
        pytest.importorskip("triton")
    # budget 23: the first step admits the prompts of 5 and 17 tokens whole, then 1 token of the 33
    engine = Engine(model, policy="continuous", max_num_seqs=4, max_num_batched_tokens=23, block_size=4,
                    varlen=varlen, check_invariants=True)
    engine.runner.pad_shapes = True
    reordered = _spy_order(engine)
    n = 5 if varlen else len(workload)     # the Triton interpreter is slow
    outs = engine.generate(workload[:n], [SamplingParams(max_new_tokens=k) for k in NEW_TOKENS[:n]])
    assert reordered[0], "the first step no longer has a one-token chunk after longer ones"
    assert [o.tokens for o in outs] == hf_reference[:n]
    assert engine.blocks.num_used_blocks == 0


def test_bench_wide_slot_workload_layouts():
    """`course-kit bench batching`'s workload at 256 slots, scheduled and laid out as on the GPU
    (varlen, padded to captured shapes) without running the model: every step fits a captured
    shape, and tokens go back in the scheduler's order (step 75 holds a one-token chunk)."""
    import dataclasses

    from course_kit.engine import trace
    from course_kit.attention.paged import TILE_M
    cfg = dataclasses.replace(llama.ModelConfig.from_preset("tiny"), max_seq_len=2048)
    engine = Engine(llama.Transformer.from_config(cfg), policy="continuous", max_num_seqs=256, block_size=16,
                    max_num_batched_tokens=2048, varlen=True)
    runner = engine.runner
    runner.pad_shapes = True
    keys = {("decode", s) for s in runner.decode_sizes()} | {("mixed", b) for b in runner.token_buckets}
    for r in trace.synthetic(256, (100, 1024), (100, 1024), cfg.vocab_size, seed=0):
        engine.add_request(r.prompt, SamplingParams(max_new_tokens=r.max_new_tokens, ignore_eos=True))
    reordered = 0
    while engine.has_unfinished():
        sched = engine.schedule()
        inputs = engine.prepare(sched)
        host, graph = inputs.host, inputs.graph
        assert graph in keys, f"step shape {graph} was not captured"
        assert len(host["ctx"]) == inputs.num_rows >= len(inputs.order)
        if graph[0] == "decode":
            assert inputs.num_rows == len(host["tokens"]) == graph[1]
        else:
            assert inputs.num_rows == runner.mixed_rows and len(host["tokens"]) == graph[1]
            assert len(host["tiles"][0]) <= graph[1] // TILE_M + runner.mixed_rows
        reordered += [id(s) for s in inputs.order] != [id(s) for s in sched.scheduled]
        # a fake token per sampling item, tagged with its request, checked after the reordering
        tokens = [int(it.seq.request_id[1:]) % 256 if it.sample else None for it in inputs.order]
        for it, tok in zip(sched.scheduled, inputs.in_schedule_order(tokens, sched.scheduled)):
            assert tok == (int(it.seq.request_id[1:]) % 256 if it.sample else None)
        engine.postprocess(sched, inputs, tokens, 0.0)
    assert reordered > 0
    assert engine.blocks.num_used_blocks == 0


def test_fused_blocks_give_the_same_tokens_and_compile_once():
    """fuse_around_attention compiles the halves of a block around attention (Inductor on a GPU;
    here the aot_eager backend, which traces the same graphs without generating code): the tokens
    must not change, and one compiled function must serve all layers and batch sizes."""
    from torch._dynamo.utils import counters
    model = tiny_model()
    torch.manual_seed(0)
    prompts = [torch.randint(0, model.config.vocab_size, (n,)).tolist() for n in (5, 17, 9, 30)]
    params = SamplingParams(max_new_tokens=12)
    plain = [o.tokens for o in Engine(model, max_num_seqs=3).generate(prompts, params)]
    counters.clear()
    fused_engine = Engine(model, max_num_seqs=3, fuse="aot_eager")
    assert fused_engine.runner.fused
    fused = [o.tokens for o in fused_engine.generate(prompts, params)]
    assert fused == plain
    # two halves, each compiled for at most: batch 1 (specialised), any other size
    assert 1 <= counters["stats"]["unique_graphs"] <= 4
    Engine(model, max_num_seqs=3, fuse=False)        # the plain blocks come back
    assert "attention_inputs" not in vars(model.layers[0])


def test_policy_gain_splits_the_ratio_into_fewer_steps_and_step_cost():
    from course_kit.engine.metrics import policy_gain
    static = {"steps": 1000, "duration_s": 2.0}          # 2 ms a step
    continuous = {"steps": 500, "duration_s": 1.25}      # 2.5 ms a step
    g = policy_gain(static, continuous)
    assert g["fewer_steps"] == pytest.approx(2.0)
    assert g["step_cost_ratio"] == pytest.approx(1.25)
    # the same tokens in 2.0 s and 1.25 s: the throughput ratio is the ratio of durations
    assert g["throughput_ratio"] == pytest.approx(2.0 / 1.25)


def test_step_cost_sentence_reads_the_two_loops_ratios():
    """06's H200 copy said the async loop hides the host's part of a fuller step while its table
    showed the same step cost, 1.02x, in both loops: the sentence now follows the two ratios."""
    from course_kit.engine.metrics import explain_step_cost
    same = explain_step_cost({"sync": {"step_cost_ratio": 1.02}, "async": {"step_cost_ratio": 1.02}})
    assert "about the same in both loops (1.02x sync, 1.02x async)" in same and "so less of it showed" not in same
    hid = explain_step_cost({"sync": {"step_cost_ratio": 1.30}, "async": {"step_cost_ratio": 1.05}})
    assert "async loop's step cost is lower (1.05x against 1.30x in sync)" in hid
    worse = explain_step_cost({"sync": {"step_cost_ratio": 1.0}, "async": {"step_cost_ratio": 1.3}})
    assert "is higher (1.30x against 1.00x in sync)" in worse
    assert explain_step_cost({"sync": {"step_cost_ratio": 1.0}}).endswith("with the decodes.")


def test_bandwidth_limit_sums_each_steps_bytes_and_takes_the_slower_of_bytes_and_flops():
    from course_kit.engine.metrics import StepRecord, bandwidth_limit
    decode = StepRecord(0, 1, [(0, "a", "decode"), (1, "b", "decode")], 2, 0, 4, 0, kv_tokens=300)
    prefill = StepRecord(1, 2, [(0, "c", "prefill")], 1000, 0, 8, 0, kv_tokens=1000)
    # weights 1e6 B, 100 B per K/V token, 1e9 B/s: decode 1.03 ms of bytes; prefill 1.1 ms of bytes
    # but 1000 tokens x 2e6 FLOPs at 1e12 FLOP/s = 2 ms of compute, so compute bounds it
    out = bandwidth_limit([decode, prefill], 1e6, 100, 1e9, flops_per_token=2e6, peak_flops=1e12, output_tokens=3)
    assert out["memory_bound_s"] == pytest.approx(1.03e-3 + 1.1e-3)
    assert out["bound_s"] == pytest.approx(1.03e-3 + 2e-3) and out["compute_bound_steps"] == 1
    assert out["limit_tok_s"] == pytest.approx(3 / 3.03e-3)
    with pytest.raises(ValueError, match="copy_bytes_per_s"):
        bandwidth_limit([decode], 1e6, 100, 0)


def test_a_step_records_the_kv_positions_its_rows_attend(model):
    from course_kit.engine import EngineConfig
    eng = Engine(model, EngineConfig(policy="continuous", max_num_seqs=2, max_num_batched_tokens=16))
    eng.generate([[5, 6, 7], [8, 9]], SamplingParams(max_new_tokens=3))
    # step 0: both prompts (3 + 2 positions); then decodes attend contexts 4 + 3, 5 + 4
    assert [s.kv_tokens for s in eng.steps][:3] == [5, 7, 9]

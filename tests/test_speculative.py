"""Speculative decoding on the course's own target and draft (course_kit/capstone/speculative, notebook 10).

Oracles: the target's own greedy decoding (`llama.generate`) for the greedy output; a plain decode of
the same tokens for the caches after rollback; the target's exact next-token distributions for the
sampled output (chi-square); the perplexity recorded when the checkpoints were trained.
"""
import pytest
import torch

from course_kit.models import llama
from course_kit.capstone.speculative import pair as P
from course_kit.capstone.speculative import rules
from course_kit.capstone.speculative.decoder import SpeculativeDecoder
from course_kit.capstone.speculative.steps import rows_step

needs_pair = pytest.mark.skipif(not P.available(), reason="the trained pair is not under data/models")


@pytest.fixture(scope="module")
def shipped():
    return P.load_pair(torch.float32, "cpu")


@pytest.fixture(scope="module")
def prompts():
    """Prompts cut from the shipped held-out slice: 8 of 3 to 40 tokens, from different places."""
    tokens = P.heldout_slice()
    lengths = [3, 7, 12, 20, 40, 5, 16, 28]
    return [tokens[i % tokens.shape[0], 37 * i:37 * i + n].tolist() for i, n in enumerate(lengths)]


@needs_pair
def test_greedy_speculation_gives_the_targets_greedy_tokens(shipped, prompts):
    """Six prompts of 3 to 40 tokens, k = 1, 3 and 6 (and k = 0, the target alone through the same
    rounds): the first 16 new tokens are the target's own greedy tokens."""
    target, draft = shipped
    decoders = {k: SpeculativeDecoder(target, draft, k, max_seq=96) for k in (0, 1, 3, 6)}
    kept = 0
    for i, prompt in enumerate(prompts[:6]):
        want = llama.generate(target, [prompt], 16)[0]
        for k, dec in decoders.items():
            if k == 0 and i > 0:
                continue
            assert dec.generate(prompt, 16) == want, f"k={k}, prompt of {len(prompt)} tokens"
            kept += sum(dec.stats()["kept_per_position"])
    assert kept > 0       # the draft was right at times: the equality is not the target alone's


@needs_pair
def test_rollback_leaves_the_caches_as_a_plain_run_leaves_them(shipped, prompts):
    """scrub=True: after speculation the target's cache equals a plain decode of the same tokens (same
    K/V up to rounding, zeros past the length); without it the rejected K/V are still there, yet the
    next step's logits are the same to the last bit, because attention never reads them."""
    target, draft = shipped
    prompt = prompts[4]
    dec = SpeculativeDecoder(target, draft, 4, max_seq=96, scrub=True)
    out = dec.generate(prompt, 30)
    assert dec.stats()["rounds"] < 30 and sum(dec.stats()["kept_per_position"]) < 4 * dec.stats()["rounds"]
    tokens = prompt + out
    L = int(dec.length)                      # tokens in the sequence; K/V are in the cache for 0 .. L-2
    plain = {m: llama.StaticKVCache(m.config, 1, 96) for m in shipped}
    for m, cache in plain.items():
        m.prefill(torch.tensor([tokens[:L - 1]]), cache)
    for cache, ref, valid in ((dec.tcache, plain[target], L - 1), (dec.dcache, plain[draft], L - 2)):
        for got, want in ((cache.k, ref.k), (cache.v, ref.v)):
            torch.testing.assert_close(got[:, :, :, :valid], want[:, :, :, :valid], rtol=1e-4, atol=1e-5)
            assert torch.count_nonzero(got[:, :, :, L - 1:]) == 0     # nothing past the sequence
    stale = SpeculativeDecoder(target, draft, 4, max_seq=96, scrub=False)
    assert stale.generate(prompt, 30) == out
    assert torch.count_nonzero(stale.tcache.k[:, :, :, L - 1:]) > 0      # rejected K/V left behind ...
    x, pos = torch.tensor([tokens[L - 1]]), torch.tensor([L - 1])
    assert torch.equal(target.decode(x, pos, stale.tcache), target.decode(x, pos, dec.tcache))   # ... unread


@needs_pair
def test_shipped_checkpoints_reproduce_their_recorded_perplexity():
    rec = P.record()
    windows = P.heldout_slice()
    for role in ("target", "draft"):
        model = P.load(role, torch.float32, "cpu")
        assert model.config.num_params() == rec["models"][role]["params"]
        assert P.perplexity(model, windows) == pytest.approx(rec["models"][role]["slice_ppl"], rel=0.01)
    assert rec["models"]["target"]["heldout_ppl"] < rec["models"]["draft"]["heldout_ppl"]   # the target is better


@needs_pair
def test_the_tokenizer_round_trips_python_source():
    tok = P.tokenizer()
    src = "def f(x):\n    return {'a': x ** 2}  # ünïcode\n"
    assert tok.decode(tok.encode(src)) == src and tok.vocab_size == P.VOCAB


def _markov_model(seed: int) -> llama.Transformer:
    """A course Llama with no layers and its own output head: its next-token law depends on the last
    token only (a Markov chain over 4 tokens), with logits of a few units."""
    cfg = llama.ModelConfig(vocab_size=4, dim=16, n_layers=0, n_heads=2, n_kv_heads=1, ffn_dim=32,
                            max_seq_len=2048, tie_embeddings=False)
    model = llama.Transformer.from_config(cfg, seed=seed)
    with torch.no_grad():
        model.output.weight.mul_(10.0)
    return model


def _transitions(model: llama.Transformer) -> torch.Tensor:
    with torch.no_grad():
        return torch.softmax(model(torch.arange(4)[:, None])[:, 0].double(), -1)     # [previous, next]


def _sampled_pvalues() -> tuple[float, float, dict]:
    """One sampled sequence of 1,500 tokens (k = 2): the chi-square p-values of its transition counts
    against the target's law and against the draft's (12 degrees of freedom), and the decoder's stats."""
    target, draft = _markov_model(1), _markov_model(7)
    P_t, P_d = _transitions(target), _transitions(draft)
    assert (P_t - P_d).abs().max() > 0.2                      # the two laws differ: the test has power
    prompt, n = [1], 1500
    dec = SpeculativeDecoder(target, draft, 2, max_seq=n + 16, temperature=1.0, seed=3)
    seq = prompt + dec.generate(prompt, n)
    counts = torch.zeros(4, 4, dtype=torch.float64)
    for a, b in zip(seq, seq[1:]):
        counts[a, b] += 1

    def pvalue(law):
        expected = counts.sum(1, keepdim=True) * law
        stat = ((counts - expected) ** 2 / expected.clamp_min(1e-9)).sum()
        return float(torch.special.gammaincc(torch.tensor(6.0, dtype=torch.float64), stat / 2))   # 12 dof
    stats = {**dec.stats(), "least_expected": float((counts.sum(1, keepdim=True) * P_t).min())}
    return pvalue(P_t), pvalue(P_d), stats


def test_sampled_speculation_follows_the_targets_distribution():
    """Models whose next-token law depends on the last token only (no layers): the sequence's
    transitions follow the target's law, not the draft's."""
    p_target, p_draft, stats = _sampled_pvalues()
    assert 0.2 < stats["alpha"] < 0.95                        # drafts were both kept and rejected
    assert stats["least_expected"] > 5                        # the chi-square approximation holds
    assert p_target > 1e-3
    assert p_draft < 1e-6


def test_a_wrong_acceptance_rule_in_the_decoder_fails_the_same_test(monkeypatch):
    """Keeping a draft token whenever p >= q (no coin flip) skews the sequence away from the target."""
    right = rules.accept_sampled

    def keep_when_likelier(p, q, d, u_accept, u_draw):
        likelier = p[:, :-1].gather(2, d[:, :, None])[:, :, 0] >= q.gather(2, d[:, :, None])[:, :, 0]
        return right(p, q, d, torch.where(likelier, 0.0, 1.0), u_draw)
    monkeypatch.setattr(rules, "accept_sampled", keep_when_likelier)
    assert _sampled_pvalues()[0] < 1e-6


def test_the_triton_rows_step_is_the_torch_rows_step_and_writes_row_zero():
    """Notebook 05's Triton step handed cache row 0 three times (stride 0) and a zero block table:
    the same logits and the same K/V at the three positions as the model's own layers (interpreter)."""
    pytest.importorskip("triton")
    tiny = llama.Transformer.from_config(llama.ModelConfig(vocab_size=64, dim=64, n_layers=1, n_heads=4, n_kv_heads=2,
                                                           ffn_dim=128, max_seq_len=64), seed=0)
    caches = [llama.StaticKVCache(tiny.config, 1, 32) for _ in range(2)]
    for c in caches:
        tiny.prefill(torch.tensor([[5, 6, 7, 8, 9]]), c)
    tokens, positions = torch.tensor([3, 4, 11]), torch.tensor([5, 6, 7])
    want = rows_step(tiny, "torch")(tokens, positions, caches[0])
    got = rows_step(tiny, "triton")(tokens, positions, caches[1])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(caches[1].k, caches[0].k, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(caches[1].v, caches[0].v, rtol=1e-6, atol=1e-6)
    # one token at a time through model.decode writes the same K/V: the rows are causal
    ref = llama.StaticKVCache(tiny.config, 1, 32)
    tiny.prefill(torch.tensor([[5, 6, 7, 8, 9]]), ref)
    for t, p in zip(tokens, positions):
        last = tiny.decode(t[None], p[None], ref)
    torch.testing.assert_close(want[-1:], last, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ref.k, caches[0].k, rtol=1e-5, atol=1e-6)


def test_a_graphed_step_keeps_what_its_graph_reads_alive(monkeypatch):
    """`step_costs` times each step as a CUDA graph's replay. A graph holds raw addresses, no
    references, so the replay must keep the cache, tokens, positions and output buffer it was captured
    on alive: once freed, their memory went to the next step's tensors, and on the H200 the bench's
    replays read garbage positions and wrote K/V out of bounds (an illegal memory access). On a CPU, a
    stand-in graph that holds what it captured weakly, as a CUDA graph does, and fails on a freed one."""
    import gc
    import weakref
    from course_kit.cuda_graphs import runner
    from course_kit.capstone.speculative import measure as M

    class WeakGraph:
        def __init__(self, body):
            self.body = weakref.ref(body)

        def replay(self):
            body = self.body()
            assert body is not None, "replaying a graph whose inputs were freed"
            body()

    def capture(fn, pool=None, warmup=2):
        for _ in range(warmup):
            fn()
        return WeakGraph(fn)
    monkeypatch.setattr(runner, "capture", capture)
    tiny = llama.Transformer.from_preset("tiny", seed=0)
    fns = [M._step_fn(rows_step(tiny, "torch"), tiny, m, 20, 32, graphs=True) for m in (1, 4)]
    gc.collect()
    for fn in fns:
        fn()


def test_decoder_names_the_bad_value():
    tiny = llama.Transformer.from_preset("tiny", seed=0)
    other = llama.Transformer.from_config(llama.ModelConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2,
                                                            n_kv_heads=1, ffn_dim=64, max_seq_len=64))
    with pytest.raises(ValueError, match="k must be in"):
        SpeculativeDecoder(tiny, tiny, 17)
    with pytest.raises(ValueError, match="differs from the target"):
        SpeculativeDecoder(tiny, other, 2)
    with pytest.raises(ValueError, match="needs a draft"):
        SpeculativeDecoder(tiny, None, 2)
    with pytest.raises(ValueError, match="exceeds max_seq"):
        SpeculativeDecoder(tiny, tiny, 4, max_seq=32).generate([1, 2, 3], 28)
    with pytest.raises(ValueError, match="use_graphs=True needs"):
        SpeculativeDecoder(tiny, tiny, 2, use_graphs=True)
    with pytest.raises(ValueError, match="kernels must be one of"):
        SpeculativeDecoder(tiny, tiny, 2, kernels="cuda")
    with pytest.raises(ValueError, match="at most 8 tokens"):
        SpeculativeDecoder(tiny, tiny, 8, kernels="triton")
    with pytest.raises(ValueError, match="accept='triton' needs greedy"):
        SpeculativeDecoder(tiny, tiny, 2, temperature=1.0, accept="triton")


# ----------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@needs_pair
@pytest.mark.parametrize("k", [3, 8])
def test_gpu_graphed_triton_speculation_gives_the_targets_greedy_tokens_in_fp32(k, prompts):
    """The round captured in one CUDA graph, Triton kernels (k = 8: the verify of 9 tokens runs the
    model's own layers), fp32: the target's greedy tokens, on two prompts."""
    target, draft = P.load_pair(torch.float32, "cuda")
    kernels = ("triton", "triton" if k + 1 <= 8 else "torch")
    dec = SpeculativeDecoder(target, draft, k, max_seq=256, kernels=kernels)
    assert dec.graph is not None
    for prompt in prompts[3:5]:
        assert dec.generate(prompt, 48) == llama.generate(target, [prompt], 48)[0]
    assert 0 < dec.stats()["alpha"] < 1


@pytest.mark.gpu
@needs_pair
def test_gpu_sampled_speculation_runs_in_a_graph_and_is_seeded(prompts):
    target, draft = P.load_pair(torch.bfloat16, "cuda")
    runs = [SpeculativeDecoder(target, draft, 4, max_seq=256, temperature=0.8, kernels="triton", seed=5)
            .generate(prompts[2], 48) for _ in range(2)]
    assert runs[0] == runs[1] and all(0 <= t < P.VOCAB for t in runs[0])


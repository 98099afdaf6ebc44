"""The course model against HF transformers' LlamaForCausalLM on the same weights (CPU, fp32)."""
import pytest
import torch

from course_kit.models import llama
from course_kit.attention.paged import paged_attention_gather, paged_attention_reference
from course_kit.models.kv_cache import PagedBatch, PagedKVCache
from course_kit.models.hf import model_from_hf, model_from_pretrained, model_to_hf

SCALED = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32)


def scaled_config():
    """GQA 4:1, Llama 3 RoPE scaling that bites at these lengths, untied embeddings."""
    return llama.ModelConfig(vocab_size=320, dim=64, n_layers=2, n_heads=8, n_kv_heads=2, ffn_dim=96,
                             rope_theta=500000.0, rope_scaling=dict(SCALED), max_seq_len=256,
                             tie_embeddings=False)


@pytest.fixture(scope="module")
def tiny():
    m = llama.Transformer.from_preset("tiny", seed=0)
    return m, model_to_hf(m)


@pytest.fixture(scope="module")
def scaled():
    m = llama.Transformer.from_config(scaled_config(), seed=1)
    return m, model_to_hf(m)


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("which", ["tiny", "scaled"])
def test_logits_match_hf(which, request):
    model, hf = request.getfixturevalue(which)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.config.vocab_size, (3, 120), generator=gen)
    with torch.no_grad():
        ours, ref = model(tokens), hf(tokens).logits
    assert rel_err(ours, ref) < 1e-4
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


def test_rope_scaling_matches_hf_frequencies(scaled):
    model, hf = scaled
    torch.testing.assert_close(model.inv_freq, hf.model.rotary_emb.inv_freq.float(), rtol=1e-6, atol=0)
    plain = llama.rope_inv_freq(llama.ModelConfig.from_preset("tiny"))
    assert not torch.allclose(llama.rope_inv_freq(scaled_config())[-1], plain[-1])


def test_prefill_then_decode_matches_full_forward(scaled):
    model, _ = scaled
    tokens = torch.randint(0, 320, (2, 40), generator=torch.Generator().manual_seed(1))
    cache = llama.StaticKVCache(model.config, 4, 64, torch.float32, "cpu")
    with torch.no_grad():
        full = model(tokens)
        pre = model.prefill(tokens[:, :30], cache)
        steps = [model.decode(tokens[:, t], torch.full((2,), t), cache) for t in range(30, 40)]
    torch.testing.assert_close(pre, full[:, :30], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 30:], rtol=1e-4, atol=1e-5)


def test_decode_rows_at_different_positions(tiny):
    model, _ = tiny
    a = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(2))
    b = torch.randint(0, 256, (1, 4), generator=torch.Generator().manual_seed(3))
    cache = llama.StaticKVCache(model.config, 2, 16, torch.float32, "cpu")
    with torch.no_grad():
        padded = torch.cat([a[:, :8], torch.cat([b[:, :3], torch.zeros(1, 5, dtype=torch.long)], 1)])
        model.prefill(padded, cache)
        got = model.decode(torch.tensor([a[0, 8], b[0, 3]]), torch.tensor([8, 3]), cache)
        want = torch.stack([model(a)[0, -1], model(b)[0, -1]])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def paged_step(model, seqs, new_counts, block_size=4):
    """One forward_paged over sequences whose last new_counts[i] tokens are new (the rest cached)."""
    cfg, weight = model.config, model.tok_embeddings.weight
    cache = PagedKVCache(cfg, 64, block_size, weight.dtype, weight.device)
    # fill the cached prefix of every sequence first, then run the step under test
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(4)).int()
    max_blocks = max(-(-len(s) // block_size) for s in seqs)
    tables = torch.full((len(seqs), max_blocks), -1, dtype=torch.int32)
    used = 0
    for i, s in enumerate(seqs):
        n = -(-len(s) // block_size)
        tables[i, :n] = perm[used:used + n]
        used += n

    def batch_for(parts):  # parts: (seq index, first position, last position + 1)
        toks, pos, slots, starts, ctx = [], [], [], [0], []
        for i, lo, hi in parts:
            p = torch.arange(lo, hi)
            toks.append(torch.tensor(seqs[i][lo:hi]))
            pos.append(p)
            slots.append(tables[i, p // block_size].long() * block_size + p % block_size)
            starts.append(starts[-1] + hi - lo)
            ctx.append(hi)
        batch = PagedBatch(torch.cat(toks), torch.cat(pos), torch.cat(slots), torch.tensor(starts, dtype=torch.int32),
                           torch.tensor(ctx, dtype=torch.int32), tables[[i for i, _, _ in parts]])
        return PagedBatch(*(t.to(weight.device) for t in (batch.tokens, batch.positions, batch.slot_mapping,
                                                          batch.query_start, batch.context_lens, batch.block_tables)))
    prefix = [(i, 0, len(s) - c) for i, (s, c) in enumerate(zip(seqs, new_counts)) if len(s) > c]
    with torch.no_grad():
        if prefix:
            model.forward_paged(batch_for(prefix), cache)
        step = batch_for([(i, len(s) - c, len(s)) for i, (s, c) in enumerate(zip(seqs, new_counts))])
        return step, cache


@pytest.mark.parametrize("new_counts", [[1, 1, 1], [5, 1, 12]])
def test_paged_matches_full_forward_and_backends_agree(scaled, new_counts):
    model, _ = scaled
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(0, 320, (n,), generator=g).tolist() for n in (7, 13, 21)]
    step, cache = paged_step(model, seqs, new_counts)
    want = torch.stack([model(torch.tensor([s]))[0, -1] for s in seqs]).detach()
    for backend in ("reference", "gather"):
        model.set_attention(paged=backend)
        try:
            with torch.no_grad():
                got = model.forward_paged(step, cache)
        finally:
            model.paged_attention = None
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_paged_backends_agree_on_attention():
    g = torch.Generator().manual_seed(6)
    kc, vc = torch.randn(10, 4, 2, 8, generator=g), torch.randn(10, 4, 2, 8, generator=g)
    q = torch.randn(6, 4, 8, generator=g)
    batch = PagedBatch(torch.zeros(6, dtype=torch.long), torch.tensor([4, 5, 6, 2, 9, 0]),
                       torch.zeros(6, dtype=torch.long), torch.tensor([0, 3, 5, 6], dtype=torch.int32),
                       torch.tensor([7, 10, 1], dtype=torch.int32),
                       torch.tensor([[3, 1, -1], [0, 9, 2], [5, -1, -1]], dtype=torch.int32))
    batch.positions[3:5] = torch.tensor([8, 9])
    ref = paged_attention_reference(q, kc, vc, batch, 0.3)
    torch.testing.assert_close(paged_attention_gather(q, kc, vc, batch, 0.3), ref, rtol=1e-5, atol=1e-6)


PROMPT_LENS = (1, 2, 5, 9, 16, 23, 40, 61)


@pytest.fixture(scope="module")
def hf_greedy(scaled):
    _, hf = scaled
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 320, (n,), generator=g).tolist() for n in PROMPT_LENS]
    outs = []
    with torch.no_grad():
        for p in prompts:
            ids = hf.generate(torch.tensor([p]), max_new_tokens=64, min_new_tokens=64, do_sample=False,
                              pad_token_id=0)
            outs.append(ids[0, len(p):].tolist())
    return prompts, outs


@pytest.mark.parametrize("cache", ["static", "paged"])
def test_greedy_tokens_match_hf_generate(scaled, hf_greedy, cache):
    model, _ = scaled
    prompts, want = hf_greedy
    got = llama.generate(model, prompts, 64, cache=cache, block_size=8)
    assert [len(o) for o in got] == [64] * 8
    for i, (o, w) in enumerate(zip(got, want)):
        assert o == w, f"prompt {i} (length {len(prompts[i])}): first difference at {next(j for j in range(64) if o[j] != w[j])}"


def test_save_pretrained_loads_offline(scaled, tmp_path, monkeypatch):
    model, hf = scaled
    hf.save_pretrained(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    loaded = model_from_pretrained(tmp_path)
    assert loaded.config.rope_scaling == SCALED and not loaded.config.tie_embeddings
    tokens = torch.randint(0, 320, (2, 30), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), model(tokens), rtol=0, atol=0)


def test_from_hf_roundtrip_and_tied(tiny):
    model, hf = tiny
    back = model_from_hf(hf)
    assert back.config.tie_embeddings and back.output is None
    assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    tokens = torch.randint(0, 256, (1, 10), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        torch.testing.assert_close(back(tokens), model(tokens), rtol=0, atol=0)


def test_bad_inputs_raise_value_error_with_limits(tiny):
    model, _ = tiny
    too_long = torch.zeros(1, 513, dtype=torch.long)
    with pytest.raises(ValueError, match=r"513.*\[1, 512\]"):
        model(too_long)
    with pytest.raises(ValueError, match=r"\[1, 16\]"):
        model.prefill(torch.zeros(1, 17, dtype=torch.long), llama.StaticKVCache(model.config, 1, 16))
    with pytest.raises(ValueError, match="512"):
        llama.generate(model, [[1] * 500], 20)
    with pytest.raises(ValueError, match="non-empty"):
        llama.generate(model, [[1, 2], []], 4)
    with pytest.raises(ValueError, match=r"\[1, 512\]"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="float32"):
        llama.Transformer.from_preset("tiny", dtype=torch.int8)
    with pytest.raises(ValueError, match="smollm-135m"):
        llama.ModelConfig.from_preset("gpt2")
    with pytest.raises(ValueError, match=r"\[0, 256\)"):
        llama.generate(model, [[300]], 2)


def test_presets_have_the_published_shapes():
    smol = llama.ModelConfig.from_preset("smollm-135m")
    assert (smol.n_layers, smol.dim, smol.n_heads, smol.n_kv_heads, smol.ffn_dim, smol.vocab_size,
            smol.tie_embeddings) == (30, 576, 9, 3, 1536, 49152, True)
    assert abs(smol.num_params() - 134_515_008) == 0
    big = llama.ModelConfig.from_preset("llama-1b")
    assert big.num_params() == 1_235_814_400  # Llama 3.2 1B
    assert big.rope_scaling["factor"] == 32.0 and big.rope_theta == 500000.0


def test_bf16_decode_runs_and_stays_close(tiny):
    model, _ = tiny
    m16 = llama.Transformer.from_preset("tiny", seed=0, dtype=torch.bfloat16)
    assert m16.inv_freq.dtype == torch.float32
    tokens = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        assert rel_err(m16(tokens).float(), model(tokens)) < 0.05


@pytest.mark.gpu
def test_gpu_bf16_matches_hf_and_paged_paths_agree():
    model = llama.Transformer.from_preset("smollm-135m", seed=0, dtype=torch.bfloat16, device="cuda")
    hf = model_to_hf(model)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 49152, (2, 64), generator=g).cuda()
    with torch.no_grad():
        full = model(tokens).float()
        assert rel_err(full, hf(tokens).logits.float()) < 3e-2
    # the same two sequences through the paged cache: a prefill of 40 and 64 tokens, then one
    # decode step each; the gather path (GPU default) against the per-sequence reference
    seqs = [tokens[0, :41].tolist(), tokens[1].tolist()]
    want = torch.stack([full[0, 40], full[1, 63]])
    for backend in ("gather", "reference"):
        model.set_attention(paged=backend)
        step, cache = paged_step(model, seqs, [1, 1])
        with torch.no_grad():
            got = model.forward_paged(step, cache).float()
        assert rel_err(got, want) < 3e-2, backend
    model.paged_attention = None


"""TP's sums folded into the decode step's products (decode_kernels/exchange.py), on CPU.

Two ranks run in one process (`SimulatedExchange`: each rank's step in a thread, taking turns at
every push), so the same kernels that run on two GPUs over symmetric memory are checked here,
under the Triton interpreter, against the unsharded model's own decode step."""
from __future__ import annotations

import threading

import pytest
import torch

from course_kit.cuda_graphs.decode_kernels import exchange as X
from course_kit.cuda_graphs.decode_kernels import gemv as G
from course_kit.cuda_graphs.decode_kernels.step import TritonDecodeStep
from course_kit.models import llama
from course_kit.parallel.tensor import kv_heads_of_rank
from course_kit.parallel.tp_llama import shard_llama


def _run_ranks(fns):
    """Run fns[r]() as rank r, one at a time, turns passed at each push; their results."""
    turns = fns[0].exchange._turns
    turns.now, turns.done = 0, set()
    out, errors = [None] * len(fns), []

    def run(r):
        turns.start(r)
        try:
            out[r] = fns[r]()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
        finally:
            turns.end(r)
    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


class _Rank:
    def __init__(self, step, tokens, positions, cache):
        self.step, self.exchange = step, step.exchange
        self.args = (tokens, positions, cache)

    def __call__(self):
        logits = self.step(*self.args)
        return logits.clone(), self.step.greedy(logits)


def _setup(dtype, world=2, seed=0):
    model = llama.Transformer.from_preset("tiny", seed=seed, dtype=dtype)
    cfg = model.config
    full = llama.StaticKVCache(cfg, 2, 200, dtype)
    prompts = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    model.prefill(prompts, full)
    shards = [shard_llama(model, rank_of=(r, world)) for r in range(world)]
    head_blocks = G.argmax_buffers(shards[0].head_weight, 1)[0].shape[1]
    exchanges = X.SimulatedExchange.group(world, cfg.n_layers, cfg.dim, cfg.vocab_size, dtype, head_blocks=head_blocks)
    ranks = []
    for r, shard in enumerate(shards):
        cache = llama.StaticKVCache(shard.config, 2, 200, dtype)
        heads = kv_heads_of_rank(cfg.n_heads, cfg.n_kv_heads, r, world)
        cache.k.copy_(full.k[:, :, heads.start:heads.stop])        # this rank's K/V heads
        cache.v.copy_(full.v[:, :, heads.start:heads.stop])
        ranks.append((TritonDecodeStep(shard, exchange=exchanges[r]), cache))
    return model, full, ranks


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_folded_exchange_on_two_ranks_is_the_unsharded_step(dtype):
    model, full, ranks = _setup(dtype)
    tokens, positions = torch.tensor([3, 4]), torch.tensor([6, 2])
    want = model.decode(tokens, positions, full).float()
    for _ in range(2):      # two steps: the flags' second turn (epoch 1) must wait for its own pushes
        got = _run_ranks([_Rank(step, tokens, positions, cache) for step, cache in ranks])
        for logits, token in got:    # greedy: one kernel over every rank's blocks of the logits
            err = float((logits.float() - want).abs().max() / want.abs().max())
            assert err < (1e-5 if dtype == torch.float32 else 3e-2), err
            assert token.tolist() == want.argmax(-1).tolist()
        assert torch.equal(got[0][0], got[1][0])                  # every rank holds the same logits
    for step, _ in ranks:
        step.exchange.check()
        assert step.exchange.epoch.tolist() == [2, 0]              # two steps, no rank gave up


def test_a_consumer_whose_peer_never_pushed_gives_up_and_check_says_so():
    ranks = X.SimulatedExchange.group(2, layers=1, dim=16, vocab=32, dtype=torch.float32)
    w = torch.randn(16, 16)
    x0 = torch.randn(1, 16)
    G.gemv(w, x0, out=ranks[0].push_x(0, 1))                      # rank 0 pushes; rank 1 never does
    G.gemv(w, ranks[0].sum_x(0, 1), prologue="norm", norm_weight=torch.ones(16))
    with pytest.raises(RuntimeError, match="never arrived"):
        ranks[0].check()


def test_every_rank_holds_every_part_and_reads_their_sum_rounded():
    ranks = X.SimulatedExchange.group(2, layers=1, dim=64, vocab=32, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    w = [torch.randn(64, 64, generator=g).to(torch.bfloat16) for _ in range(2)]
    h = [torch.randn(1, 64, generator=g).to(torch.bfloat16) for _ in range(2)]
    parts = [G.gemv(w[r], h[r], out=ranks[r].push_x(1, 1)).clone() for r in range(2)]
    want = (parts[0].float() + parts[1].float()).to(torch.bfloat16)
    sums = []
    for r in range(2):
        assert torch.equal(ranks[r].x_slots[1, 0, :1], parts[0]) and torch.equal(ranks[r].x_slots[1, 1, :1], parts[1])
        eye = torch.eye(64, dtype=torch.bfloat16)
        sums.append(G.gemv(eye, ranks[r].sum_x(1, 1)))             # x read through an identity product
    # rounded to bf16 once (the interpreter rounds toward zero, a GPU to nearest: one ulp apart)
    torch.testing.assert_close(sums[0].float(), want.float(), rtol=2 ** -7, atol=0)
    assert torch.equal(sums[0], sums[1])
    assert ranks[0].flags.tolist() == [0, 2, 0]                    # exchange 1 counted both ranks in


def test_a_step_refuses_an_exchange_made_for_another_shape():
    model = llama.Transformer.from_preset("tiny", seed=0)
    shard = shard_llama(model, rank_of=(0, 2))
    ex = X.SimulatedExchange.group(2, model.config.n_layers, model.config.dim, model.config.vocab_size, head_blocks=1)
    with pytest.raises(ValueError, match="logits blocks"):
        TritonDecodeStep(shard, exchange=ex[0])

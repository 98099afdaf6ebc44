"""Sampling: greedy, temperature, top-k and top-p against direct references."""
import pytest
import torch

from course_kit.models import sampling


def test_greedy_is_argmax():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampling.sample(logits), logits.argmax(-1))
    # top_k=1 with any temperature is greedy too
    assert torch.equal(sampling.sample(logits, temperature=2.0, top_k=1), logits.argmax(-1))


def test_frequencies_follow_softmax_with_temperature():
    logits = torch.tensor([1.0, 0.0, -1.0, 2.0, 0.5])
    n = 40_000
    gen = torch.Generator().manual_seed(1)
    draws = sampling.sample(logits.expand(n, 5), temperature=0.7, generator=gen)
    freq = torch.bincount(draws, minlength=5).float() / n
    want = torch.softmax(logits / 0.7, -1)
    # binomial standard error is below 0.0025 here; allow 4 of them
    assert (freq - want).abs().max() < 0.01


def reference_keep(logits, top_k, top_p):
    """The kept set, built one token at a time from the sorted probabilities."""
    order = logits.argsort(descending=True).tolist()
    if top_k:
        order = order[:top_k]
    probs = torch.softmax(logits[order], -1) if top_k else torch.softmax(logits, -1)[order]
    keep, mass = [], 0.0
    for tok, p in zip(order, probs.tolist()):
        if mass >= top_p:
            break
        keep.append(tok)
        mass += p
    return set(keep)


@pytest.mark.parametrize("top_k,top_p", [(3, 1.0), (0, 0.5), (0, 0.9), (6, 0.8), (0, 1e-6)])
def test_filter_keeps_the_reference_set(top_k, top_p):
    logits = torch.randn(4, 20, generator=torch.Generator().manual_seed(2))
    kept = sampling.filter_logits(logits, top_k, top_p).isfinite()
    for row in range(4):
        got = set(torch.nonzero(kept[row]).flatten().tolist())
        assert got == reference_keep(logits[row], top_k, top_p)


def test_samples_stay_inside_the_filtered_set():
    logits = torch.randn(2000, 30, generator=torch.Generator().manual_seed(3))
    draws = sampling.sample(logits, temperature=1.5, top_k=4, generator=torch.Generator().manual_seed(4))
    top4 = logits.topk(4, -1).indices
    assert (top4 == draws[:, None]).any(-1).all()


def test_seeded_and_noise_driven_draws_are_reproducible():
    logits = torch.randn(8, 100, generator=torch.Generator().manual_seed(5))
    a = sampling.sample(logits, 1.0, generator=torch.Generator().manual_seed(6))
    b = sampling.sample(logits, 1.0, generator=torch.Generator().manual_seed(6))
    noise = torch.rand(8, 100, generator=torch.Generator().manual_seed(6))
    c = sampling.sample(logits, 1.0, uniform=noise)
    assert torch.equal(a, b) and torch.equal(a, c)


def test_bad_arguments_name_the_limits():
    logits = torch.zeros(2, 10)
    with pytest.raises(ValueError, match=">= 0"):
        sampling.sample(logits, temperature=-1.0)
    with pytest.raises(ValueError, match=r"\[0, 10\]"):
        sampling.sample(logits, temperature=1.0, top_k=11)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        sampling.sample(logits, temperature=1.0, top_p=0.0)

"""The acceptance rules of speculative decoding and the expected speed-up (course_kit/capstone/speculative/rules.py).

The sampled rule is checked the way its paper states it (Leviathan et al. 2023, theorem 3.5): tokens
produced by drafting and rejection are distributed as the target's own samples. A Markov chain over
4 tokens stands in for the models (target p(b|a), a different draft q(b|a)); 60,000 independent
sequences are decoded at once, k = 2 draft tokens a round, and the joint law of the first three
tokens (64 cells) is compared with the target chain's by a chi-square test. A rule that keeps a
draft token only when p >= q (no coin flip) fails the same test by far.
"""
import math

import pytest
import torch

from course_kit.capstone.speculative import rules

V, K, T, N = 4, 2, 3, 60_000


def _chain(seed: int, sharp: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(sharp * torch.randn(V, V, generator=g, dtype=torch.float64), dim=-1).float()


P, Q = _chain(1, 1.5), _chain(2, 1.5)


def _decode(rule, seed: int = 0) -> torch.Tensor:
    """N sequences from token 0, T tokens each, by drafting from Q and verifying against P."""
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros(N, T + K + 1, dtype=torch.long)
    have = torch.zeros(N, dtype=torch.long)
    last = torch.zeros(N, dtype=torch.long)
    rows = torch.arange(N)
    for _ in range(T):                                      # each round emits at least one token
        drafts, prev = [], last
        for _ in range(K):
            prev = torch.multinomial(Q[prev], 1, generator=g)[:, 0]
            drafts.append(prev)
        d = torch.stack(drafts, 1)                          # [N, K]
        contexts = torch.cat((last[:, None], d), 1)         # the token before each of the K+1 positions
        p, q = P[contexts], Q[contexts[:, :K]]
        emitted, n_new, _ = rule(p, q, d, torch.rand(N, K, generator=g), torch.rand(N, K + 1, V, generator=g))
        for i in range(K + 1):                              # append the first n_new of each row
            take = (i < n_new) & (have < out.shape[1])
            out[rows[take], have[take]] = emitted[take, i]
            have = have + take.long()
        last = out[rows, have - 1]
    return out[:, :T]


def _chi_square_pvalue(samples: torch.Tensor) -> float:
    cells = (samples * torch.tensor([V * V, V, 1])).sum(1)
    observed = torch.bincount(cells, minlength=V ** T).double()
    a, b, c = torch.meshgrid(torch.arange(V), torch.arange(V), torch.arange(V), indexing="ij")
    exact = (P[0][a] * P[a, b] * P[b, c]).double().flatten()   # the target chain's law of 3 tokens
    expected = N * exact
    assert expected.min() > 20                              # the approximation holds in every cell
    stat = ((observed - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((V ** T - 1) / 2.0, dtype=torch.float64), stat / 2))


def _keep_when_target_is_likelier(p, q, d, u_accept, u_draw):
    """A plausible wrong rule: keep d_i when p(d_i) >= q(d_i), no coin flip; else the same residual draw."""
    return rules.accept_sampled(p, q, d, torch.where(
        p[:, :-1].gather(2, d[:, :, None])[:, :, 0] >= q.gather(2, d[:, :, None])[:, :, 0], 0.0, 1.0), u_draw)


def test_sampled_rule_gives_the_target_distribution():
    assert _chi_square_pvalue(_decode(rules.accept_sampled)) > 1e-3


def test_a_wrong_acceptance_rule_fails_the_same_check():
    assert _chi_square_pvalue(_decode(_keep_when_target_is_likelier)) < 1e-6


def test_drafting_from_the_target_itself_keeps_every_token():
    p = P[torch.zeros(5, K + 1, dtype=torch.long)]
    d = torch.ones(5, K, dtype=torch.long)
    _, n_new, kept = rules.accept_sampled(p, p[:, :K], d, torch.rand(5, K), torch.rand(5, K + 1, V))
    assert n_new.tolist() == [K + 1] * 5 and kept.tolist() == [[1] * K] * 5


def test_greedy_rule_keeps_the_longest_agreeing_prefix():
    target = torch.tensor([[5, 6, 7, 8], [5, 9, 7, 8], [1, 6, 7, 8]])
    draft = torch.tensor([[5, 6, 7], [5, 6, 7], [5, 6, 7]])
    emitted, n_new, kept = rules.accept_greedy(target, draft)
    assert n_new.tolist() == [4, 2, 1]
    assert kept.tolist() == [[1, 1, 1], [1, 0, 0], [0, 0, 0]]   # a later match after a miss does not count
    assert emitted[1, :2].tolist() == [5, 9]                        # the kept token, then the target's own


def test_expected_tokens_and_speedup_are_the_papers_formulas():
    # Leviathan et al. 2023, eq. 1: E[tokens] = (1 - a^(k+1)) / (1 - a), a geometric series
    for alpha in (0.0, 0.3, 0.6, 0.9):
        for k in range(0, 9):
            assert rules.expected_tokens(alpha, k) == pytest.approx(sum(alpha ** i for i in range(k + 1)))
    assert rules.expected_tokens(1.0, 4) == 5.0
    # theorem 3.8: the expected walltime improvement is (1 - a^(k+1)) / ((1 - a)(k c + 1))
    assert rules.predicted_speedup(0.8, 5, 0.05) == pytest.approx((1 - 0.262144) / (0.2 * 1.25))   # 2.9514
    assert rules.predicted_speedup(0.8, 0, 0.5) == 1.0        # no draft: the target alone
    assert rules.best_k(0.9, 0.05) > rules.best_k(0.5, 0.05)   # a better draft pays for longer drafts
    with pytest.raises(ValueError, match="alpha must be in"):
        rules.expected_tokens(1.5, 3)


def test_alpha_from_counts_inverts_the_geometric_model():
    alpha, rounds, k = 0.7, 100_000, 4
    kept = [rounds * alpha ** (i + 1) for i in range(k)]      # position i kept when 0..i all were
    assert rules.alpha_from_counts(kept, rounds) == pytest.approx(alpha)
    assert math.isclose(rules.alpha_from_counts([0, 0], 10), 0.0)


def test_the_prediction_from_measured_costs_is_the_papers_when_verifying_costs_one_step():
    for alpha, k, c in ((0.8, 5, 0.05), (0.6, 2, 0.2), (0.9, 8, 0.0)):
        assert rules.predicted_speedup_from_costs(alpha, k, c * 0.3, 0.3, 0.3) == pytest.approx(
            rules.predicted_speedup(alpha, k, c))
    # the H200 record of 2026-12-02, k = 2: alpha 0.738, draft step 0.01728 ms, target 0.16499 ms over
    # one token and 0.27085 ms over three: 2.282644 tokens a round * 0.16499 / (2 * 0.01728 + 0.27085)
    assert rules.predicted_speedup_from_costs(0.738, 2, 0.01728, 0.16499, 0.27085) == pytest.approx(1.2331, abs=1e-4)
    with pytest.raises(ValueError, match="step times must be > 0"):
        rules.predicted_speedup_from_costs(0.8, 2, 0.01, 0.3, 0.0)

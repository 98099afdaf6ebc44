"""Speculative decoding's Triton kernel on a CPU (Triton's interpreter): the fused greedy acceptance against
`rules.accept_greedy` and the bookkeeping it replaces, ties included."""
import pytest
import torch

pytest.importorskip("triton")

from course_kit.capstone.speculative import rules  # noqa: E402
from course_kit.cuda_graphs.decode_kernels.accept import accept_greedy_fused  # noqa: E402

BLOCK = 1024


def _blocks(logits):
    """What the logits product stores with argmax_into: each block's maximum and its (first) index."""
    rows, V = logits.shape
    n = -(-V // BLOCK)
    padded = torch.full((rows, n * BLOCK), float("-inf"))
    padded[:, :V] = logits
    vals, where = padded.view(rows, n, BLOCK).max(-1)
    return vals, (where + torch.arange(n) * BLOCK).int()


@pytest.mark.parametrize("K", [0, 1, 3, 7])
def test_fused_acceptance_does_what_the_pytorch_ops_do(K):
    g = torch.Generator().manual_seed(K)
    V, L = 2500, 9
    for trial in range(4):
        logits = torch.randn(K + 1, V, generator=g).round(decimals=1)       # coarse values: ties happen
        logits[:, 2100] = logits.max(-1).values                             # a tie across blocks in every row
        target = logits.argmax(-1)
        agree = trial if trial < K else K                                   # the draft matches the first `agree`
        draft = target[:K].clone()
        if agree < K:
            draft[agree] = (draft[agree] + 1) % V
        buf = torch.cat((torch.tensor([77]), draft))
        seq = torch.arange(100, dtype=torch.long)
        length, kept, pair = torch.tensor([L]), torch.zeros(max(K, 1), dtype=torch.long), torch.zeros(2, dtype=torch.long)
        accept_greedy_fused(*_blocks(logits), buf, seq, length, kept, pair)

        emitted, n_new, kept_want = rules.accept_greedy(target[None], draft[None])
        n = int(n_new)
        assert int(length) == L + n
        assert seq[L:L + n].tolist() == emitted[0, :n].tolist() and seq[L] == target[0]
        assert kept[:K].tolist() == kept_want[0].tolist()
        assert pair.tolist() == [int(seq[L + n - 2]), int(seq[L + n - 1])] and int(buf[0]) == int(seq[L + n - 1])
        assert seq[:L].tolist() == list(range(L))                            # the prompt is untouched

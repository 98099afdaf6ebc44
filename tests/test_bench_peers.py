"""The peer timing shared by the batching and capstone topics."""
import pytest

from course_kit.benchmarks.batching import time_peer


def test_time_peer_warms_up_then_times_the_workload():
    calls = []

    def peer(prompts, news):
        calls.append(list(news))
        return [[0] * n for n in news], {"graphs": True}

    seconds, extra = time_peer(peer, [[1, 2], [3], [4, 5, 6]], [3, 5, 2])
    assert calls == [[4, 4], [3, 5, 2]]          # the warm-up on two short requests, then the timed call
    assert seconds >= 0 and extra == {"graphs": True}


def test_time_peer_rejects_outputs_of_other_lengths():
    with pytest.raises(AssertionError, match="lengths"):
        time_peer(lambda ps, ns: [[0] * (n - 1) for n in ns], [[1], [2]], [3, 3])

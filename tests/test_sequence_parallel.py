"""Sequence parallelism run on gloo: equal to the unsharded block, and every saved activation / t."""
import pytest

from course_kit.parallel import launcher, sp_run


def test_tp_and_sp_blocks_equal_the_unsharded_block_and_sp_divides_saved_bytes():
    for r in launcher.launch(sp_run.check_sp, 2, seq=32, hidden=16, backend="gloo"):
        for k in ("out", "dx", "dw1", "dnorm"):
            assert r[f"tp_{k}"] < 1e-5 and r[f"tp_sp_{k}"] < 1e-5, k
        one, tp, sp = r["saved_bytes_one_process"], r["tp_saved_bytes"], r["tp_sp_saved_bytes"]
        # TP splits only the GeLU's input and output (s x 4h each); LayerNorm and the first
        # linear's input stay whole; with SP everything a rank saves is 1/t of one process's
        assert sp * 2 == one
        assert tp == one - 2 * (32 * 4 * 16 * 4) // 2
        assert one > tp > sp


def test_sp_needs_a_divisible_sequence():
    with pytest.raises(Exception, match="divisible"):
        launcher.launch(sp_run.check_sp, 2, seq=33, backend="gloo")

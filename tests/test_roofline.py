import pytest

from course_kit import device
from course_kit.roofline import ceilings as roofline
from course_kit.plots import roofline_figure


def test_matmul_rate_counts_2n3_flops():
    row = roofline.matmul_rate(64, "fp32", repeat=3)
    assert row["flops"] == 2 * 64**3
    assert row["tflops"] == pytest.approx(row["flops"] / row["timing"]["median_s"] / 1e12)


def test_copy_counts_read_plus_write():
    row = roofline.copy_bandwidth(2**20, repeat=3)
    assert row["bytes"] == 2 * 2**20


def test_bad_input():
    with pytest.raises(ValueError, match="fp64"):
        roofline.matmul_rate(64, "fp64")
    with pytest.raises(ValueError, match="n_bytes"):
        roofline.copy_bandwidth(10)


def test_summary_against_spec():
    rows = [{"name": "copy", "gbs": 4300.0}, {"name": "matmul_bf16", "tflops": 790.0}]
    s = roofline.summarise(rows, device.peaks("NVIDIA H200"))
    assert s["fraction_of_spec"]["copy"] == pytest.approx(4300 / 4800)
    assert s["fraction_of_spec"]["bf16"] == pytest.approx(790 / 989.5)


def test_roofline_figure_is_min_of_ceilings():
    fig = roofline_figure(1000.0, {"bf16": 100.0}, [{"name": "k", "intensity": 1.0, "tflops": 0.5}])
    line = fig.data[0]
    for x, y in zip(line.x, line.y):
        assert y == pytest.approx(min(100.0, x * 1000.0 / 1e3))
    assert fig.data[-1].name == "k"
    with pytest.raises(ValueError):
        roofline_figure(0, {"bf16": 1.0})

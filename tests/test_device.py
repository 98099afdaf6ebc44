"""Capability decisions, simulated for the GPUs learners have (sm_75 T4, sm_80 A100, sm_90 H100/H200)."""
import pytest
import torch

from course_kit import device
from course_kit import benchmarks


def test_t4_has_fp16_tensor_cores_but_no_bf16_flash_or_fp8():
    t4 = device.capabilities((7, 5))
    assert t4.fp16_tensor_cores and not t4.bf16_tensor_cores
    assert not t4.sdpa_flash and not t4.fp8 and not t4.tf32
    assert t4.sdpa_efficient and t4.cuda_graphs
    assert device.compute_dtype(t4) == torch.float16      # bf16 is emulated on a T4: use fp16
    assert t4.sm == "sm_75"


def test_a100_has_bf16_flash_but_no_fp8():
    a100 = device.capabilities((8, 0))
    assert a100.bf16_tensor_cores and a100.tf32 and a100.sdpa_flash and not a100.fp8
    assert device.compute_dtype(a100) == torch.bfloat16


def test_hopper_has_everything():
    h = device.capabilities((9, 0))
    assert h.bf16_tensor_cores and h.fp8 and h.sdpa_flash and h.sdpa_cudnn
    assert device.capabilities((8, 9)).fp8          # Ada has fp8 too


def test_cudnn_attention_needs_torch_2_5():
    assert not device.capabilities((9, 0), torch_version="2.4.1").sdpa_cudnn
    assert device.capabilities((9, 0), torch_version="2.11.0+cu130").sdpa_cudnn


def test_cpu_capabilities():
    cpu = device.capabilities(None)
    assert cpu.capability is None and cpu.sm == "cpu"
    assert not cpu.cuda_graphs and not cpu.bf16_tensor_cores
    assert device.compute_dtype(cpu) == torch.float32


@pytest.mark.parametrize("bad", [(9,), (9, -1), ("9", "0")])
def test_bad_capability_is_rejected(bad):
    with pytest.raises(ValueError, match="capability"):
        device.capabilities(bad)


@pytest.mark.parametrize("name, key", [("Tesla T4", "T4"), ("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"),
                                       ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A10G", "A10G"), ("NVIDIA L4", "L4")])
def test_peaks_are_found_by_name(name, key):
    assert device.peaks(name).name == key


def test_peaks_match_datasheets():
    assert device.peaks("NVIDIA L40S") is None
    assert device.peaks("T4").bf16 is None and device.peaks("T4").fp16 == 65.0
    h200 = device.peaks("NVIDIA H200")
    assert h200.hbm_gbs == 4800.0 and h200.bf16 == 989.5 and h200.fp8 == 2 * h200.bf16
    with pytest.raises(ValueError, match="fp64"):
        h200.tflops("fp64")


def test_size_class(monkeypatch):
    monkeypatch.delenv("COURSE_KIT_SMOKE", raising=False)
    assert device.size_class(None) == "cpu"
    assert device.size_class((7, 5), 15.0) == "small_gpu"
    assert device.size_class((9, 0), 139.0) == "full"
    monkeypatch.setenv("COURSE_KIT_SMOKE", "1")
    assert device.size_class((9, 0), 139.0) == "smoke"
    assert device.defaults()["smoke"] is True


def test_describe_has_the_facts():
    d = device.describe()
    for key in ("gpu", "torch", "triton", "transformers", "cpu cores", "colab", "binder"):
        assert key in d
    assert "torch" in str(d) and "<table>" in d._repr_html_()


def test_colab_and_binder_detection(monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-x")
    monkeypatch.setenv("BINDER_LAUNCH_HOST", "https://mybinder.org/")
    assert device.on_colab() and device.on_binder()


def test_as_dtype_is_the_one_parser_of_dtype_names():
    from course_kit import device
    assert device.as_dtype("bfloat16") is torch.bfloat16 and device.as_dtype("bf16") is torch.bfloat16
    assert device.as_dtype("torch.float16") is torch.float16 and device.as_dtype(torch.float32) is torch.float32
    assert device.dtype_name(torch.bfloat16) == "bfloat16"
    with pytest.raises(ValueError, match="float32"):
        device.as_dtype("float8")
    with pytest.raises(ValueError, match="compute dtype"):
        device.as_dtype(torch.int8)


def test_run_topic_hands_every_benchmark_the_defaults_dtype(monkeypatch):
    from course_kit import bench, device
    seen = {}

    @bench.topic("_dtype_probe", help="test only")
    def run(params):
        seen.update(params)
        return {"results": [], "summary": {}}
    try:
        record = benchmarks.run_topic("_dtype_probe")
        assert seen["dtype"] is device.defaults()["dtype"] and record["params"]["dtype"] == device.dtype_name(seen["dtype"])
        benchmarks.run_topic("_dtype_probe", {"dtype": "bf16"})
        assert seen["dtype"] is torch.bfloat16
    finally:
        bench._TOPICS.pop("_dtype_probe", None)


def test_current_capability_is_the_gpus_or_none(monkeypatch):
    monkeypatch.delenv(device.EMULATE_ENV, raising=False)
    expected = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    assert device.current_capability() == expected == device.capabilities().capability
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(device.EMULATE_ENV, "t4")          # nothing to emulate on without a GPU
    assert device.current_capability() is None

"""COURSE_KIT_EMULATE=t4 on a bigger GPU (issue 27), simulated on a CPU: torch.cuda's functions are
replaced by an H200 that records what the course asks of it."""
import types

import pytest
import torch

from course_kit import cli, device, reference

H200_BYTES = 150_029_156_352   # what torch reports for an H200 (139.7 GiB)


@pytest.fixture
def h200(monkeypatch):
    """A simulated single-H200 machine; returns the list of limits the course applied."""
    applied = []
    props = types.SimpleNamespace(name="NVIDIA H200", total_memory=H200_BYTES, multi_processor_count=132,
                                  major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda fraction, device=None: applied.append(("memory", fraction, device)))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: applied.append(("threads", n)))
    monkeypatch.setattr(torch.backends.cuda, "enable_flash_sdp", lambda on: applied.append(("flash", on)))
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", lambda on: applied.append(("cudnn", on)),
                        raising=False)
    monkeypatch.setattr(device, "driver_version", lambda: "580.00")
    monkeypatch.setattr(device, "_applied", set())
    monkeypatch.delenv("COURSE_KIT_SMOKE", raising=False)
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield applied
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def test_without_emulation_the_h200_decides_as_an_h200(h200, monkeypatch):
    monkeypatch.delenv(device.EMULATE_ENV, raising=False)
    assert device.capabilities().sm == "sm_90" and device.capabilities().sdpa_flash
    assert device.defaults()["size"] == "full" and device.defaults()["dtype"] == torch.bfloat16
    assert reference.gpu_slug() == "h200" and device.gpu_name() == "NVIDIA H200"
    assert h200 == [], "no limit is applied without emulation"


def test_t4_emulation_takes_the_t4s_decisions(h200, monkeypatch):
    monkeypatch.setenv(device.EMULATE_ENV, "t4")
    caps = device.capabilities()
    assert caps.capability == (7, 5) and caps.sm == "sm_75"
    assert not (caps.bf16_tensor_cores or caps.tf32 or caps.fp8 or caps.sdpa_flash or caps.sdpa_cudnn)
    assert caps.fp16_tensor_cores and caps.sdpa_efficient and caps.cuda_graphs
    # exactly what a real T4 gets from the same functions
    assert caps == device.capabilities((7, 5))
    defaults = device.defaults()
    assert defaults["size"] == "small_gpu" == device.size_class((7, 5), memory_gib=14.7)
    assert defaults["dtype"] == torch.float16 and defaults["capability"] == (7, 5)
    assert defaults["matmul_n"] == device._ROOFLINE["small_gpu"]["matmul_n"]


def test_t4_emulation_caps_memory_threads_and_torchs_own_choices_once(h200, monkeypatch):
    monkeypatch.setenv(device.EMULATE_ENV, "t4")
    for _ in range(3):
        device.capabilities(), device.defaults(), device.describe(), reference.gpu_slug()
    memory = [a for a in h200 if a[0] == "memory"]
    assert len(memory) == 1, "the limits are applied once"
    fraction = memory[0][1]
    assert fraction * H200_BYTES == pytest.approx(device.EMULATIONS["t4"].memory_bytes)
    assert 14.5 < fraction * H200_BYTES / 2**30 < 15.0                 # a T4's 15 GB, in GiB
    assert ("threads", 2) in h200 and ("flash", False) in h200
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_everything_shown_is_labelled_emulated(h200, monkeypatch):
    monkeypatch.setenv(device.EMULATE_ENV, "t4")
    desc = device.describe()
    assert desc["gpu"] == "T4 emulated on NVIDIA H200"
    assert desc["compute capability"] == "sm_75" and desc["gpu memory (GiB)"] == 14.7
    assert "emulation" in desc and "NVIDIA H200" in desc["emulation"]
    # records go to their own folder and carry the label, never a T4's slug or the H200's
    assert reference.gpu_slug() == "t4-emulated"
    assert reference.path("roofline").parent.name == "t4-emulated"
    assert device.gpu_name() == "T4 emulated on NVIDIA H200"
    # peaks stay the real GPU's: the speeds measured are the H200's
    assert device.peaks().name == "H200"


def test_doctor_says_when_emulation_is_on(h200, monkeypatch):
    monkeypatch.delenv(device.EMULATE_ENV, raising=False)
    assert cli.emulation_line() is None
    monkeypatch.setenv(device.EMULATE_ENV, "t4")
    line = cli.emulation_line()
    assert line.startswith("Emulation ON: T4 emulated on NVIDIA H200") and "t4-emulated" in line


def test_on_a_cpu_emulation_is_off_and_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(device.EMULATE_ENV, "t4")
    assert device.emulation() is None and device.capabilities().capability is None
    assert reference.gpu_slug() == "cpu"
    assert "off" in device.describe()["emulation"] and "off" in cli.emulation_line()


def test_an_unknown_emulation_is_refused_naming_the_choices(monkeypatch):
    monkeypatch.setenv(device.EMULATE_ENV, "a100")
    with pytest.raises(ValueError, match=r"COURSE_KIT_EMULATE='a100'.*\['t4'\]"):
        device.emulation_requested()
    for off in ("", "0", "off"):
        monkeypatch.setenv(device.EMULATE_ENV, off)
        assert device.emulation_requested() is None


def test_t4_emulation_takes_the_t4s_kernel_choices(h200, monkeypatch):
    """No silent sm_90 path under emulation: the Triton flash kernel keeps every autotune config
    (the Hopper-only pruning is off), refuses TMA, refuses bf16, and the SDPA backends are the T4's."""
    pytest.importorskip("triton")
    from course_kit.attention import sdpa_backends, triton_flash
    configs = triton_flash._CONFIGS
    monkeypatch.setattr(triton_flash, "interpreting", lambda: False)
    q = types.SimpleNamespace(is_cuda=True, dtype=torch.bfloat16)
    monkeypatch.delenv(device.EMULATE_ENV, raising=False)
    hopper_kept = triton_flash._prune_configs(configs, {"seq_bucket": 4096})
    monkeypatch.setenv(device.EMULATE_ENV, "t4")
    assert len(triton_flash._prune_configs(configs, {"seq_bucket": 4096})) == len(configs) > len(hopper_kept)
    ok, why = triton_flash.descriptor_usable(q, q, q)
    assert not ok and "sm_90" in why
    support = sdpa_backends.backend_support(device.current_capability(), torch.float16, 128)
    assert not support["flash"][0] and not support.get("cudnn", (False,))[0]


def test_every_notebook_has_an_executed_t4_emulated_copy_that_took_the_t4s_choices():
    """Issue 27: all notebooks executed on the H200 under COURSE_KIT_EMULATE=t4, each run's last line
    in the log ok, each copy labelled, no error outside an exercise cell, and where a copy prints the
    machine table it is the T4's (sm_75, no bf16 tensor cores, no flash SDPA), never the H200's."""
    import json
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    folder = root / "data/reference/t4-emulated/notebooks"
    numbers = sorted(p.name for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(p.name for p in folder.glob("*.ipynb")) == numbers
    last = {}
    for line in (folder / "record.log").read_text().splitlines():
        m = re.match(r"(\d\d_\S+\.ipynb)\s+[\d.]+ s\s+(\S+)", line)
        if m:
            last[m[1]] = m[2]
    assert last == {n: "ok" for n in numbers}
    for name in numbers:
        nb = json.loads((folder / name).read_text())
        text, errors = [], []
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error" and "raises-exception" not in cell["metadata"].get("tags", []):
                    errors.append(out.get("ename"))
                data = out.get("data", {})
                text.append("".join(out.get("text", "")) + "".join(data.get("text/plain", ""))
                            + "".join(data.get("text/markdown", "")))
        joined = "\n".join(text)
        assert "T4 emulated on" in joined and not errors, (name, errors)
        if "compute capability" in joined:
            assert re.search(r"compute capability\s+sm_75", joined) and "sm_90" not in joined, name
            assert re.search(r"bf16 tensor cores\s+False", joined), name
            assert re.search(r"SDPA flash / cuDNN\s+False", joined), name

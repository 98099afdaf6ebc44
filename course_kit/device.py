"""What the machine at hand can do: GPU name, capability, memory, versions, and the choices they imply.

Every notebook starts with `describe()` and sizes itself with `defaults()`. Capability decisions are
pure functions of a compute capability, so they can be tested by simulating sm_75, sm_80 and sm_90.

This module is the one owner of the device decisions: whether CUDA is here (`has_cuda`), which
capability the course decides for (`current_capability`, which honours COURSE_KIT_EMULATE=t4),
whether Triton is installed (`triton_installed`) and which dtype a run computes in
(`compute_dtype`, `param_dtype`). tests/test_layers.py fails if another module asks torch itself.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass

import torch


from .gpu_specs import PEAKS, Peaks  # noqa: E402,F401 (device.peaks() reads them; re-exported)


def peaks(name: str | None = None) -> Peaks | None:
    """Spec peaks for a GPU name such as 'NVIDIA H200' or 'Tesla T4'; None when unknown (or a CPU)."""
    if name is None:
        name = gpu_name()
    if not name:
        return None
    upper = name.upper()
    # A100 before A10G, H100/H200 before anything shorter: first match wins.
    for key in ("H200", "H100", "A100", "A10G", "L4", "T4"):
        if key in upper and not (key == "L4" and "L40" in upper):
            return PEAKS[key]
    return None


# ---------------------------------------------------------------------------------------------
# Emulation: COURSE_KIT_EMULATE=t4 makes a bigger GPU take a T4's decisions (Colab's GPU), so the
# T4 path runs on CUDA where no T4 is at hand. Its speeds are the real GPU's: everything it shows
# is labelled "T4 emulated on <real GPU>", and its records go to data/reference/t4-emulated/.
# ---------------------------------------------------------------------------------------------
EMULATE_ENV = "COURSE_KIT_EMULATE"


@dataclass(frozen=True)
class Emulated:
    key: str                       # the value of COURSE_KIT_EMULATE
    name: str                      # the GPU it stands for
    capability: tuple[int, int]
    memory_bytes: int              # GPU memory the process may use
    cpu_threads: int

    @property
    def slug(self) -> str:
        """Where its records go: never the real GPU's folder, never a real T4's."""
        return f"{self.key}-emulated"


# Colab's T4: sm_75, 15 GB usable (torch reports 15,828,320,256 bytes there), 2 vCPUs.
EMULATIONS = {"t4": Emulated("t4", "T4", (7, 5), 15_828_320_256, 2)}
_applied: set[str] = set()


def emulation_requested() -> Emulated | None:
    """The GPU named by COURSE_KIT_EMULATE (unset or empty: None); an unknown name is a ValueError."""
    value = os.environ.get(EMULATE_ENV, "").strip().lower()
    if not value or value in ("0", "off", "none", "false"):
        return None
    if value not in EMULATIONS:
        raise ValueError(f"{EMULATE_ENV}={value!r} is not an emulated GPU; choose one of {sorted(EMULATIONS)}")
    return EMULATIONS[value]


def emulation() -> Emulated | None:
    """The emulated GPU, when one is requested and a CUDA GPU is here to run it (on a CPU there is
    nothing to emulate on: None). The first call applies its limits to this process, once:
    GPU memory capped (torch.cuda.set_per_process_memory_fraction), CPU threads, and torch's own
    choices a T4 cannot make (flash and cuDNN SDPA, TF32) turned off."""
    emu = emulation_requested()
    if emu is None or not torch.cuda.is_available():
        return None
    if emu.key not in _applied:
        _applied.add(emu.key)
        torch.set_num_threads(emu.cpu_threads)
        for index in range(torch.cuda.device_count()):
            total = torch.cuda.get_device_properties(index).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, emu.memory_bytes / total), index)
        if emu.capability < (8, 0):
            torch.backends.cuda.enable_flash_sdp(False)
            if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
                torch.backends.cuda.enable_cudnn_sdp(False)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
    return emu


def has_cuda() -> bool:
    """Whether a CUDA GPU is here (an emulated T4 runs on one, so it counts)."""
    return torch.cuda.is_available()


def use_triton_interpreter_without_cuda() -> None:
    """Without CUDA, run Triton kernels on CPU tensors through Triton's interpreter.

    Triton reads TRITON_INTERPRET when a kernel is *defined*, so every module that defines kernels
    (attention/, cuda_graphs/decode_kernels/) calls this first. Nothing else does: importing the course model or the engine, which
    need no Triton on a CPU, leaves the environment alone. An explicit setting is kept.
    """
    if not has_cuda():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def default_device() -> str:
    """"cuda" where a GPU is here, else "cpu": what `defaults()["device"]` holds."""
    return "cuda" if has_cuda() else "cpu"


def current_capability(dev: "torch.device | int | str | None" = None) -> tuple[int, int] | None:
    """The compute capability the course decides for: the emulated GPU's, else the GPU's (`dev`, or
    the current one), else None on a CPU. Code that picks a kernel or a backend asks this, never
    torch.cuda.get_device_capability(), so COURSE_KIT_EMULATE=t4 reaches every decision."""
    emu = emulation()
    if emu is not None:
        return emu.capability
    if not has_cuda() or (isinstance(dev, torch.device) and dev.type != "cuda"):
        return None
    return torch.cuda.get_device_capability(dev)


def multiprocessors(dev: "torch.device | int | None" = None) -> int:
    """How many streaming multiprocessors a CUDA device has (persistent kernels launch per SM)."""
    return torch.cuda.get_device_properties(dev if dev is not None else 0).multi_processor_count


# ---------------------------------------------------------------------------------------------
# Capabilities
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Capabilities:
    capability: tuple[int, int] | None   # None on a CPU
    bf16_tensor_cores: bool   # sm_80+; is_bf16_supported() is also true on a T4, through emulation
    fp16_tensor_cores: bool   # sm_70+
    tf32: bool                # sm_80+
    fp8: bool                 # sm_89+ (Ada, Hopper)
    sdpa_flash: bool          # PyTorch's flash backend needs sm_80+
    sdpa_efficient: bool      # memory-efficient backend: sm_50+
    sdpa_cudnn: bool          # cuDNN attention backend: sm_80+ in torch >= 2.5
    triton: bool              # Triton compiles for sm_75+; on a CPU only its interpreter runs
    cuda_graphs: bool

    @property
    def sm(self) -> str:
        return "cpu" if self.capability is None else f"sm_{self.capability[0]}{self.capability[1]}"



def triton_installed() -> bool:
    """Whether triton can be imported here (found without importing it: that takes seconds)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):    # ValueError: hidden as None in sys.modules (the tests do)
        return False


def capabilities(capability: tuple[int, int] | None = ..., *, torch_version: str | None = None) -> Capabilities:
    """Capability flags for a compute capability; by default the GPU at hand (None: a CPU).

    Pass `capability=(7, 5)` to simulate a T4, `(8, 0)` an A100, `(9, 0)` an H100/H200.
    """
    if capability is ...:
        capability = current_capability()
    if capability is not None:
        if len(capability) != 2 or not all(isinstance(c, int) and c >= 0 for c in capability):
            raise ValueError(f"capability must be a (major, minor) pair of ints, got {capability!r}")
        capability = (int(capability[0]), int(capability[1]))
    version = _version_tuple(torch_version or torch.__version__)
    gpu = capability is not None
    at_least = (lambda major, minor: gpu and capability >= (major, minor))
    return Capabilities(
        capability=capability,
        bf16_tensor_cores=at_least(8, 0),
        fp16_tensor_cores=at_least(7, 0),
        tf32=at_least(8, 0),
        fp8=at_least(8, 9),
        sdpa_flash=at_least(8, 0),
        sdpa_efficient=at_least(5, 0),
        sdpa_cudnn=at_least(8, 0) and version >= (2, 5),
        triton=triton_installed() and (not gpu or capability >= (7, 5)),
        cuda_graphs=gpu,
    )


def _version_tuple(text: str) -> tuple[int, int]:
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


# ---------------------------------------------------------------------------------------------
# Description of the machine
# ---------------------------------------------------------------------------------------------
def gpu_name() -> str | None:
    """The GPU's name; under emulation "T4 emulated on NVIDIA H200" (records and banners carry it)."""
    if not has_cuda():
        return None
    emu = emulation()
    real = torch.cuda.get_device_name()
    return f"{emu.name} emulated on {real}" if emu is not None else real


def driver_version() -> str | None:
    """The NVIDIA display driver (from nvidia-smi), else the CUDA driver API version, else None."""
    if not has_cuda():
        return None
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
            if out:
                return out[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        v = torch._C._cuda_getDriverVersion()
        return f"CUDA driver API {v // 1000}.{(v % 1000) // 10}"
    except Exception:  # noqa: BLE001 - private API, best effort
        return None


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def on_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def on_binder() -> bool:
    return any(k in os.environ for k in ("BINDER_LAUNCH_HOST", "BINDER_REPO_URL", "BINDER_REF_URL"))


class Description(dict):
    """A dict of facts about the machine that prints as a two-column table."""

    def __str__(self) -> str:
        width = max(len(k) for k in self)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.items())

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td style='text-align:left'><b>{k}</b></td>"
                       f"<td style='text-align:left'>{v}</td></tr>" for k, v in self.items())
        return f"<table>{rows}</table>"


def describe() -> Description:
    """The GPU (or CPU), its capability and memory, the driver, library versions and where we run."""
    caps = capabilities()
    d = Description()
    if has_cuda():
        props = torch.cuda.get_device_properties(0)
        emu = emulation()
        d["gpu"] = gpu_name()
        d["gpu count"] = torch.cuda.device_count()
        d["compute capability"] = caps.sm
        d["gpu memory (GiB)"] = round(min(props.total_memory, emu.memory_bytes if emu else props.total_memory)
                                      / 2**30, 1)
        if emu is not None:
            d["emulation"] = (f"{EMULATE_ENV}={emu.key}: {emu.name} decisions ({caps.sm}, memory capped, "
                              f"{emu.cpu_threads} CPU threads) at {props.name}'s speed")
        d["driver"] = driver_version()
        d["CUDA (torch build)"] = torch.version.cuda
    else:
        d["gpu"] = "none (CPU only)"
        d["gpu count"] = 0
    d["cpu"] = platform.processor() or platform.machine()
    d["cpu cores"] = os.cpu_count()
    if emulation_requested() is not None and not has_cuda():
        d["emulation"] = f"{EMULATE_ENV}={emulation_requested().key} is set, but off: no CUDA GPU to run it on"
    d["python"] = platform.python_version()
    d["torch"] = torch.__version__
    d["triton"] = _package_version("triton") or "not installed"
    d["transformers"] = _package_version("transformers") or "not installed"
    d["bf16 tensor cores"] = caps.bf16_tensor_cores
    d["fp8"] = caps.fp8
    d["SDPA flash / cuDNN"] = f"{caps.sdpa_flash} / {caps.sdpa_cudnn}"
    d["CUDA graphs"] = caps.cuda_graphs
    d["Triton"] = caps.triton if caps.capability is not None else (
        "interpreter only (TRITON_INTERPRET=1)" if caps.triton else False)
    d["colab"] = on_colab()
    d["binder"] = on_binder()
    d["smoke mode"] = is_smoke()
    return d


# ---------------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------------
def is_smoke() -> bool:
    """True under COURSE_KIT_SMOKE=1: the smallest sizes, which is what CI uses."""
    return os.environ.get("COURSE_KIT_SMOKE", "").strip().lower() in ("1", "true", "yes", "on")


SIZES = ("smoke", "cpu", "small_gpu", "full")


def size_class(capability: tuple[int, int] | None = ..., memory_gib: float | None = None) -> str:
    """smoke (CI), cpu, small_gpu (a T4 or anything under 40 GiB) or full (A100/H100/H200 class)."""
    if is_smoke():
        return "smoke"
    emu = emulation()
    if capability is ...:
        capability = current_capability()
    if capability is None:
        return "cpu"
    if memory_gib is None:
        memory_gib = torch.cuda.get_device_properties(0).total_memory / 2**30 if has_cuda() else 0
        if emu is not None:
            memory_gib = min(memory_gib, emu.memory_bytes / 2**30)
    return "full" if memory_gib >= 40 and capability >= (8, 0) else "small_gpu"


# The roofline measurements of notebook 00, per size class.
_ROOFLINE = {
    "smoke": {"copy_mib": 16, "matmul_n": 256, "repeat": 5},
    "cpu": {"copy_mib": 256, "matmul_n": 1024, "repeat": 10},
    "small_gpu": {"copy_mib": 1024, "matmul_n": 4096, "repeat": 20},
    "full": {"copy_mib": 4096, "matmul_n": 8192, "repeat": 30},
}


DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}


def as_dtype(value: "torch.dtype | str") -> torch.dtype:
    """A compute dtype from a torch.dtype or its name ('bfloat16', 'bf16', 'torch.bfloat16').

    Records store dtypes as names; benchmarks and notebooks get them back through this, so the
    rule of which dtype to run in is decided once, by `defaults()`.
    """
    if isinstance(value, torch.dtype):
        if value not in DTYPE_NAMES.values():
            raise ValueError(f"compute dtype must be one of {sorted(DTYPE_NAMES)}, got {value}")
        return value
    name = str(value).replace("torch.", "").strip().lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_NAMES:
        raise ValueError(f"compute dtype must be one of {sorted(DTYPE_NAMES)} (or {sorted(_DTYPE_ALIASES)}), "
                         f"got {value!r}")
    return DTYPE_NAMES[name]


def dtype_name(value: "torch.dtype | str") -> str:
    """'bfloat16' for torch.bfloat16 (what records and prose show)."""
    return str(as_dtype(value)).replace("torch.", "")


def param_dtype(params: "dict | None" = None) -> torch.dtype:
    """The dtype of a bench run or workload: `params["dtype"]` when given (a name or a torch.dtype),
    else `compute_dtype()` for the device at hand."""
    given = (params or {}).get("dtype")
    return as_dtype(given) if given else compute_dtype()


def autocast_dtype(device_type: str) -> torch.dtype:
    """The 16-bit type autocast runs in: the compute dtype on a GPU (bf16, fp16 on a T4), and bf16 on
    a CPU, the one CPU autocast runs fast."""
    return compute_dtype() if device_type == "cuda" else torch.bfloat16


def compute_dtype(caps: "Capabilities | None" = None) -> torch.dtype:
    """The course's one dtype rule: bf16 where there are bf16 tensor cores (sm_80+), fp16 on older
    GPUs (a T4 emulates bf16 slowly), fp32 on a CPU. `defaults()["dtype"]` is this for the device at hand."""
    caps = caps if caps is not None else capabilities()
    if caps.capability is None:
        return torch.float32
    return torch.bfloat16 if caps.bf16_tensor_cores else torch.float16


def defaults() -> dict:
    """Device, dtype and size class for this machine; notebooks' `parameters` cells start from it."""
    caps = capabilities()
    size = size_class()
    return {
        "device": default_device(),
        "dtype": compute_dtype(caps),
        "smoke": is_smoke(),
        "size": size,
        "gpu": gpu_name(),
        "capability": caps.capability,
        **_ROOFLINE[size],
    }

"""How `make lab` and `make test` install torch, before the course itself (`python -m course_kit.torch_install`).

- torch already importable in the environment: nothing.
- an NVIDIA GPU here (`nvidia-smi` on PATH): the pinned release from the default index, whose Linux
  wheels are CUDA builds.
- no NVIDIA GPU, Linux or Windows: the CPU build (`+cpu`) from PyTorch's CPU wheel index, so that no
  multi-GB CUDA build is pulled in; where that index cannot be reached, the default index instead,
  said so (on Linux that is the CUDA build, unless pip is configured with a CPU build on local disk,
  as the course's CI machine is).
- macOS: the default index, whose macOS wheels are CPU (and MPS) builds already.

Standard library only: it runs before anything else is installed.
"""
from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass

TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Plan:
    """What to install and why: `pip_args` after `pip install` (empty: nothing to do), and the line
    printed for the learner."""
    pip_args: tuple[str, ...]
    why: str


def index_reachable(url: str, timeout: float = 10.0) -> bool:
    """True when the index answers for torch's page (any HTTP answer below 500)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout) as r:
            return r.status < 500
    except urllib.error.HTTPError as err:
        return err.code < 500
    except (OSError, ValueError):
        return False


def plan(*, torch_installed: bool, has_nvidia_gpu: bool, system: str, cpu_index_reachable: bool | None,
         version: str = TORCH_VERSION, cpu_index: str = CPU_INDEX) -> Plan:
    """The install for this machine (a pure function: the facts are the arguments). `cpu_index_reachable`
    is only consulted for a machine that would take the CPU index."""
    if torch_installed:
        return Plan((), "torch is already installed in this environment: kept")
    if has_nvidia_gpu:
        return Plan((f"torch=={version}",), f"NVIDIA GPU found (nvidia-smi): torch {version} from the default "
                                            f"index, a CUDA build")
    if system == "Darwin":
        return Plan((f"torch=={version}",), f"macOS: torch {version} from the default index (its macOS builds "
                                            f"are CPU builds)")
    if cpu_index_reachable:
        return Plan((f"torch=={version}+cpu", "--extra-index-url", cpu_index),
                    f"no NVIDIA GPU (no nvidia-smi): torch {version}, CPU build, from {cpu_index}")
    return Plan((f"torch=={version}",),
                f"no NVIDIA GPU, and PyTorch's CPU index {cpu_index} cannot be reached: torch {version} from the "
                f"default index instead. On Linux that is the CUDA build (several GB) unless your pip is set up "
                f"with a CPU build (find-links or a local index); to avoid it, make that index reachable and "
                f"run again")


def torch_installed(python: str) -> bool:
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_kit.torch_install", description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the environment's interpreter")
    parser.add_argument("--version", default=TORCH_VERSION)
    parser.add_argument("--cpu-index", default=CPU_INDEX)
    parser.add_argument("--dry-run", action="store_true", help="say what would be installed, install nothing")
    args = parser.parse_args(argv)
    installed = torch_installed(args.python)
    gpu = shutil.which("nvidia-smi") is not None
    system = platform.system()
    wants_cpu_index = not installed and not gpu and system != "Darwin"
    chosen = plan(torch_installed=installed, has_nvidia_gpu=gpu, system=system, version=args.version,
                  cpu_index=args.cpu_index,
                  cpu_index_reachable=index_reachable(args.cpu_index) if wants_cpu_index else None)
    print(f"torch: {chosen.why}", flush=True)
    if not chosen.pip_args or args.dry_run:
        if chosen.pip_args:
            print("would run: pip install " + " ".join(chosen.pip_args))
        return 0
    return subprocess.run([args.python, "-m", "pip", "install", "-q", *chosen.pip_args]).returncode


if __name__ == "__main__":
    raise SystemExit(main())

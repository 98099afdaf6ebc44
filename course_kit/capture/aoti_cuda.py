"""What the C++ build of a CUDA AOTInductor package needs, found on a machine without a CUDA toolkit.

AOTInductor compiles its generated C++ wrapper with the host's g++ against CUDA's headers and links
it with `-lcuda`. torch looks for the headers in a CUDA toolkit only (CUDA_HOME or CUDA_PATH, nvcc
on PATH, /usr/local/cuda), but a machine whose torch came from pip has CUDA as pip wheels: their
runtime headers sit under site-packages/nvidia/.../include, Triton carries `cuda.h`, and the
driver's `libcuda.so.1` may lack the unversioned `libcuda.so` the linker asks for. `prepare()`
points the build at those for this process, and says what it did (a bench records it); with a
toolkit present it changes nothing.
"""
from __future__ import annotations

import glob
import os
import site
import subprocess
import tempfile


def _site_roots() -> list[str]:
    roots = list(site.getsitepackages())
    user = site.getusersitepackages()
    return roots + ([user] if isinstance(user, str) else list(user))


def _runtime_include() -> str | None:
    for root in _site_roots():
        hits = sorted(glob.glob(os.path.join(root, "nvidia", "**", "include", "cuda_runtime_api.h"), recursive=True))
        if hits:
            return os.path.dirname(hits[0])
    return None


def _triton_include() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "include")
    return path if os.path.isfile(os.path.join(path, "cuda.h")) else None


def _libcuda_dirs() -> list[str]:
    """Directories holding the driver's libcuda.so.1 (from the linker cache, as Triton finds it)."""
    try:
        out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({os.path.dirname(line.split("=>")[-1].strip()) for line in out.splitlines()
                   if "libcuda.so.1" in line and "=>" in line})


def prepare() -> dict:
    """Make this process's AOTInductor CUDA build find CUDA's headers and libcuda; what was done."""
    from torch.utils import cpp_extension
    done: dict = {"cuda_home": cpp_extension.CUDA_HOME, "changes": []}
    if cpp_extension.CUDA_HOME is None:
        inc = _runtime_include()
        if inc is None:
            done["changes"].append("none possible: no CUDA toolkit and no CUDA runtime headers in the pip packages")
            return done
        home = os.path.dirname(inc)
        os.environ["CUDA_HOME"] = home
        cpp_extension.CUDA_HOME = home         # torch read the environment once, at import
        done["cuda_home"] = home
        done["changes"].append(f"CUDA_HOME={home} (the pip wheels' CUDA runtime headers; no toolkit here)")
        if not os.path.isfile(os.path.join(inc, "cuda.h")) and _triton_include() and "CUDA_INC_PATH" not in os.environ:
            os.environ["CUDA_INC_PATH"] = _triton_include()
            done["changes"].append(f"CUDA_INC_PATH={os.environ['CUDA_INC_PATH']} (Triton's cuda.h)")
    dirs = _libcuda_dirs()
    if dirs and not any(os.path.exists(os.path.join(d, "libcuda.so")) for d in dirs):
        link_dir = tempfile.mkdtemp(prefix="course-kit-libcuda-")
        os.symlink(os.path.join(dirs[0], "libcuda.so.1"), os.path.join(link_dir, "libcuda.so"))
        os.environ["LIBRARY_PATH"] = os.pathsep.join(filter(None, [link_dir, os.environ.get("LIBRARY_PATH")]))
        done["changes"].append(f"LIBRARY_PATH gets {link_dir}/libcuda.so -> {dirs[0]}/libcuda.so.1 (-lcuda)")
    return done

"""Old import paths of lesson modules that moved into per-lecture packages (December 2026).

A learner's saved copy of a notebook (`make lab` copies each notebook to work/ once and never
overwrites it) may still say `from course_kit import serve` or `import course_kit.decode_kernels`.
Each such name is served by the module it moved to, with one warning that names the new path;
new code imports the new path.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "course_kit.memory": "course_kit.dtypes.memory",
    "course_kit.capture_gallery": "course_kit.capture.gallery",
    "course_kit.capture_traps": "course_kit.capture.traps",
    "course_kit.decode_explain": "course_kit.cuda_graphs.explain",
    "course_kit.buckets": "course_kit.cuda_graphs.buckets",
    "course_kit.decode_kernels": "course_kit.cuda_graphs.decode_kernels",
    "course_kit.serve": "course_kit.batching.server",
    "course_kit.serve_client": "course_kit.batching.client",
    "course_kit.serve_guard": "course_kit.batching.guard",
    "course_kit.loadgen": "course_kit.batching.loadgen",
    "course_kit.batching_live": "course_kit.batching.live",
    "course_kit.ladder": "course_kit.capstone.ladder",
    "course_kit.engine.async_loop": "course_kit.streams.async_loop",
}


# Functions that moved to another module: {old module: {name: new module}}. The old module forwards
# them (`forwarder`), with the same warning; new code imports the new place.
MOVED_NAMES = {
    "course_kit.bench": {"run_topic": "course_kit.benchmarks", "topics": "course_kit.benchmarks",
                         "import_errors": "course_kit.benchmarks"},
}


def forwarder(module: str):
    """A module-level `__getattr__` for `module` that serves its moved names from their new place."""
    def __getattr__(name: str):
        target = MOVED_NAMES.get(module, {}).get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} moved to {target}.{name}; this notebook was saved before the move",
                      FutureWarning, stacklevel=2)
        return getattr(importlib.import_module(target), name)
    return __getattr__


def new_path(name: str) -> str | None:
    """The module an old dotted name now lives in (submodules of a moved package too), or None."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        target_name = new_path(fullname)
        if target_name is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        target_name = new_path(spec.name)
        warnings.warn(f"{spec.name} moved to {target_name}; this notebook was saved before the move",
                      FutureWarning, stacklevel=2)
        module = importlib.import_module(target_name)
        self.own_spec = module.__spec__   # the import system stamps the old name's spec on it next
        return module

    def exec_module(self, module):
        # The module it stands for has run already; put its own spec back (reload reads it).
        module.__spec__ = self.own_spec


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())   # before the path finder, which would load a second copy of a moved submodule

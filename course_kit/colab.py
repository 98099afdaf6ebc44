"""Installing the course on Colab: what every notebook's setup cell does there (`nbbuild.setup_cell`).

The setup cell clones the repository once (the bootstrap: the package is not importable before it),
then calls `setup()`, which installs the checkout beside Colab's preinstalled torch and triton without
touching them, and turns on Colab's custom widget manager (without it, ipywidgets show "model not
found"). Re-running the cell does nothing more: a marker in the checkout records the install.

Kept free of course imports (only the standard library) so that it runs before the course's
dependencies are installed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

# The repository URL that pyproject.toml's [project.urls] Repository holds until the course is
# published under its real name. Notebooks built with it fail on Colab with a message saying so.
PLACEHOLDER_REPOSITORY = "https://github.com/course-kit/course-kit"
CHECKOUT = "/content/course-kit"
MARKER = ".course-kit-colab-install"
# Packages Colab preinstalls for its GPU and that the course must never replace: a CPU or
# mismatched build pulled in by a resolver would break CUDA for the session.
KEEP = ("torch", "triton")


class SetupError(RuntimeError):
    """The Colab install cannot go ahead (placeholder repository, no torch)."""


def is_placeholder(url: str) -> bool:
    """True when `url` is the placeholder repository (trailing '/' or '.git' ignored)."""
    clean = url.strip().rstrip("/")
    clean = clean[:-4] if clean.endswith(".git") else clean
    return clean.lower() == PLACEHOLDER_REPOSITORY.lower()


def check_repository(url: str) -> None:
    """Raise SetupError naming the fix when `url` is still the placeholder."""
    if is_placeholder(url):
        raise SetupError(f"the course's repository URL is still the placeholder {PLACEHOLDER_REPOSITORY}: set "
                         f"[project.urls] Repository in pyproject.toml to the real repository and rebuild the "
                         f"notebooks (python -m course_kit.nbbuild)")


def installed_versions(python: str, names: Sequence[str] = KEEP) -> dict[str, str]:
    """{name: version} of the distributions installed for interpreter `python` (absent ones left out)."""
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    import json
    done = subprocess.run([python, "-c", code, *names], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def install(checkout: str | os.PathLike = CHECKOUT, *, python: str = sys.executable,
            pip_args: Sequence[str] = (), run: Callable[..., object] = subprocess.run) -> bool:
    """`pip install -e checkout` with the installed torch (and triton) pinned by a constraint file, so
    the resolver keeps them. Returns False, doing nothing, when this checkout was already installed.

    `pip_args` are extra pip options (tests pass `--no-index`); `run` is subprocess.run.
    """
    checkout = Path(checkout)
    if not (checkout / "pyproject.toml").is_file():
        raise SetupError(f"{checkout} is not a checkout of the course (no pyproject.toml)")
    marker = checkout / MARKER
    kept = installed_versions(python)
    if "torch" not in kept:
        raise SetupError(f"no torch is installed for {python}; Colab preinstalls it, and the course never "
                         f"installs its own there")
    stamp = " ".join(f"{k}=={v}" for k, v in sorted(kept.items()))
    if marker.is_file() and marker.read_text().strip() == stamp:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "keep.txt"
        constraints.write_text("".join(f"{k}=={v}\n" for k, v in sorted(kept.items())))
        run([python, "-m", "pip", "install", "-q", "-e", str(checkout), "-c", str(constraints), *pip_args],
            check=True)
    marker.write_text(stamp + "\n")
    return True


def enable_widgets() -> bool:
    """Turn on Colab's custom widget manager (ipywidgets, anywidget); False outside Colab."""
    try:
        from google.colab import output  # type: ignore[import-not-found]
    except ImportError:
        return False
    output.enable_custom_widget_manager()
    return True


def setup(checkout: str | os.PathLike = CHECKOUT, repository: str | None = None) -> None:
    """Everything the setup cell does on Colab after cloning: install, widgets, work in notebooks/."""
    if repository is not None:
        check_repository(repository)
    if install(checkout):
        print(f"installed the course from {checkout} (Colab's torch kept)")
    enable_widgets()
    notebooks = Path(checkout) / "notebooks"
    if notebooks.is_dir():
        os.chdir(notebooks)

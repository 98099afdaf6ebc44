"""Installing the course on Colab: what every notebook's setup cell does there (`nbbuild.setup_cell`).

The setup cell finds the course (the bootstrap: the package is not importable before it), in order:
1. a clone of the repository that pyproject's `[project.urls] Repository` names, once it is set;
2. else a course wheel (`make wheel` builds `dist/course_kit-*.whl`) that the learner uploaded to
   /content (Files panel -> Upload) or put in their Google Drive (mounted at /content/drive);
3. else it stops with two lines saying exactly that, never a traceback (`SetupStop`).
It then calls `setup(source)`, which installs that source beside Colab's preinstalled packages:
torch and triton are pinned to Colab's builds by a constraint file (a resolver must never swap the
CUDA build), and pip's only-if-needed strategy leaves every other preinstalled package (transformers
and its hub dependencies, numpy, plotly, ...) alone wherever it satisfies the course. Only what does
not satisfy it changes: on today's Colab that is the widget stack (ipywidgets 7 -> 8). When a changed
package was already imported by the kernel, or is ipywidgets, the learner is asked once to restart
the session; the re-run after the restart installs nothing and carries on. It then turns on Colab's
custom widget manager (ipywidgets 8 needs it there).

Kept free of course imports (only the standard library) so that it runs before the course's
dependencies are installed, straight out of the wheel (a zip Python imports from).

    python -m course_kit.colab wheel [--out dist]     the course wheel, with its records and traces
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Sequence

# The repository URL that pyproject.toml's [project.urls] Repository holds until the course is
# published under its real name. Notebooks built with it look for a course wheel instead.
PLACEHOLDER_REPOSITORY = "https://github.com/course-kit/course-kit"
CHECKOUT = "/content/course-kit"
# Where the setup cell looks for a wheel: an upload lands in /content; Drive mounts at /content/drive.
WHEEL_FOLDERS = ("/content", "/content/drive/MyDrive", "/content/drive/MyDrive/*")
# Packages Colab preinstalls for its GPU and that the course must never replace: a CPU or
# mismatched build pulled in by a resolver would break CUDA for the session.
KEEP = ("torch", "triton")
# A change to these needs a restart even when the kernel has not imported them yet: Colab's kernel
# and its widget manager speak the ipywidgets version they started with.
RESTART_ALWAYS = ("ipywidgets",)
MARKER = Path.home() / ".cache" / "course_kit" / "colab-install"
DATA_IN_WHEEL = "course_kit/_data"          # records and traces, for a wheel installed without a checkout


class SetupError(RuntimeError):
    """The Colab install cannot go ahead (not a course source, no torch)."""


class SetupStop(Exception):
    """Stops the setup cell (and Run all) with a short message: IPython shows the lines that
    `_render_traceback_` returns instead of a traceback."""

    def __init__(self, *lines: str):
        super().__init__(*lines)
        self.lines = list(lines)

    def _render_traceback_(self) -> list[str]:
        return self.lines


def is_placeholder(url: str | None) -> bool:
    """True when `url` is empty or the placeholder repository (trailing '/' or '.git' ignored)."""
    clean = (url or "").strip().rstrip("/")
    clean = clean[:-4] if clean.endswith(".git") else clean
    return not clean or clean.lower() == PLACEHOLDER_REPOSITORY.lower()


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions(python: str, names: Sequence[str] | None = KEEP) -> dict[str, str]:
    """{canonical name: version} of the distributions installed for interpreter `python`: those in
    `names` (absent ones left out), or every one when `names` is None."""
    code = ("import importlib.metadata as m, json, re, sys\n"
            "out = {}\n"
            "for d in m.distributions():\n"
            "    n = re.sub(r'[-_.]+', '-', d.metadata['Name'] or '').lower()\n"
            "    out.setdefault(n, d.version)\n"
            "want = [re.sub(r'[-_.]+', '-', n).lower() for n in sys.argv[1:]]\n"
            "print(json.dumps({n: v for n, v in out.items() if not want or n in want}))")
    done = subprocess.run([python, "-c", code, *(names or ())], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def changed(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Preinstalled distributions the install replaced or removed: {name: (old, new or None)}."""
    return {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}


def needs_restart(replaced: dict[str, tuple], imported: Sequence[str] = (),
                  modules_of: dict[str, list[str]] | None = None) -> list[str]:
    """The replaced distributions that need a session restart: one whose module the kernel has
    already imported (`imported`: sys.modules' names; `modules_of`: {distribution: [top-level
    modules]}), or one in RESTART_ALWAYS."""
    top = {m.split(".")[0] for m in imported}
    modules_of = modules_of or {}
    return sorted(n for n in replaced
                  if n in RESTART_ALWAYS or any(m in top for m in modules_of.get(n, [n.replace("-", "_")])))


def _modules_of() -> dict[str, list[str]]:
    import importlib.metadata as md
    out: dict[str, list[str]] = {}
    for module, dists in md.packages_distributions().items():
        for d in dists:
            out.setdefault(_canon(d), []).append(module)
    return out


def _project_name(source: Path) -> str:
    """The distribution a source installs: a wheel's name from its file name, a checkout's from pyproject."""
    if source.is_file():
        return _canon(source.name.split("-", 1)[0])
    found = re.search(r'^name\s*=\s*"([^"]+)"', (source / "pyproject.toml").read_text(), re.M)
    return _canon(found.group(1)) if found else "course-kit"


def _stamp(source: Path, kept: dict[str, str]) -> str:
    ident = f"{source.name} {source.stat().st_size}" if source.is_file() else str(source)
    return " ".join([ident] + [f"{k}=={v}" for k, v in sorted(kept.items())])


def install(source: str | os.PathLike = CHECKOUT, *, python: str = sys.executable, pip_args: Sequence[str] = (),
            run: Callable[..., object] = subprocess.run, marker: Path | None = None) -> dict | None:
    """Install `source` (a checkout, editable; or a course wheel) with the installed torch and triton
    pinned by a constraint file, so the resolver keeps them, and pip's only-if-needed upgrade strategy
    for everything else. Returns {name: (old, new)} of the preinstalled distributions it replaced, or
    None, doing nothing, when this source was already installed here (a re-run, or after a restart).

    `pip_args` are extra pip options (tests pass `--no-index`); `run` is subprocess.run.
    """
    source = Path(source)
    is_wheel = source.is_file() and source.suffix == ".whl"
    if not is_wheel and not (source / "pyproject.toml").is_file():
        raise SetupError(f"{source} is neither a course wheel (course_kit-*.whl) nor a checkout of the course "
                         f"(no pyproject.toml)")
    marker = Path(marker or MARKER)
    before = installed_versions(python, None)
    kept = {k: before[k] for k in KEEP if k in before}
    if "torch" not in kept:
        raise SetupError(f"no torch is installed for {python}; Colab preinstalls it, and the course never "
                         f"installs its own there")
    stamp = _stamp(source, kept)
    name = _project_name(source)
    if name in before and marker.is_file() and marker.read_text().strip() == stamp:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "keep.txt"
        constraints.write_text("".join(f"{k}=={v}\n" for k, v in sorted(kept.items())))
        target = [str(source)] if is_wheel else ["-e", str(source)]
        run([python, "-m", "pip", "install", "-q", "--upgrade-strategy", "only-if-needed", *target,
             "-c", str(constraints), *pip_args], check=True)
    after = installed_versions(python, None)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(stamp + "\n")
    return changed({k: v for k, v in before.items() if k != name}, after)


def enable_widgets() -> bool:
    """Turn on Colab's custom widget manager (ipywidgets 8, anywidget); False outside Colab."""
    try:
        from google.colab import output  # type: ignore[import-not-found]
    except ImportError:
        return False
    output.enable_custom_widget_manager()
    return True


def _forget_bootstrap(source: Path) -> None:
    """Drop the course modules imported from the source itself (the wheel on sys.path), so that the
    setup cell's `import course_kit` loads the installed package."""
    if not source.is_file():
        return
    sys.path[:] = [p for p in sys.path if Path(p) != source]
    for name in [n for n in sys.modules if n == "course_kit" or n.startswith("course_kit.")]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("course_kit")]
    import importlib
    importlib.invalidate_caches()


def setup(source: str | os.PathLike = CHECKOUT, repository: str | None = None, *,
          pip_args: Sequence[str] = (), marker: Path | None = None) -> None:
    """Everything the setup cell does on Colab once it has found the course: install, ask for one
    restart where the install replaced something the running kernel uses, widgets, work in notebooks/.
    `repository` is accepted for notebooks built before the wheel route existed."""
    source = Path(source)
    try:
        replaced = install(source, pip_args=pip_args, marker=marker)
    except subprocess.CalledProcessError as err:
        raise SetupStop(f"pip could not install the course from {source} (exit status {err.returncode}; its "
                        f"message is above).",
                        "Fix what it names, or use Runtime → Disconnect and delete runtime, then run this cell again.")
    if replaced is not None:
        kept = ", ".join(f"{n} {v}" for n, v in sorted(installed_versions(sys.executable).items()))
        print(f"installed the course from {source.name} ({kept} kept)")
        if replaced:
            print("updated for the course: " + ", ".join(f"{n} {a} -> {b}" for n, (a, b) in sorted(replaced.items())))
        restart = needs_restart(replaced, list(sys.modules), _modules_of())
        if restart:
            raise SetupStop(f"The course is installed. The running session still holds the old "
                            f"{', '.join(restart)}, so:",
                            "Runtime → Restart session, then run this cell again (once; it will not ask again).")
    _forget_bootstrap(source)
    enable_widgets()
    notebooks = source / "notebooks"
    if notebooks.is_dir():
        os.chdir(notebooks)


# --- the course wheel (make wheel) ---------------------------------------------------------------

def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def add_data(wheel: str | os.PathLike, data: str | os.PathLike,
             include: Sequence[str] = ("reference/**/*.json", "reference/**/*.json.gz", "traces/*.jsonl")) -> int:
    """Add the course's records and traces (`data/`, matched by `include`) to `wheel` under
    course_kit/_data/, rewriting its RECORD: an installed wheel has no checkout, and the notebooks
    read `data/reference` and `data/traces` (reference.root, traces). Returns the files added."""
    wheel, data = Path(wheel), Path(data)
    files = sorted({p for pattern in include for p in data.glob(pattern) if p.is_file()})
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        lines = [line for line in src.read(record_name).decode().splitlines()
                 if line and not line.startswith(record_name) and not line.startswith(DATA_IN_WHEEL + "/")]
        for item in src.infolist():
            if item.filename != record_name and not item.filename.startswith(DATA_IN_WHEEL + "/"):
                out.writestr(item, src.read(item.filename))
        for path in files:
            arcname = f"{DATA_IN_WHEEL}/{path.relative_to(data).as_posix()}"
            payload = path.read_bytes()
            out.writestr(arcname, payload)
            lines.append(_record_line(arcname, payload))
        out.writestr(record_name, "\n".join(lines + [f"{record_name},,"]) + "\n")
    tmp.replace(wheel)
    return len(files)


def build_wheel(out: str | os.PathLike = "dist", project: str | os.PathLike | None = None,
                python: str = sys.executable, isolation: bool = True) -> Path:
    """`make wheel`: the course wheel (pip wheel, no dependencies) with its records and traces, built
    from a clean copy of the package (setuptools reuses build/lib, where modules that have since moved
    or gone would linger)."""
    import shutil
    project = Path(project or Path(__file__).resolve().parents[1])
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("course_kit-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (project / name).is_file():
                shutil.copy(project / name, tmp)
        shutil.copytree(project / "course_kit", Path(tmp) / "course_kit",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_data"))
        subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", *([] if isolation else ["--no-build-isolation"]),
                        "-w", str(out), tmp], check=True)
    wheel = next(out.glob("course_kit-*.whl"))
    add_data(wheel, project / "data")
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_kit.colab")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wheel", help="build the course wheel, with its records and traces, for Colab")
    w.add_argument("--out", default="dist")
    args = parser.parse_args(argv)
    wheel = build_wheel(args.out)
    size = wheel.stat().st_size / 2**20
    print(f"{wheel} ({size:.1f} MiB). On Colab: Files panel (folder icon, left) → Upload → this file, "
          f"or put it in My Drive; then run a notebook's first cell.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

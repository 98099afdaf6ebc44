"""The package's import rules (DESIGN.md, "What may import what"), checked on the source itself.

Imports are read statically (every `import` and `from ... import`, at any depth, including those
inside functions), so a lazy import cannot hide an arrow that runs the wrong way.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "course_kit"

UI = ("course_kit.plots", "course_kit.widgets", "course_kit.notebook")
FRONTS = ("course_kit.cli", "course_kit.nbbuild", "course_kit.grading", "course_kit.batching.server")
FOUNDATION = ("course_kit.device", "course_kit.bench", "course_kit.reference")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every course_kit module `path` imports (relative imports resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)   # `from . import plots`
    return {m for m in out if m == "course_kit" or m.startswith("course_kit.")}


def under(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


GRAPH = {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def is_instructor_tool(mod: str) -> bool:
    """grade, release, sandbox, runner...: everything in grading/ but the checkers and `check` itself."""
    return under(mod, ("course_kit.grading",)) and not under(mod, ("course_kit.grading.checks",)) \
        and mod != "course_kit.grading"


def violations(rule) -> list[str]:
    return sorted(f"{src} -> {dst}" for src, dsts in GRAPH.items() for dst in dsts if rule(src, dst))


def test_the_graph_is_read():
    # a parser that found nothing would pass every rule below
    assert "course_kit.engine.scheduler" in GRAPH["course_kit.engine.engine"] or \
        any(d.startswith("course_kit.engine") for d in GRAPH["course_kit.engine.engine"])
    assert any(d.startswith("course_kit.plots") for src, ds in GRAPH.items() if src.startswith("course_kit.widgets")
               for d in ds)


def test_computation_never_imports_ui():
    """Lesson code and the foundation compute; plots, widgets and the notebook layer only display."""
    computing = lambda m: not under(m, UI + FRONTS) and m != "course_kit"
    bad = violations(lambda s, d: computing(s) and under(d, UI))
    assert not bad, "computation imports UI:\n" + "\n".join(bad)


@pytest.mark.parametrize("layer", ["course_kit.models", "course_kit.attention", "course_kit.engine"])
def test_core_never_imports_grading_widgets_or_cli(layer):
    bad = violations(lambda s, d: under(s, (layer,)) and under(d, ("course_kit.grading", "course_kit.widgets",
                                                                   "course_kit.plots", "course_kit.cli")))
    assert not bad, f"{layer} reaches up:\n" + "\n".join(bad)


def test_instructor_tools_never_import_lessons():
    """Grade, release and the sandbox handle untrusted files; they use no lesson code (only checkers may,
    as an oracle)."""
    allowed = ("course_kit.grading",) + FOUNDATION + ("course_kit.nbbuild",)
    bad = violations(lambda s, d: is_instructor_tool(s) and d != "course_kit" and not under(d, allowed))
    assert not bad, "instructor tools import lessons:\n" + "\n".join(bad)


def test_the_rules_catch_a_wrong_arrow(tmp_path):
    """The checker itself: a lesson module importing a widget is reported."""
    fake = PACKAGE / "engine" / "scheduler.py"
    graph = {"course_kit.engine.scheduler": imports_of(fake) | {"course_kit.widgets.dtypes"}}
    bad = [f"{s} -> {d}" for s, ds in graph.items() for d in ds
           if under(s, ("course_kit.engine",)) and under(d, ("course_kit.widgets",))]
    assert bad == ["course_kit.engine.scheduler -> course_kit.widgets.dtypes"]


MAPPED = ["course_kit", "course_kit.amp", "course_kit.attention", "course_kit.benchmarks", "course_kit.compile_modes",
          "course_kit.dtypes", "course_kit.engine", "course_kit.models", "course_kit.parallel", "course_kit.plots",
          "course_kit.streams", "course_kit.widgets", "course_kit.grading", "course_kit.grading.instructor",
          "course_kit.roofline", "course_kit.capture", "course_kit.cuda_graphs", "course_kit.cuda_graphs.decode_kernels",
          "course_kit.batching", "course_kit.capstone"]


@pytest.mark.parametrize("package", MAPPED)
def test_every_package_map_names_every_module(package):
    """A reader goes from a package's docstring to each of its files in one step: the maps stay complete."""
    folder = PACKAGE.parent.joinpath(*package.split("."))
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    names = [p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")]
    names += [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
    import re
    missing = [n for n in names if not re.search(rf"\b{re.escape(n)}\b", doc)]
    assert not missing, f"{package}/__init__.py's map lacks {missing}"

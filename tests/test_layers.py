"""The package's import rules (DESIGN.md, "What may import what"), checked on the source itself.

Imports are read statically (every `import` and `from ... import`, at any depth, including those
inside functions), so a lazy import cannot hide an arrow that runs the wrong way, nor a cycle.
`from package import name` is an arrow to the submodule `package.name` when there is one, else to
the package itself (the name is then something its `__init__` defines).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "course_kit"
NOTEBOOK_SOURCES = PACKAGE.parent / "notebooks" / "src"

# The layers, lowest first (DESIGN.md draws them). A module may import its own layer and those
# below; "course_kit" itself (the package's __init__) belongs to none and may be imported by all.
LAYERS = [
    ("foundation", ("course_kit.device", "course_kit.gpu_specs", "course_kit.bench", "course_kit.reference", "course_kit.traces",
                    "course_kit.narrate", "course_kit._moved", "course_kit.profiling", "course_kit.paths")),
    ("attention", ("course_kit.attention",)),
    ("models", ("course_kit.models",)),
    ("engine", ("course_kit.engine",)),
    ("lessons", ("course_kit.roofline", "course_kit.dtypes", "course_kit.amp", "course_kit.compile_modes",
                 "course_kit.capture", "course_kit.cuda_graphs", "course_kit.batching", "course_kit.streams",
                 "course_kit.parallel", "course_kit.capstone")),
    ("benchmarks", ("course_kit.benchmarks",)),
    ("display", ("course_kit.plots", "course_kit.notebook", "course_kit.lab")),
    ("widgets", ("course_kit.widgets",)),
    # checkers may use lessons as oracles; the instructor's tools are held to a stricter rule below
    ("fronts", ("course_kit.grading", "course_kit.nbbuild", "course_kit.benchtable", "course_kit.colab",
                "course_kit.torch_install",
                "course_kit.cli", "course_kit.__main__")),
]
INSTRUCTOR = "course_kit.grading.instructor"


def under(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def layer_of(mod: str) -> int | None:
    for number, (_, prefixes) in enumerate(LAYERS):
        if under(mod, prefixes):
            return number
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, modules: set[str] = frozenset(MODULES)) -> set[str]:
    """Every course_kit module `path` imports (relative imports resolved; see the module docstring)."""
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
            for alias in node.names:
                out.add(f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in modules else mod)
    return {m for m in out if m == "course_kit" or m.startswith("course_kit.")}


GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def violations(rule, graph=GRAPH) -> list[str]:
    return sorted(f"{src} -> {dst}" for src, dsts in graph.items() for dst in dsts if rule(src, dst))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w == v or w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_is_read():
    # a parser that found nothing would pass every rule below
    assert "course_kit.engine.scheduler" in GRAPH["course_kit.engine.engine"]
    assert "course_kit.attention.registry" in GRAPH["course_kit.engine.config"]        # a top-level import
    assert "course_kit.attention.paged_triton" in GRAPH["course_kit.attention.engine_step"]   # a lazy one
    assert all(layer_of(m) is not None for m in GRAPH if m != "course_kit"), \
        [m for m in GRAPH if m != "course_kit" and layer_of(m) is None]


def test_no_import_cycles_not_even_through_lazy_imports():
    found = cycles(GRAPH)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_checker_finds_a_long_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_imports_run_one_way_down_the_layers():
    """Nothing imports a layer above its own: computation never imports plots, widgets or fronts;
    the engine never imports a lesson; attention never imports the model."""
    bad = violations(lambda s, d: d != "course_kit" and layer_of(d) is not None and layer_of(s) is not None
                     and layer_of(d) > layer_of(s))
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)


def test_the_layer_rule_catches_a_wrong_arrow():
    """The checker itself: a scheduler importing a widget, or attention importing the engine, is reported."""
    graph = {"course_kit.engine.scheduler": GRAPH["course_kit.engine.scheduler"] | {"course_kit.widgets.dtypes"},
             "course_kit.attention.paged": {"course_kit.engine.config"}}
    bad = violations(lambda s, d: layer_of(d) > layer_of(s), graph)
    assert bad == ["course_kit.attention.paged -> course_kit.engine.config",
                   "course_kit.engine.scheduler -> course_kit.widgets.dtypes"]


def test_instructor_tools_import_only_themselves():
    """The grading rule, stated once: grade, release and the sandbox handle untrusted files, so they
    import nothing of the course but each other (no lesson, no checker, no torch; checkers may use
    lessons as oracles, and run apart). tests/test_grading_layout.py checks what they load at run time."""
    bad = violations(lambda s, d: under(s, (INSTRUCTOR,)) and d != "course_kit" and not under(d, (INSTRUCTOR,)))
    assert not bad, "instructor tools import the course:\n" + "\n".join(bad)


DEVICE_CALLS = re.compile(r"torch\.cuda\.is_available\(|get_device_capability\(")


def test_device_decisions_are_made_only_in_device_py():
    """Whether CUDA is here and which capability the course decides for come from `device.py`
    (has_cuda, current_capability: COURSE_KIT_EMULATE=t4 reaches them), never from torch directly."""
    places = [p for p in sorted(PACKAGE.rglob("*.py")) + sorted(NOTEBOOK_SOURCES.glob("*.py"))
              if p.name != "device.py" or p.parent != PACKAGE]
    bad = [f"{p.relative_to(PACKAGE.parent)}:{n}" for p in places
           for n, line in enumerate(p.read_text().splitlines(), 1) if DEVICE_CALLS.search(line)]
    assert not bad, "ask course_kit.device instead:\n" + "\n".join(bad)
    assert DEVICE_CALLS.search("if torch.cuda.is_available():")     # the pattern itself


MAPPED = ["course_kit", "course_kit.amp", "course_kit.attention", "course_kit.benchmarks", "course_kit.compile_modes",
          "course_kit.dtypes", "course_kit.engine", "course_kit.models", "course_kit.parallel", "course_kit.plots",
          "course_kit.streams", "course_kit.widgets", "course_kit.grading", "course_kit.grading.instructor",
          "course_kit.roofline", "course_kit.capture", "course_kit.cuda_graphs", "course_kit.cuda_graphs.decode_kernels",
          "course_kit.batching", "course_kit.capstone", "course_kit.profiling",
          "course_kit.capstone.speculative"]


@pytest.mark.parametrize("package", MAPPED)
def test_every_package_map_names_every_module(package):
    """A reader goes from a package's docstring to each of its files in one step: the maps stay complete."""
    folder = PACKAGE.parent.joinpath(*package.split("."))
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    names = [p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")]
    names += [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
    missing = [n for n in names if not re.search(rf"\b{re.escape(n)}\b", doc)]
    assert not missing, f"{package}/__init__.py's map lacks {missing}"


def test_every_package_is_mapped():
    packages = sorted(module_name(p.parent / "__init__.py") for p in PACKAGE.rglob("__init__.py"))
    assert sorted(set(packages) - set(MAPPED) - {"course_kit.grading.checks"}) == []


INLINE_DIRECTION = re.compile(r"""['"](faster|slower|more|less|fewer|higher|lower)['"] if .* else ['"]\w+['"]""")


def test_direction_words_are_chosen_only_by_narrate():
    """'faster'/'slower', 'more'/'less' follow the numbers through narrate (DESIGN.md), never an
    inline conditional that another module might word the other way."""
    bad = [f"{p.relative_to(PACKAGE.parent)}:{n}" for p in sorted(PACKAGE.rglob("*.py")) if p.name != "narrate.py"
           for n, line in enumerate(p.read_text().splitlines(), 1) if INLINE_DIRECTION.search(line)]
    assert not bad, "choose the word with narrate.direction (or a phrase of narrate):\n" + "\n".join(bad)
    assert INLINE_DIRECTION.search("f'{\"slower\" if gap > 0 else \"faster\"} than'")

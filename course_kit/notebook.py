"""The thin notebook layer: show real source, label GPU-only sections, state results in prose.

Nothing here computes course content; it only displays what the pure functions return.
"""
from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from typing import Any

import torch

from . import device, narrate, reference
from .plots.tables import COLUMN_PX, Table, html_table  # noqa: F401 (COLUMN_PX: the width figures fit)
from .device import has_cuda


def _display(obj: Any) -> None:
    try:
        from IPython.display import display
    except ImportError:  # plain Python: print instead
        print(obj)
        return
    display(obj)


def source(obj: Any) -> str:
    """The source of a function, class or module, exactly as it runs."""
    return inspect.getsource(obj)


FOLD_AT = 30     # sources longer than this are folded
HEAD = 25        # lines shown of a folded source (from its start, or from `span`)


def fold(text: str, span: "tuple[int, int] | str | None" = None, head: int = HEAD) -> tuple[str, int]:
    """The lines of a source worth showing at once, and how many are left out.

    Short sources (at most FOLD_AT lines) are shown whole. Otherwise the first `head` lines, or a
    chosen `span`: (first, last) line numbers (1-based, inclusive) or the text of the line to start
    from (then `head` lines from there). Left-out stretches are marked by a comment line.
    """
    lines = text.rstrip("\n").splitlines()
    n = len(lines)
    if span is None and n <= FOLD_AT:
        return text, 0
    if isinstance(span, str):
        start = next((i for i, line in enumerate(lines) if span in line), None)
        if start is None:
            raise ValueError(f"span {span!r} is not a line of this source")
        first, last = start + 1, min(n, start + head)
    elif span is not None:
        first, last = span
        if not (1 <= first <= last <= n):
            raise ValueError(f"span {span!r} must satisfy 1 <= first <= last <= {n} (the source's lines)")
    else:
        first, last = 1, min(n, head)
    shown = []
    if first > 1:                       # the signature first, then the span
        shown.append(lines[0])
        first = max(first, 2)
        if first > 2:
            shown.append(f"    # ... {first - 2} lines ...")
    shown += lines[first - 1:last]
    if last < n:
        shown.append(f"    # ... {n - last} more lines ...")
    return "\n".join(shown) + "\n", n - (last - first + 1) - (first > 1)


def _code_html(text: str) -> str:
    from IPython.display import Code
    return Code(text, language="python")._repr_html_()


def show_source(obj: Any, span: "tuple[int, int] | str | None" = None, head: int = HEAD) -> None:
    """Display the source of `obj` (what you read is what runs). A long source is folded to its first
    `head` lines, or to `span` (see `fold`), with the whole source one click away."""
    text = source(obj)
    shown, hidden = fold(text, span, head)
    try:
        from IPython.display import Code
    except ImportError:
        print(shown)
        return
    if not hidden:
        _display(Code(text, language="python"))
        return
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", "this source"))
    total = len(text.rstrip("\n").splitlines())
    html = (f"{_code_html(shown)}<details><summary>Show all {total} lines of <code>{name}</code></summary>"
            f"{_code_html(text)}</details>")
    _display_bundle({"text/html": html, "text/plain": shown})


def _display_bundle(bundle: dict) -> None:
    try:
        from IPython.display import display
    except ImportError:
        print(bundle.get("text/plain", ""))
        return
    display(bundle, raw=True)


def table(header: list, rows: list, fills: list | None = None, widths: list | None = None) -> "Table":
    """A wrapping table for a notebook cell (shown when it is the cell's last value, or with display):
    `rows` is a list of rows of cell texts (course-made, may hold simple HTML: <b>, <i>, <br>,
    <code>), `fills` the same shape of background colours (or None), `widths` relative column widths."""
    html_table(header, rows, raw_html=True, fills=fills, widths=widths)     # checks the shapes now
    return Table(list(header), [list(r) for r in rows], raw_html=True, fills=fills, widths=widths)


class quiet:
    """`with notebook.quiet():` silences what torch writes to stderr while the block runs (its loggers'
    warnings, such as export's partial-graph dump when it refuses data-dependent control flow), for a
    cell whose lesson is not those messages. Where a lesson is about them, show them and explain them.
    `.text` holds what was silenced."""

    def __enter__(self) -> "quiet":
        import contextlib
        import io
        import logging
        self._buffer = io.StringIO()
        self._redirect = contextlib.redirect_stderr(self._buffer)
        self._redirect.__enter__()
        self._levels = {}
        for name in ["torch", *[n for n in logging.root.manager.loggerDict if n.startswith("torch.")]]:
            logger = logging.getLogger(name)
            self._levels[name] = logger.level
            logger.setLevel(logging.ERROR)
        return self

    def __exit__(self, *exc) -> None:
        import logging
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)
        self._redirect.__exit__(*exc)
        self.text = self._buffer.getvalue()


@dataclass(frozen=True)
class Headline:
    """A headline figure of this run, beside the record of the same GPU (None: no such record)."""
    name: str
    live: float
    recorded: float | None
    unit: str = ""
    digits: int = 1
    why: str = ""

    @property
    def text(self) -> str:
        """How the figure is stated: alone, or named as this run's when it is >15% off the record
        (with `why`, what the notebook knows makes them differ, such as another model size)."""
        return narrate.live_vs_record(self.live, self.recorded, self.unit, self.digits, why=self.why)


def headline(name: str, live: float, recorded: float | None, unit: str = "", digits: int = 1,
             why: str = "") -> Headline:
    """A live headline figure; put `h.text` in the paragraph and pass `headlines=[h]` to `md`, which
    tags the output with it so that `course-kit record` can check every executed copy against the
    record of its GPU (DESIGN.md: a live number >15% off the record is named as this run's).
    `why`: a known difference between this run and the record's (a smaller model, another batch)."""
    return Headline(name, float(live), None if recorded is None else float(recorded), unit, digits, why)


HEADLINES_KEY = "course_kit_headlines"   # in a Markdown output's metadata: the figures its text states


def md(text: str, headlines: "list[Headline] | None" = None) -> None:
    """Display Markdown; used for "what just happened" paragraphs built from computed numbers.
    `headlines`: the live headline figures the text states (see `headline`), kept in the output's
    metadata."""
    try:
        from IPython.display import Markdown
    except ImportError:
        print(text)
        return
    meta = {HEADLINES_KEY: [asdict(h) | {"text": h.text} for h in headlines]} if headlines else None
    if meta is None:
        _display(Markdown(text))
        return
    from IPython.display import display
    display(Markdown(text), metadata=meta)


def headline_problems(executed: dict) -> list[str]:
    """Headline figures of an executed notebook (its JSON) that break DESIGN.md's rule: a live figure
    more than 15% off the record of its GPU must be named as this run's in the text shown. Empty
    when every tagged figure agrees with its record or its paragraph says so."""
    problems = []
    for number, cell in enumerate(executed.get("cells", [])):
        for out in cell.get("outputs", []):
            for h in out.get("metadata", {}).get(HEADLINES_KEY, []):
                if h.get("recorded") is None or narrate.agrees_with_record(h["live"], h["recorded"]):
                    continue
                shown = "".join(out.get("data", {}).get("text/markdown", ""))
                if "in this run" not in h.get("text", "") or h["text"] not in shown:
                    problems.append(f"cell {number}: {h['name']} = {h['live']:g} {h.get('unit', '')} is "
                                    f"{abs(h['live'] / h['recorded'] - 1):.0%} off the record "
                                    f"({h['recorded']:g}) and the text does not say it is this run's")
    return problems


def banner(text: str, kind: str = "info") -> None:
    """A coloured box; kind is info, warning or gpu."""
    colours = {"info": ("#e8f1fb", "#1f6feb"), "warning": ("#fff4e5", "#d97706"), "gpu": ("#f3e8ff", "#7c3aed")}
    if kind not in colours:
        raise ValueError(f"unknown banner kind {kind!r}; choose one of {sorted(colours)}")
    bg, edge = colours[kind]
    try:
        from IPython.display import HTML
    except ImportError:
        print(f"[{kind}] {text}")
        return
    _display(HTML(f"<div style='background:{bg};border-left:6px solid {edge};padding:8px 12px;"
                  f"margin:6px 0;color:#111'>{text}</div>"))


def has_gpu() -> bool:
    return has_cuda()


def _stamp(record: dict, slug: str) -> str:
    env = record.get("environment", {})
    return (f"<b>{env.get('gpu', slug)}</b> ({env.get('capability', '?')}, torch {env.get('torch', '?')}, "
            f"{str(env.get('date', '?'))[:10]}), from <code>data/reference/{slug}/</code>")


def record(topic: str, slug: str | None = None, *, live: bool = False, quiet: bool = False) -> dict | None:
    """The recorded result a notebook shows for `topic`: the one way notebooks read `data/reference`.

    - `slug` given (e.g. "h200x2" for a two-GPU run): that machine's record, labelled.
    - On a CPU: the reference GPU's record, under the "GPU-only section" banner.
    - On a GPU: this GPU's own record. Where it has none, a live run of `course-kit bench topic`
      when `live=True` (its result is returned, not saved; never under COURSE_KIT_EMULATE, whose
      speeds are the real GPU's), else the reference record, labelled as not this GPU, with the
      command that records yours.
    Returns None (with a banner saying so) when nothing was recorded. `quiet` drops the banner, for
    a reference shown beside a result that has its own label.
    """
    say = (lambda text, kind: None) if quiet else banner
    if slug is not None:
        rec = reference.load(topic, slug)
        if rec is None:
            say(f"No record <code>{slug}/{topic}.json</code> exists yet: run <code>course-kit bench {topic}</code> "
                f"on that machine to create one.", "warning")
        else:
            say(f"<b>Recorded results</b> of {_stamp(rec, slug)}.", "gpu" if not has_gpu() else "info")
        return rec
    if has_gpu():
        own_slug = reference.gpu_slug()
        rec = reference.load(topic, own_slug)
        if rec is not None:
            say(f"<b>Recorded on this kind of GPU</b>: {_stamp(rec, own_slug)}.", "info")
            return rec
        # an emulated GPU's speeds are the real GPU's, never the emulated one's: no live bench there
        if live and device.emulation() is None:
            from . import benchmarks
            say(f"No record for this GPU ({own_slug}) yet: running <code>course-kit bench {topic}</code> live.",
                "info")
            return benchmarks.run_topic(topic, {"size": device.defaults()["size"]})
        rec = reference.load(topic, reference.REFERENCE_GPU)
        if rec is not None:
            say(f"<b>Recorded on another GPU, not this one.</b> No record for this GPU ({own_slug}) exists yet, "
                f"so what follows is the reference run on {_stamp(rec, reference.REFERENCE_GPU)}. Run "
                f"<code>course-kit bench {topic}</code> to record yours.", "warning")
        else:   # neither: say so, or a section built on the record would show nothing and no reason
            say(f"No record of <code>{topic}</code> exists yet, for this GPU ({own_slug}) or the reference "
                f"{reference.REFERENCE_GPU}: run <code>course-kit bench {topic}</code> on this GPU to create one.",
                "warning")
        return rec
    rec = reference.load(topic, reference.REFERENCE_GPU)
    if rec is None:
        say(f"<b>GPU-only section.</b> This machine has no CUDA GPU, and no reference record "
            f"<code>{reference.REFERENCE_GPU}/{topic}.json</code> exists yet. Run <code>course-kit bench "
            f"{topic}</code> on a GPU to create one.", "warning")
        return None
    say(f"<b>GPU-only section: recorded results, not this machine.</b> This machine has no CUDA GPU, so what "
        f"follows shows the reference run on {_stamp(rec, reference.REFERENCE_GPU)}.", "gpu")
    return rec


def gpu_only(topic: str, slug: str = reference.REFERENCE_GPU) -> dict | None:
    """On a GPU: None (run the section live). On a CPU: `record(topic, slug)` under the banner."""
    if has_gpu():
        return None
    return record(topic, slug)


def is_smoke() -> bool:
    return device.is_smoke()


def oom_message(err: BaseException) -> str:
    """What a learner sees instead of a traceback when a cell runs out of GPU memory."""
    free = ""
    if has_cuda():
        free_b, total_b = torch.cuda.mem_get_info()
        free = f" {free_b / 2**30:.1f} of {total_b / 2**30:.1f} GiB are free now."
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return (f"<b>Skipped: this cell ran out of GPU memory.</b> {first[:200]}.{free} Nothing else is lost: "
            f"lower the sizes in the <code>parameters</code> cell (or restart the kernel to free memory) "
            f"and run the cell again.")


def _handle_oom(shell, etype, value, tb, tb_offset=None):  # IPython's custom-exception signature
    if has_cuda():
        torch.cuda.empty_cache()
    banner(oom_message(value), "warning")
    return None


def install_oom_handler() -> bool:
    """In a notebook, turn CUDA out-of-memory errors into a clear skip message instead of a crash."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    shell.set_custom_exc(oom_types, _handle_oom)
    return True


install_oom_handler()

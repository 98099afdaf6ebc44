"""Every sentence agrees with the numbers beside it (issue 19): a scan of what learners read.

- No "target", "met" or "missed" anywhere a learner reads: notebook sources (markdown and the strings
  code prints) and the executed reference notebooks' outputs. Targets live in records, tests and the
  README's benchmarks table.
- No directional word ("faster", "slower", "helps", "fits", "sits above", ...) typed into a string a
  code cell prints: such sentences come from an explainer in the package, whose wording follows the
  numbers (and which has tests in both directions).
- No directional word in a markdown sentence that talks about a measurement (a sentence with a digit,
  "measured", "this run", "here", "the record"): markdown states only what is true whatever the run
  measures. A heading or question ("Does TP make it faster?") is not a claim.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
EXECUTED = sorted((ROOT / "data" / "reference").glob("*/notebooks/*.ipynb"))

TARGET_WORDS = re.compile(r"\b(targets?|met|missed)\b(?!=)", re.I)   # not FX IR's `target=`
DIRECTIONAL = re.compile(r"\b(faster|slower|helps?|hurts?|sits? (?:above|below)|fits|does not fit|doesn.t fit|"
                         r"fit (?:on|in|into)|pays? off|"
                         r"beats?|outperforms?)\b", re.I)
# a measured quantity (1.5x, 29%, 0.87) or words that point at this run's output
MEASUREMENT = re.compile(r"\d+(?:\.\d+)?\s*(?:x\b|×|%)|\b\d+\.\d+\b|\bmeasured\b|\bthis run\b|\bhere\b|"
                         r"\bthe record\b|\brecorded\b", re.I)
CITATION = re.compile(r"\bet al\b|arXiv|ASPLOS|NeurIPS|ICML|MLSys|SOSP|\(\d{4}\)|, \d{4}\b")
CELL = re.compile(r"^# %%(?:\s+\[(markdown)\])?.*$", re.M)


def cells(path: Path) -> list[tuple[str, str]]:
    """(kind, text) of each cell of a py:percent source; markdown lines lose their '# '."""
    text = path.read_text()
    marks = list(CELL.finditer(text))
    out = []
    for m, nxt in zip(marks, marks[1:] + [None]):
        body = text[m.end(): nxt.start() if nxt else len(text)]
        if m.group(1) == "markdown":
            out.append(("markdown", "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                                              for line in body.splitlines())))
        else:
            out.append(("code", body))
    return out


def printed_strings(code: str) -> list[str]:
    """The string literals of a code cell (f-strings' literal parts included), minus docstrings."""
    try:
        tree = ast.parse(code)
    except SyntaxError:        # IPython magics: fall back to quoted runs
        return re.findall(r"\"([^\"\n]*)\"|'([^'\n]*)'", code)
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):            # record["targets"]: a key, not text
            skip.update(id(n) for n in ast.walk(node.slice))
        elif isinstance(node, ast.Raise):             # error messages are not narration
            skip.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))                   # a docstring
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def sentences(markdown: str) -> list[str]:
    prose = "\n".join(line for line in markdown.splitlines() if not line.lstrip().startswith(("#", "|", "```")))
    return [s.strip() for s in re.split(r"(?<=[.!?:;])\s+|\n\s*\n|\n- ", prose) if s.strip()]


def learner_text_problems(path: Path) -> list[str]:
    problems = []
    for kind, text in cells(path):
        if kind == "markdown":
            if TARGET_WORDS.search(text):
                problems.append(f"markdown speaks of targets: {TARGET_WORDS.search(text).group(0)!r}")
            for s in sentences(text):
                if DIRECTIONAL.search(s) and MEASUREMENT.search(s) and not s.endswith("?") \
                        and not CITATION.search(s):
                    problems.append(f"markdown claims a measured direction: {s[:120]!r}")
        else:
            for s in printed_strings(text):
                s = s if isinstance(s, str) else "".join(s)
                if TARGET_WORDS.search(s):
                    problems.append(f"printed text speaks of targets: {s[:120]!r}")
                if DIRECTIONAL.search(s):
                    problems.append(f"printed text types a direction instead of an explainer: {s[:120]!r}")
    return problems


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.stem)
def test_learner_text_is_computed_not_hoped(path):
    problems = learner_text_problems(path)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_scan_catches_what_it_must(tmp_path):
    bad = tmp_path / "99_bad.py"
    bad.write_text('# %% [markdown]\n# Measured here: fusion helps, 0.87x.\n'
                   '# %%\nmd(f"reduce-overhead is {r:.2f}x faster (target 3x: met)")\n'
                   '# %% [markdown]\n# ### Does TP make it faster?\n')
    problems = learner_text_problems(bad)
    assert any("markdown claims" in p for p in problems)
    assert any("speaks of targets" in p for p in problems)
    assert any("types a direction" in p for p in problems)
    assert not any("Does TP" in p for p in problems)


def _output_text(nb: dict) -> str:
    parts = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            parts.append("".join(cell.get("source", "")))
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append("".join(out["text"]))
            for mime in ("text/markdown", "text/plain", "text/html"):
                data = (out.get("data") or {}).get(mime)
                if data:
                    parts.append("".join(data))
    return "\n".join(parts)


@pytest.mark.parametrize("path", EXECUTED, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_executed_reference_notebooks_speak_of_no_targets(path):
    text = _output_text(json.loads(path.read_text()))
    found = sorted({m.group(0).lower() for m in TARGET_WORDS.finditer(text)})
    assert not found, f"{path.relative_to(ROOT)} shows learners: {found}"

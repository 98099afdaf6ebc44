"""show_source folds long sources to the lines that matter, with the whole source one click away."""
import importlib.util
import sys

import pytest

from course_kit import notebook


@pytest.fixture
def long_module(tmp_path, monkeypatch):
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (tmp_path / "longmod.py").write_text(f'def long_fn():\n    """Sixty assignments."""\n{body}\n    return x59\n\n'
                                         f'def short_fn():\n    return 1\n')
    spec = importlib.util.spec_from_file_location("longmod", tmp_path / "longmod.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(sys.modules, "longmod", mod)
    return mod


def test_short_sources_are_shown_whole(long_module):
    text = notebook.source(long_module.short_fn)
    assert notebook.fold(text) == (text, 0)


def test_long_sources_show_their_first_lines_and_count_the_rest(long_module):
    text = notebook.source(long_module.long_fn)           # 63 lines
    shown, hidden = notebook.fold(text)
    lines = shown.splitlines()
    assert lines[: notebook.HEAD] == text.splitlines()[: notebook.HEAD]
    assert hidden == 63 - notebook.HEAD and lines[-1].strip() == f"# ... {hidden} more lines ..."


def test_a_span_shows_the_signature_then_the_chosen_lines(long_module):
    text = notebook.source(long_module.long_fn)
    shown, hidden = notebook.fold(text, span=(40, 45))
    lines = shown.splitlines()
    assert lines[0] == "def long_fn():" and lines[1].strip() == "# ... 38 lines ..."
    assert lines[2:8] == text.splitlines()[39:45] and hidden == 63 - 6 - 1
    shown, _ = notebook.fold(text, span="x50 = 50", head=3)
    assert [l.strip() for l in shown.splitlines()[2:5]] == ["x50 = 50", "x51 = 51", "x52 = 52"]
    with pytest.raises(ValueError, match="1 <= first <= last <= 63"):
        notebook.fold(text, span=(10, 99))
    with pytest.raises(ValueError, match="not a line"):
        notebook.fold(text, span="nowhere")


def test_show_source_folds_with_the_full_source_behind_a_click(long_module, monkeypatch):
    import IPython.display
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    notebook.show_source(long_module.long_fn)
    (bundle,) = shown
    html = bundle["text/html"]
    before, _, inside = html.partition("<details>")
    assert "Show all 63 lines of <code>long_fn</code>" in inside
    assert "x59" in inside and "x59" not in before and "x20" in before   # the rest is one click away
    assert bundle["text/plain"].splitlines()[0] == "def long_fn():"
    shown.clear()
    notebook.show_source(long_module.short_fn)
    assert isinstance(shown[0], IPython.display.Code)                     # short: as before, no fold

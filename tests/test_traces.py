"""One rule finds a request trace, for the engine's replay and the load generator alike."""
import sys

import pytest

from course_kit import traces
from course_kit.batching import loadgen
from course_kit.engine import trace


def test_a_trace_is_found_by_name_by_file_name_and_by_path(tmp_path):
    by_name = traces.trace_path("chat_bursty")
    assert by_name == traces.TRACES_DIR / "chat_bursty.jsonl"
    assert traces.trace_path("chat_bursty.jsonl") == by_name == traces.trace_path(by_name)
    own = tmp_path / "mine.jsonl"
    own.write_text(by_name.read_text())
    assert traces.trace_path(own) == own
    # both readers read the same requests through it
    assert [len(r.prompt) for r in trace.load(own, 1000)] == [p for p, _ in loadgen.trace_lengths(str(own))]


def test_an_unknown_trace_names_the_known_ones():
    for read in (traces.trace_path, loadgen.trace_lengths, lambda n: trace.load(n, 100)):
        with pytest.raises(ValueError, match=r"no trace 'nope'; known traces: \[.*'chat_bursty'"):
            read("nope")


def test_the_load_client_stays_free_of_torch():
    import subprocess
    code = "import sys, course_kit.batching.loadgen; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"

"""Entry point of the grader's nbval subprocess: `python -m course_kit.grading._pytest_main ARGS`.

It is plain `pytest ARGS`, under the memory limit in COURSE_KIT_GRADE_MEMORY, except that jsonschema's optional RFC 3987 URI checker is kept out:
nbformat's notebook schema never uses it, and building its grammar at import costs several seconds
per graded notebook on a slow machine.
"""
from __future__ import annotations

import sys

if __name__ == "__main__":
    import os
    import resource
    # This process collects the kernel's outputs: bound it too, so a flood of output can't take the
    # grader's machine down (the kernel then lowers its own limit further).
    memory = int(os.environ.get("COURSE_KIT_GRADE_MEMORY", "0"))
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    sys.modules.setdefault("rfc3987_syntax", None)  # import of it now raises ImportError: skipped
    import pytest
    raise SystemExit(pytest.main(sys.argv[1:]))

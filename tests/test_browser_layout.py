"""No output of notebooks 00 and 04 is wider than the notebook column (issue 42, items 6 and 7); 06,
08 and 09 are checked on their already-running pages (test_browser_nb06/nb08/nb09.py).

Each notebook runs in a real JupyterLab in headless Chromium (tests/browser_support.py), first in a
1,400 px window with the file browser open, as a learner first sees it, then in a 1,200 px window
with the sidebars closed (one Run All serves both), and every code cell's outputs are measured
(`browser_support.wider_than_column`). A failure lists each offending cell with its first line and
how many pixels it overflows.
"""
from __future__ import annotations

import json
import shutil

import pytest

from browser_support import ARTIFACTS, LAYOUTS, ROOT, assert_fits, check_layouts, jupyterlab, opened_notebook

pytestmark = pytest.mark.browser

NAMES = ["00_start_here.ipynb", "04_graph_capture.ipynb"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab serves both notebooks."""
    with jupyterlab(ROOT / "notebooks" / NAMES[0], tmp_path_factory.mktemp("lab")) as lab:
        for name in NAMES[1:]:
            shutil.copy(ROOT / "notebooks" / name, lab["work"] / name)
        yield lab


@pytest.mark.parametrize("name", NAMES)
def test_no_output_is_wider_than_the_notebook_column(name, lab):
    with opened_notebook(lab, name, viewport=LAYOUTS[0][1]) as pg:
        found = check_layouts(pg)
        pg.screenshot(path=str(ARTIFACTS / f"layout_{name[:2]}.png"), full_page=True)
    (ARTIFACTS / f"{name.split('_')[0]}_widths.json").write_text(
        json.dumps({k: {"widest_area": w, "bad": b} for k, (b, w) in found.items()}))
    assert_fits(found, name)

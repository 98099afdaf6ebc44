"""Figures, widgets and tables of notebooks 00 and 04 fit the notebook column (issue 42 item 6):
run to the first exercise in JupyterLab at 1400 px (a column of about 1,000 px, under the 1,100 px
limit), then nothing drawn is wider than the column or cut at its edge. 06 is checked in
test_browser_nb06.py on its already-running page."""
import pytest

from browser_support import ARTIFACTS, ROOT, jupyterlab, opened_notebook, wider_than_column

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("name", ["00_start_here.ipynb", "04_graph_capture.ipynb"])
def test_outputs_fit_the_column(name, tmp_path):
    with jupyterlab(ROOT / "notebooks" / name, tmp_path) as lab:
        with opened_notebook(lab, name) as pg:
            pg.wait_for_timeout(1500)                     # figures and widgets draw after their frame
            wide = wider_than_column(pg)
            pg.screenshot(path=str(ARTIFACTS / f"layout_{name[:2]}.png"), full_page=True)
            assert not wide, f"wider than the notebook column in {name}: {wide}"

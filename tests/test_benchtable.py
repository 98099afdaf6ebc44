"""The README's benchmarks table is rendered from the records (course_kit.benchtable) and up to date."""
import pytest

from course_kit import benchtable


def test_readme_table_is_the_rendered_records():
    assert benchtable.section(benchtable.README.read_text()) == benchtable.render(), \
        "README's benchmarks table is stale: run `python -m course_kit.benchtable --write`"


@pytest.mark.parametrize("value,at_most,expected", [(1.7, False, "met"), (1.69, False, "not met"),
                                                    (0.01, True, "met"), (0.011, True, "not met"),
                                                    (None, False, "")])
def test_status_both_ways_and_at_the_edge(value, at_most, expected):
    row = benchtable.Row("h200", "x", "figure", lambda r: None, "x", 0.01 if at_most else 1.7, at_most)
    assert benchtable.status(row, value) == expected


def test_every_row_names_an_existing_summary_key_or_is_not_recorded_yet():
    text = benchtable.render()
    recorded = [line for line in text.splitlines()[2:] if "not recorded" not in line]
    assert len(recorded) >= 15      # the records exist: a reader that finds nothing would render blanks

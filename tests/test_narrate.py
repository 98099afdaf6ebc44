"""The shared wording of "what just happened": each phrase in both directions and at its edges."""
import pytest

from course_kit import narrate


def test_speed_follows_the_sign_of_the_effect():
    assert narrate.speed(1.0, 1.53) == "1.53x faster than"
    assert narrate.speed(1.15, 1.0) == "1.15x slower than"      # the "0.87x: fusion helps" trap
    assert narrate.speed(1.0, 1.02).startswith("about as fast as")
    assert narrate.speed(1.0, 1.031) == "1.03x faster than"   # just past the noise band


def test_rate_is_higher_is_better():
    assert narrate.rate(200.0, 100.0) == "2.00x faster than"
    assert narrate.rate(98.0, 100.0).startswith("about as fast as")
    assert narrate.rate(50.0, 100.0) == "2.00x slower than"


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_comparisons_refuse_meaningless_numbers(bad):
    with pytest.raises(ValueError, match="finite positive"):
        narrate.speed(bad, 1.0)


def test_more_or_less_and_above_or_below():
    assert narrate.more_or_less(3.0, 1.0, "GiB") == "2 GiB more than"
    assert narrate.more_or_less(1.0, 3.0, "GiB") == "2 GiB less than"
    assert narrate.more_or_less(1.0, 1.01) == "about the same as"
    assert narrate.more_or_less(0.0, 0.0) == "about the same as"
    assert narrate.above_or_below(0.293, 0.059) == "above"
    assert narrate.above_or_below(0.05, 0.059) == "below"
    assert narrate.above_or_below(0.059, 0.059) == "at"


def test_fits_uses_one_unit_and_both_outcomes():
    have = 139.8 * 2**30
    assert narrate.fits(12 * 2**30, have) == "fits (12.0 of 139.8 GiB)"
    assert narrate.fits(148.7 * 2**30, have) == "does not fit (148.7 GiB needed, 139.8 GiB available)"
    assert narrate.fits(have, have).startswith("fits")             # the edge: exactly full fits
    with pytest.raises(ValueError):
        narrate.fits(1.0, 0.0)


def test_a_live_figure_within_15_percent_of_its_record_is_stated_alone():
    assert narrate.live_vs_record(700.0, 794.0, "TFLOP/s") == "700.0 TFLOP/s"     # 11.8% off
    assert narrate.live_vs_record(900.0, 794.0, "TFLOP/s") == "900.0 TFLOP/s"     # 13.4% off
    assert narrate.live_vs_record(615.0, None, "TFLOP/s") == "615.0 TFLOP/s"


def test_a_live_figure_far_from_its_record_is_named_as_this_runs_in_both_directions():
    low = narrate.live_vs_record(615.0, 794.0, "TFLOP/s")
    assert low.startswith("615.0 TFLOP/s in this run") and "the record: 794.0" in low and "23% lower" in low
    high = narrate.live_vs_record(1.96, 1.60, "x", digits=2)
    assert "1.96 x in this run" in high and "the record: 1.60" in high and "22% higher" in high
    assert not narrate.agrees_with_record(794.0 * 0.849, 794.0) and narrate.agrees_with_record(794.0 * 0.851, 794.0)
    # no cause is guessed (a quiet GPU's recording printed "this run shared its GPU"); a known one is said
    assert low == "615.0 TFLOP/s in this run (the record: 794.0, 23% lower)"
    why = "the record's model has 337M parameters, this one 29.7M"
    assert narrate.live_vs_record(4.62, 6.74, "x", 2, why=why) == f"4.62 x in this run (the record: 6.74, 31% lower; {why})"


def test_direction_picks_the_word_for_the_sign_both_ways_and_at_zero():
    assert narrate.direction(0.2, "slower", "faster") == "slower"
    assert narrate.direction(-0.2, "slower", "faster") == "faster"
    assert narrate.direction(1e-12, "more", "fewer", "as many", 1e-9) == "as many"
    with pytest.raises(ValueError, match="no word for 'the same'"):
        narrate.direction(0.0, "more", "less")
    with pytest.raises(ValueError, match="needs a number"):
        narrate.direction(float("nan"), "more", "less", "same")

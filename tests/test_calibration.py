"""The two-sided calibrator: it raises the factor at once when the model counts more than we estimate, and
lowers it below 1.0 only when several replies in a row came in under our estimates, never below its floor."""

from __future__ import annotations

import pytest

from plimsoll import Calibrator
from plimsoll.calibration import FLOOR, MARGIN, SETTLED


def test_one_reply_over_the_estimate_raises_the_factor_at_once() -> None:
    calibrator = Calibrator()
    assert calibrator.observe(1_000, 1_300) == pytest.approx(1.3 * MARGIN)


def test_the_factor_goes_below_one_only_once_several_replies_agree() -> None:
    calibrator = Calibrator()
    factors = [calibrator.observe(1_000, 900) for _ in range(SETTLED)]
    assert factors[: SETTLED - 1] == [1.0] * (SETTLED - 1)
    assert factors[-1] == pytest.approx(0.9 * MARGIN)


def test_one_reply_over_the_estimate_among_many_under_keeps_the_factor_above_it() -> None:
    calibrator = Calibrator()
    for reported in (900, 900, 900, 1_050, 900):
        calibrator.observe(1_000, reported)
    assert calibrator.factor == pytest.approx(1.05 * MARGIN)


def test_the_factor_never_goes_below_the_floor() -> None:
    calibrator = Calibrator()
    for _ in range(10):
        calibrator.observe(1_000, 300)
    assert calibrator.factor == FLOOR
    assert calibrator.correct(100_000) == int(100_000 / FLOOR)


def test_a_floor_of_one_is_the_one_sided_calibrator() -> None:
    calibrator = Calibrator(floor=1.0)
    for _ in range(10):
        calibrator.observe(1_000, 800)
    assert calibrator.factor == 1.0


def test_it_round_trips_through_its_stored_form() -> None:
    calibrator = Calibrator()
    for reported in (900, 950, 990):
        calibrator.observe(1_000, reported)
    again = Calibrator.from_dict(calibrator.to_dict())
    assert (again.recent, again.observations, again.factor) == (calibrator.recent, 3, calibrator.factor)


def test_pacing_takes_the_mean_ratio_without_margin_or_floor() -> None:
    """A rate limit's reservation is what the request will likely count; the floor and the margin keep a request
    inside its budget, and reserving with them would make the steps behind it wait for tokens never counted."""
    calibrator = Calibrator()
    assert calibrator.pacing_factor == 1.0
    for reported in (500, 700, 600):
        calibrator.observe(1_000, reported)
    assert calibrator.pacing_factor == pytest.approx(0.6)
    assert calibrator.factor == FLOOR  # the largest ratio with its margin, 0.714, is under the floor

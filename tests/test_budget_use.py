"""bench.budget_use, scaled down: the two-sided calibrator lets requests come closer to the budget than the
one-sided one, and never over it."""

from __future__ import annotations

import re

import pytest

from bench.budget_use import main


def test_the_two_sided_calibrator_uses_more_of_the_budget_and_never_more_than_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--chapters", "20", "--chars", "20000", "--budget", "100000"])
    out = capsys.readouterr().out
    found = re.search(r"two-sided vs one-sided: ([\d.]+) vs ([\d.]+)", out)
    assert found, out
    two, one = float(found[1]), float(found[2])
    assert one < two <= 1.0
    assert "goal: two-sided largest request within [0.97, 1.0] of the budget: met" in out

"""bench.budget_use, scaled down: the two-sided calibrator lets requests come as close to the budget as the
one-sided one or closer, never over it, and the benchmark judges its goal from what it measured."""

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
    # The two-sided calibrator gives back only what the estimates over-count: never less than the one-sided
    # one, never over the budget. (On the shared corpus it comes within 0.98; on the generated chapters used
    # without ../shared the profile's margin is smaller and both may end equal.)
    assert one <= two <= 1.0
    verdict = "met" if 0.97 <= two <= 1.0 else "NOT MET"
    assert f"goal: two-sided largest request within [0.97, 1.0] of the budget: {verdict}" in out

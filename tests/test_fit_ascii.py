"""The ASCII step of the fit (``estimate_fit.fit_ascii``): what it counts, and how it compares the patterns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from estimate_fit import fit_ascii, fit_profiles
from estimate_fit.fit_ascii import PATTERNS, features, names
from plimsoll.profiles import PROFILES, profile_data
from tests.support_fit import PROFILES_FITTED, few_items

# The tool-output set is drawn once per process (estimate_fit.tool_output caches it): its users share one xdist worker.
pytestmark = pytest.mark.xdist_group("tool_output")


def test_a_symbol_discount_is_counted_only_where_the_estimate_applies_it() -> None:
    def discounted(text: str) -> float:
        return float(dict(zip(names(), features(text), strict=True))["discount e294"])

    assert discounted("│ x " * 63) == 0  # under 64 characters of the lead byte: the estimate charges them whole
    assert discounted("│ x " * 64) == 64
    assert discounted("│" + "—" * 63) == 1  # beside the dashes of prose, among the first 64
    assert discounted("—" * 64 + "│") == 0  # only the blocks of the first 64 are looked for


def test_digrams_of_word_shapes_are_counted_and_priced_only_for_the_profiles_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted = dict(zip(names(), features("getTrust Trust join\nCode"), strict=True))
    assert [counted[f"digram {d!r}"] for d in fit_ascii.DIGRAMS] == [1, 1, 1]  # " j"; " T"; "tT" (not "\nC")
    assert fit_ascii._bounds("digram ' A'", b"\n\n", "cl100k") == (0.0, 0.0)  # none shipped
    monkeypatch.setattr(fit_ascii, "DIGRAMS_OF_PROFILE", {"cl100k": fit_ascii.DIGRAMS})
    assert fit_ascii._bounds("digram ' A'", b"\n\n", "cl100k") == fit_ascii.DIGRAM_RANGE
    assert fit_ascii._bounds("digram ' A'", b"\n\n", "claude") == (0.0, 0.0)


def test_the_patterns_are_compared_on_the_fitted_conversations(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m estimate_fit.fit_ascii --patterns`` on a few items whose real counts are the shipped estimates ÷ 1.2:
    every pattern gets a score, and every score keeps the conversations at or above their floor."""
    fitted = PROFILES_FITTED
    monkeypatch.setattr(fit_ascii, "collect", few_items)
    fit_ascii.main(["--patterns"])
    table = capsys.readouterr().out
    assert table.count("(its own)") == len(fitted)
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| b")}
    assert set(rows) == {repr(p) for p in PATTERNS}
    for line in rows.values():
        scores = [float(cell.split()[0]) for cell in line.strip(" |").split(" | ")[1:]]
        assert len(scores) == len(fitted)
        assert all(score >= fit_ascii.CONVERSATION_FLOOR[p] - 1e-4 for p, score in zip(fitted, scores, strict=True))


def test_one_profile_is_refitted_and_the_others_are_written_as_they_are(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``python -m estimate_fit.fit_profiles --ascii --profile o200k --write`` (docs/development.md's command, on a few
    items): o200k's letters may cost up to its own spread over their class; claude and cl100k are written exactly as
    shipped."""
    with pytest.raises(SystemExit):  # the other steps fit every profile
        fit_profiles.arguments(["--scripts", "--profile", "o200k"])
    monkeypatch.setattr(fit_ascii, "collect", few_items)
    output = tmp_path / "profiles.json"
    fit_profiles.main(["--ascii", "--profile", "o200k", "--write", "--output", str(output)])
    written = json.loads(output.read_text(encoding="utf-8"))["profiles"]
    assert sorted(written) == sorted(PROFILES_FITTED)
    for kept in ("claude", "cl100k"):
        assert written[kept] == profile_data(PROFILES[kept])
    refit = written["o200k"]
    low, high = fit_ascii.LETTER_SPREAD["o200k"]
    for letter, cost in refit["byte_weights"].items():
        if letter.isalpha():
            spread = cost - refit["weights"]["lower" if letter.islower() else "upper"]
            assert low - 1e-9 <= spread <= high + 1e-9


def test_a_fit_stopped_by_its_clock_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a fit stops on a clock depends on the machine and its load: such weights are never written."""
    monkeypatch.setattr(fit_ascii, "TIME_LIMIT", 0)
    with pytest.raises(SystemExit, match="not within"):
        fit_ascii.solve(few_items(), "cl100k")

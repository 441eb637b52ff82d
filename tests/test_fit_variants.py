"""``python -m bench.fit_variants`` (docs/development.md's command): each variant refits with its own settings of
``estimate_fit.fit_ascii`` and is judged on the held-out goals as ``bench.estimator`` judges the shipped profiles. The
tests use cl100k, whose tokenizer is here without ``../shared``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import fit_variants
from bench.estimator import Counting, tool_output_goals, trajectory_ratios, written_goal, written_ratios
from estimate_fit import fit_ascii
from plimsoll.profiles import PROFILES
from tests.support_fit import few_items

# The tool-output set is drawn once per process (estimate_fit.tool_output caches it): its users share one xdist worker.
pytestmark = pytest.mark.xdist_group("tool_output")


def test_the_shipped_row_is_what_the_estimator_measures() -> None:
    [row] = fit_variants.run([fit_variants.SHIPPED], ["cl100k"], repeat=1)  # its speed is not judged here
    counting = Counting("cl100k", PROFILES["cl100k"], "cl100k")
    kinds, whole = trajectory_ratios([counting], held_out=True)
    assert row.runs == whole["cl100k"]
    goals = tool_output_goals(kinds, whole, " (real runs, held out)")
    written = written_ratios([counting], held_out=True)
    goals.append(written_goal("cl100k", written, " (held out)"))
    assert row.written == [x for r in written.values() for x in r["cl100k"]]
    missed = [g.text.removeprefix("cl100k: ") for g in goals if not g.met]
    assert missed == [
        u for u in row.unmet if u.endswith(("(real runs, held out)", "tool call ≥ 500 tokens ≥ 0.9 (held out)"))
    ]


def test_a_variant_refits_with_its_settings_and_puts_them_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Any] = []
    solve = fit_ascii.solve

    def recording(items: list[fit_ascii.Item], profile: str) -> dict[str, float]:
        seen.append(fit_ascii.symbol_floor(profile, fit_ascii.ARROW))
        return solve(items, profile)

    monkeypatch.setattr(fit_ascii, "collect", few_items)
    monkeypatch.setattr(fit_ascii, "solve", recording)
    variants = ("the shipped choices, refitted", "an arrow may cost nothing")
    fit_variants.main(["--profile", "cl100k", "--repeat", "1", *(a for v in variants for a in ("--variant", v))])
    assert seen == [1.0, 0.0] and fit_ascii.symbol_floor("cl100k", fit_ascii.ARROW) == 1.0
    out = capsys.readouterr().out
    for variant in variants:
        [row] = [line for line in out.splitlines() if line.startswith(f"| {variant} | cl100k |")]
        judgement = row.strip(" |").split(" | ")[-1]
        assert judgement == "met" or judgement.startswith("NOT MET: "), row


def test_a_count_that_falls_under_is_judged_not_met() -> None:
    row = fit_variants.judged("characters / 4", Counting("cl100k", PROFILES["chars4"], "cl100k"), speed=10.0)
    assert "conversations never under (real runs, held out)" in row.unmet
    assert min(row.runs) < 1.0


def test_what_the_solver_prints_from_c_stays_out_of_a_redirected_report(tmp_path: Path) -> None:
    script = (
        "import ctypes\n"
        "from estimate_fit.fit_shared import solver_output_to_stderr\n"
        "print('before')\n"
        "with solver_output_to_stderr():\n"
        "    ctypes.CDLL(None).printf(b'from the solver\\n')\n"
        "print('after')\n"
    )
    report, errors = tmp_path / "report.md", tmp_path / "errors.txt"
    with report.open("w") as out, errors.open("w") as err:
        subprocess.run([sys.executable, "-c", script], stdout=out, stderr=err, check=True)
    assert report.read_text().split() == ["before", "after"]
    assert "from the solver" in errors.read_text()

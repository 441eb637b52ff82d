"""Real agent runs from public repositories (``estimate_fit/data/trajectories``): where they come from, and the safe
side of the goals ``bench.estimator`` reports on the part never fitted to, asserted: no run under its real count, no
result of 500 tokens or more under 0.90. The other side (the median run at most 1.15) is reported, met or NOT MET,
by ``bench.estimator``."""

from __future__ import annotations

import json
import re

import pytest

from estimate_fit.reference import REFERENCE_OF_PROFILE, reference_counters
from estimate_fit.trajectories import (
    CATEGORIES,
    DATA,
    OTHER,
    REAL,
    category,
    trajectories,
    trajectory_conversations,
    trajectory_results,
)
from plimsoll import estimate_tokens

FITTED = ("claude", "cl100k", "o200k")
RESULT_GOAL, RESULT_TOKENS = 0.90, 500
# Kept out for an independent check of the estimates, under their current and their old names.
KEPT_OUT = {
    *("OpenHands/benchmarks", "OpenHands/OpenHands", "All-Hands-AI/OpenHands"),
    *("SWE-agent/SWE-agent", "princeton-nlp/SWE-agent", "SWE-agent/mini-swe-agent"),
}
PERMISSIVE = {"MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause"}


def test_every_run_names_its_repository_path_commit_and_a_permissive_licence() -> None:
    sources = (DATA / "SOURCES.md").read_text(encoding="utf-8")
    files = sorted(DATA.glob("*.json"))
    assert files
    for path in files:
        source = json.loads(path.read_text(encoding="utf-8"))["source"]
        assert source["repository"] not in KEPT_OUT
        assert source["licence"] in PERMISSIVE
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
        row = next(line for line in sources.splitlines() if line.startswith(f"| {path.name} |"))
        assert source["repository"] in row and source["commit"] in row and source["licence"] in row
    # Small extracts only: a part of about 20,000 characters (the whole record that passes it, a five-file read at
    # the most, 52 kB as JSON) and, eight rounds on, 0.91 MB in all.
    assert max(path.stat().st_size for path in files) < 64_000
    assert sum(path.stat().st_size for path in files) < 1_000_000


def test_both_splits_hold_whole_runs_with_tool_output() -> None:
    for held_out in (False, True):
        runs = trajectories(held_out)
        assert runs and all(r.split == ("held_out" if held_out else "fit") for r in runs)
        assert {m.role for r in runs for m in r.messages} == {"user", "assistant", "tool"}
        assert trajectory_results(held_out) and all(s.kind.startswith(REAL) for s in trajectory_results(held_out))
    names = [{r.name for r in trajectories(h)} for h in (False, True)]
    assert not names[0] & names[1]


@pytest.mark.parametrize("profile", FITTED)
def test_real_runs_never_fitted_to_are_never_underestimated(profile: str) -> None:
    reference = REFERENCE_OF_PROFILE[profile]
    if reference not in reference_counters():
        pytest.skip(f"the {reference} tokenizer is in ../shared/tokenizers, which is absent")
    count = reference_counters()[reference]
    low = {
        s.name: round(estimate_tokens(s.text, profile) / count(s.text), 3)
        for s in trajectory_results(held_out=True)
        if count(s.text) >= RESULT_TOKENS and estimate_tokens(s.text, profile) < RESULT_GOAL * count(s.text)
    }
    assert low == {}
    ratios = {
        c.name: sum(estimate_tokens(t, profile) for t in c.parts) / sum(count(t) for t in c.parts)
        for c in trajectory_conversations(held_out=True)
    }
    under = {name: round(ratio, 3) for name, ratio in ratios.items() if ratio < 1.0}
    assert under == {}


def test_results_are_grouped_by_the_kinds_of_the_independent_check() -> None:
    assert category("directory listing (ls -la, absolute /tmp path)") == "directory listings"
    assert category("prompt with the repository structure (indented directory tree)") == "directory listings"
    assert category("numbered source view (cat -n, N→ arrows)") == "numbered source views"
    assert category("file context (code spans)") == "source code and diffs"
    assert category("search results (JSON)") == "JSON"
    assert category("test output (cargo test)") == OTHER
    kinds = {s.kind for held_out in (False, True) for s in trajectory_results(held_out)}
    assert kinds <= {REAL + name for name, _ in CATEGORIES} | {REAL + OTHER}

"""Estimates on agent tool output (``bench/tool_output.py``): the goals ``bench.estimator`` reports, asserted."""

from __future__ import annotations

import statistics
from functools import cache

import pytest

from bench.reference import REFERENCE_OF_PROFILE, Counter, reference_counters
from bench.tool_output import Sample, conversations, tool_outputs
from plimsoll import estimate_tokens

FITTED = ("claude", "cl100k", "o200k")
RESULT_GOAL, RESULT_TOKENS = 0.85, 500
CONVERSATION_MEDIAN_GOAL = 1.15


def counter(profile: str) -> Counter:
    reference = REFERENCE_OF_PROFILE[profile]
    if reference not in reference_counters():
        pytest.skip(f"the {reference} tokenizer is in ../shared/tokenizers, which is absent")
    return reference_counters()[reference]


@cache
def real_counts(profile: str) -> dict[str, int]:
    count = reference_counters()[REFERENCE_OF_PROFILE[profile]]
    return {s.text: count(s.text) for s in tool_outputs()}


def test_the_set_covers_every_kind_an_agent_sees() -> None:
    kinds = {s.kind for s in tool_outputs()}
    for expected in ("path list (find)", "ls -l", "JSON pretty", "git log -p", "Python source", "pytest output"):
        assert expected in kinds
    assert all(isinstance(s, Sample) and s.text.strip() for s in tool_outputs())
    assert tool_outputs() == tool_outputs.__wrapped__()  # the same machine gives the same set


@pytest.mark.parametrize("profile", FITTED)
def test_no_tool_result_of_500_tokens_or_more_is_estimated_below_085_of_its_real_count(profile: str) -> None:
    counter(profile)
    real = real_counts(profile)
    low = {
        s.name: round(estimate_tokens(s.text, profile) / real[s.text], 3)
        for s in tool_outputs()
        if real[s.text] >= RESULT_TOKENS and estimate_tokens(s.text, profile) < RESULT_GOAL * real[s.text]
    }
    assert low == {}


@pytest.mark.parametrize("profile", FITTED)
def test_no_conversation_is_underestimated_and_the_median_wastes_at_most_15_percent(profile: str) -> None:
    count = counter(profile)
    real = real_counts(profile)
    ratios = [
        sum(estimate_tokens(t, profile) for t in c.parts) / sum(real[t] if t in real else count(t) for t in c.parts)
        for c in conversations()
    ]
    assert min(ratios) >= 1.0
    assert statistics.median(ratios) <= CONVERSATION_MEDIAN_GOAL

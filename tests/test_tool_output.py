"""Estimates on agent tool output (``estimate_fit/tool_output.py``): the goals ``bench.estimator`` reports, asserted."""

from __future__ import annotations

import json
import re
import statistics
from functools import cache

import pytest

from estimate_fit import tool_output
from estimate_fit.reference import REFERENCE_OF_PROFILE, Counter, reference_counters
from estimate_fit.tool_output import SHOWN_SITE, SITE, WRITTEN, Sample, conversations, tool_outputs, written_files
from plimsoll import estimate_tokens

# The tool-output set is drawn once per process (estimate_fit.tool_output caches it): its users share one xdist worker.
pytestmark = pytest.mark.xdist_group("tool_output")

FITTED = ("claude", "cl100k", "o200k")
RESULT_GOAL, RESULT_TOKENS = 0.90, 500
CONVERSATION_MEDIAN_GOAL = 1.15


def counter(profile: str) -> Counter:
    reference = REFERENCE_OF_PROFILE[profile]
    if reference not in reference_counters():
        pytest.skip(f"the {reference} tokenizer is in ../shared/tokenizers, which is absent")
    return reference_counters()[reference]


SETS = [pytest.param(False, id="fitted"), pytest.param(True, id="held-out")]


@cache
def real_counts(profile: str, held_out: bool) -> dict[str, int]:
    count = reference_counters()[REFERENCE_OF_PROFILE[profile]]
    return {s.text: count(s.text) for s in tool_outputs(held_out)}


def test_the_set_covers_every_kind_an_agent_sees() -> None:
    kinds = {s.kind for s in tool_outputs()}
    for expected in (
        *("path list (find)", "listing under a temporary folder", "ls -l", "JSON pretty", "JSON compact"),
        *("git log -p", "Python source", "source, numbered agent view", "pytest output", "test log (large suites)"),
    ):
        assert expected in kinds
        assert expected in {s.kind for s in tool_outputs(held_out=True)}
    assert all(isinstance(s, Sample) and s.text.strip() for s in tool_outputs())
    tool_output._tree.cache_clear()  # the same machine gives the same set, made afresh from a fresh walk
    tool_output._pytest_runs.cache_clear()  # and from pytest run again
    assert tool_outputs() == tool_output._drawn.__wrapped__(tool_output.TOOL_OUTPUT_MAKERS, False)


def test_agent_views_show_absolute_paths_under_random_temporary_folders_and_numbered_lines() -> None:
    listings = [s.text for s in tool_outputs() if s.kind == "listing under a temporary folder"]
    roots = {re.findall(r"/(tmp[a-z0-9_]{8})(?:/|$)", text, flags=re.MULTILINE)[0] for text in listings}
    assert len(roots) >= len(listings) // 2  # a fresh folder per view
    assert all(line.startswith("/") for text in listings for line in text.splitlines()[1:])
    views = [s.text for s in tool_outputs() if s.kind == "source, numbered agent view"]
    assert all(re.fullmatch(r" {0,5}\d{1,6}\t.*", line) for text in views for line in text.splitlines()[1:])
    assert any(not text.splitlines()[1].startswith("     1\t") for text in views)  # ranges deep in a file


@pytest.mark.parametrize("held_out", SETS)
def test_files_written_by_tool_calls_carry_the_start_of_a_real_file_json_escaped(held_out: bool) -> None:
    written = written_files(held_out)
    assert {s.kind for s in written} == {f"{language}, written by a tool call" for language in WRITTEN}
    styles = set()
    for sample in written:
        call = json.loads(sample.text)
        styles.add("pretty" if sample.text.startswith('{\n  "name": "Write"') else "compact")
        arguments = call.get("input", call)
        path, content = arguments.get("file_path", arguments.get("path")), arguments["content"]
        assert content and SITE.joinpath(path.removeprefix(SHOWN_SITE + "/")).read_text(errors="replace").startswith(
            content
        )
    assert styles == {"pretty", "compact"}


@pytest.mark.parametrize("held_out", SETS)
@pytest.mark.parametrize("profile", FITTED)
def test_no_tool_result_of_500_tokens_or_more_is_estimated_below_090_of_its_real_count(
    profile: str, held_out: bool
) -> None:
    counter(profile)
    real = real_counts(profile, held_out)
    low = {
        s.name: round(estimate_tokens(s.text, profile) / real[s.text], 3)
        for s in tool_outputs(held_out)
        if real[s.text] >= RESULT_TOKENS and estimate_tokens(s.text, profile) < RESULT_GOAL * real[s.text]
    }
    assert low == {}


# cl100k's weights were fitted before the written files were (estimate_fit.fit_ascii): what it still estimates under the
# goal, exactly (the test fails when a refit moves it either way).
PRE = SHOWN_SITE + "/"
KNOWN_LOW_WRITTEN = {("cl100k", True): {f"Write {PRE}flower/templates/task.html": 0.898}}


@pytest.mark.parametrize("held_out", SETS)
@pytest.mark.parametrize("profile", FITTED)
def test_no_file_written_through_a_tool_call_of_500_tokens_or_more_is_estimated_below_090(
    profile: str, held_out: bool
) -> None:
    count = counter(profile)
    low = {}
    for sample in written_files(held_out):
        real, estimate = count(sample.text), estimate_tokens(sample.text, profile)
        if real >= RESULT_TOKENS and estimate < RESULT_GOAL * real:
            low[sample.name] = round(estimate / real, 3)
    assert low == KNOWN_LOW_WRITTEN.get((profile, held_out), {})


@pytest.mark.parametrize("held_out", SETS)
@pytest.mark.parametrize("profile", FITTED)
def test_no_conversation_is_underestimated_and_the_median_wastes_at_most_15_percent(
    profile: str, held_out: bool
) -> None:
    count = counter(profile)
    real = real_counts(profile, held_out)
    ratios = [
        sum(estimate_tokens(t, profile) for t in c.parts) / sum(real[t] if t in real else count(t) for t in c.parts)
        for c in conversations(held_out=held_out)
    ]
    assert min(ratios) >= 1.0
    assert statistics.median(ratios) <= CONVERSATION_MEDIAN_GOAL

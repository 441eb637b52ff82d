"""Fitting conversations whose assistant calls several tools at once: the newest round stays whole as a unit, and
``DoesNotFit.needed`` is the smallest budget that fits."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plimsoll import DoesNotFit, estimate_message, fit, outline, plan
from plimsoll.history import from_outlines
from tests.conversations import call, result, text_of
from tests.examples import examples

SETTINGS = settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def total(messages: list[dict[str, Any]], overhead: int = 0) -> int:
    return overhead + sum(estimate_message(m) for m in messages)


def results_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [] if isinstance(content, str) else [b for b in content if b.get("type") == "tool_result"]


def newest_round(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The result blocks of the newest round: those of the last message that carries results."""
    return next((found for m in reversed(messages) if (found := results_of(m))), [])


def sent_results(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {b["tool_use_id"]: b for m in messages for b in results_of(m)}


def the_minimal_case() -> list[dict[str, Any]]:
    """The issue's case: an instruction, one assistant message calling ``a`` and ``b``, one user message with a
    300-line result for ``a`` and a README for ``b``."""
    listing = "".join(f"{n:6}\tsrc/module_{n:03d}.py: def handler_{n}(request, context): ...\n" for n in range(300))
    readme = "# Project\n\nA small tool. Run `make test` before sending a change.\n"
    return [
        {"role": "user", "content": "Find where requests are handled and summarise the README."},
        {"role": "assistant", "content": [call("a", name="grep"), call("b", name="read", path="README.md")]},
        {"role": "user", "content": [result("a", listing), result("b", readme)]},
    ]


def test_the_issues_minimal_case_keeps_both_results_of_the_newest_round() -> None:
    messages = the_minimal_case()
    size = total(messages)
    with pytest.raises(DoesNotFit) as raised:
        fit(messages, size - 1)
    assert raised.value.needed == size  # nothing may be left out or cleared: the model has not seen either result
    assert fit(messages, raised.value.needed).messages == messages


def test_a_later_round_clears_the_parallel_results_of_the_one_before_and_keeps_its_own() -> None:
    messages = the_minimal_case()
    messages += [
        {"role": "assistant", "content": [call("c", name="read"), call("d", name="read"), call("e", name="read")]},
        {"role": "user", "content": [result(i, text_of("en", 40, seed=n)) for n, i in enumerate("cde")]},
    ]
    budget = total(messages) - 100
    fitted = fit(messages, budget)
    assert fitted.stage == "cleared_results"
    assert fitted.cleared == ("a",)  # "b" is too small to be worth clearing
    assert fitted.messages[-1] == messages[-1]


@st.composite
def parallel_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """An instruction, then rounds of 1-8 parallel calls whose results range from empty to a few thousand words
    (in several scripts), with now and then a new user turn, a remark beside the results or an error."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(st.sampled_from(["Read.", "Check all."]))}]
    next_id = 0
    for _ in range(draw(st.integers(1, 12))):
        if len(messages) > 1 and draw(st.integers(0, 6)) == 0:
            messages.append({"role": "assistant", "content": "That part is done."})
            messages.append({"role": "user", "content": "Go on with the next part."})
        ids = [f"toolu_{next_id + k:05d}" for k in range(draw(st.integers(1, 8)))]
        next_id += len(ids)
        intro = [{"type": "text", "text": "Reading these."}] if draw(st.booleans()) else []
        messages.append({"role": "assistant", "content": [*intro, *(call(i) for i in ids)]})
        blocks: list[dict[str, Any]] = []
        for tool_id in ids:
            words = draw(st.sampled_from([0, 5, 60, 400, 1_500, 4_000]))
            body = text_of(draw(st.sampled_from(["en", "ru", "zh", "json"])), words, seed=len(blocks))
            extra = {"is_error": True} if draw(st.integers(0, 9)) == 0 else {}
            blocks.append(result(tool_id, [{"type": "text", "text": body}] if draw(st.booleans()) else body, **extra))
        remark = [{"type": "text", "text": "Keep going."}] if draw(st.integers(0, 7)) == 0 else []
        messages.append({"role": "user", "content": [*blocks, *remark]})
    return messages


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, int]:
    messages = draw(parallel_conversations())
    overhead = draw(st.integers(0, 300))
    budget = draw(st.integers(max(1, total(messages, overhead) // 30), total(messages, overhead) + 50))
    return messages, budget, overhead


@SETTINGS
@given(cases())
def test_every_request_keeps_the_newest_round_whole_stays_in_budget_and_pairs_calls(
    case: tuple[list[dict[str, Any]], int, int],
) -> None:
    messages, budget, overhead = case
    try:
        fitted = fit(messages, budget, overhead=overhead)
    except DoesNotFit as error:
        assert error.needed > budget
        return
    assert fitted.tokens == total(fitted.messages, overhead) <= budget
    from_outlines([outline(m) for m in fitted.messages])  # every call answered by the next message, roles alternate
    newest = newest_round(messages)
    assert newest_round(fitted.messages) == newest
    assert not {b["tool_use_id"] for b in newest} & set(fitted.cleared)
    stored = sent_results(messages)
    for tool_id, block in sent_results(fitted.messages).items():
        assert block == stored[tool_id] or tool_id in fitted.cleared


@SETTINGS
@given(cases())
def test_needed_is_the_smallest_budget_that_fits(case: tuple[list[dict[str, Any]], int, int]) -> None:
    messages, budget, overhead = case
    try:
        fit(messages, budget, overhead=overhead)
    except DoesNotFit as error:
        needed = error.needed
    else:
        return
    fitted = fit(messages, needed, overhead=overhead)
    assert fitted.tokens <= needed
    assert newest_round(fitted.messages) == newest_round(messages)
    with pytest.raises(DoesNotFit) as again:
        fit(messages, needed - 1, overhead=overhead)
    assert again.value.needed == needed


@SETTINGS
@given(cases(), st.integers(1, 5_000))
def test_a_larger_budget_never_stops_a_request_from_fitting(
    case: tuple[list[dict[str, Any]], int, int], more: int
) -> None:
    messages, budget, overhead = case
    try:
        fit(messages, budget, overhead=overhead)
    except DoesNotFit:
        return
    assert fit(messages, budget + more, overhead=overhead).tokens <= budget + more


@SETTINGS
@given(cases())
def test_fitting_is_deterministic_leaves_the_history_alone_and_matches_planning_from_outlines(
    case: tuple[list[dict[str, Any]], int, int],
) -> None:
    messages, budget, overhead = case
    before = copy.deepcopy(messages)
    outlines = [outline(m) for m in messages]
    try:
        fitted: Any = fit(messages, budget, overhead=overhead)
    except DoesNotFit as error:
        fitted = error.needed
        with pytest.raises(DoesNotFit) as planned:
            plan(outlines, budget, overhead=overhead)
        assert planned.value.needed == fitted
    else:
        chosen = plan(outlines, budget, overhead=overhead)
        assert (chosen.stage, chosen.tokens, chosen.cleared, chosen.dropped) == (
            fitted.stage,
            fitted.tokens,
            fitted.cleared,
            fitted.dropped,
        )
    assert messages == before
    try:
        again: Any = fit(copy.deepcopy(messages), budget, overhead=overhead)
    except DoesNotFit as error:
        again = error.needed
    assert again == fitted

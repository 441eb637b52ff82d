"""The cache-economic policy: fit's invariants over generated conversations and cache views, and each choice
(how much, where, when) by example."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plimsoll import DoesNotFit, estimate_message, get_profile, outline, plan
from plimsoll.economics import CacheView, Economy, fit_cached, plan_cached
from plimsoll.fitting import note_costs
from plimsoll.history import from_outlines
from plimsoll.notices import CLEARED_RESULT_NOTE
from tests.conversations import conversations, text_of, tool_round
from tests.examples import examples

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def total(messages: list[dict[str, Any]], overhead: int = 0) -> int:
    return overhead + sum(estimate_message(m) for m in messages)


def results_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        b for m in messages if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"
    ]


def newest_round(messages: list[dict[str, Any]]) -> list[str]:
    for message in reversed(messages):
        ids = [b["tool_use_id"] for b in results_of([message])]
        if ids:
            return ids
    return []


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, int, CacheView, Economy]:
    messages = draw(conversations())
    overhead = draw(st.integers(0, 300))
    size = total(messages, overhead)
    budget = draw(st.integers(max(1, size // 20), size + 100))
    ids = [b["tool_use_id"] for b in results_of(messages)]
    previous = draw(st.none() | st.lists(st.sampled_from(ids), unique=True) if ids else st.none())
    view = CacheView(
        caches=draw(st.booleans()),
        ttl_seconds=draw(st.sampled_from([300.0, 3600.0])),
        idle_seconds=draw(st.none() | st.sampled_from([0.0, 20.0, 299.0, 300.0, 420.0, 4000.0])),
        previous_cleared=None if previous is None else frozenset(previous),
    )
    economy = Economy(
        low_water=draw(st.floats(0.05, 1.0)),
        pin=draw(st.floats(0.0, 0.95)),
    )
    return messages, budget, overhead, view, economy


Case = tuple[list[dict[str, Any]], int, int, CacheView, Economy]


@SETTINGS
@given(cases())
def test_a_request_never_exceeds_its_budget_and_its_count_is_exact(case: Case) -> None:
    messages, budget, overhead, view, economy = case
    try:
        result, _ = fit_cached(messages, budget, overhead=overhead, cache=view, economy=economy)
    except DoesNotFit as error:
        assert error.needed > budget
        with pytest.raises(DoesNotFit):  # the policy gives up exactly when fit does
            plan([outline(m) for m in messages], budget, overhead=overhead)
        return
    assert result.tokens <= budget
    assert total(result.messages, overhead) == result.tokens


@SETTINGS
@given(cases())
def test_pairs_roles_the_newest_round_and_the_stored_history_are_kept(case: Case) -> None:
    messages, budget, overhead, view, economy = case
    before = copy.deepcopy(messages)
    try:
        result, marks = fit_cached(messages, budget, overhead=overhead, cache=view, economy=economy)
    except DoesNotFit:
        assert messages == before
        return
    assert messages == before
    from_outlines([outline(m) for m in result.messages])  # raises unless every call is answered by its result
    stored = {b["tool_use_id"]: b for b in results_of(messages)}
    sent = {b["tool_use_id"]: b for b in results_of(result.messages)}
    for tool_use_id in newest_round(messages[-1:]):  # the round the request answers is sent whole
        assert sent[tool_use_id] == stored[tool_use_id]
    if sent:
        newest = list(sent.values())[-1]
        assert newest == stored[newest["tool_use_id"]]
    for tool_use_id, block in sent.items():
        if tool_use_id in result.cleared:
            assert block["content"] == CLEARED_RESULT_NOTE
            assert block.get("is_error") == stored[tool_use_id].get("is_error")
        else:
            assert block == stored[tool_use_id]
    assert list(marks) == sorted(set(marks))
    assert all(0 <= m < len(result.messages) - 1 for m in marks)


@SETTINGS
@given(cases())
def test_the_same_input_gives_the_same_plan_from_messages_or_outlines(case: Case) -> None:
    messages, budget, overhead, view, economy = case
    try:
        first, marks = fit_cached(messages, budget, overhead=overhead, cache=view, economy=economy)
    except DoesNotFit:
        return
    again, again_marks = fit_cached(copy.deepcopy(messages), budget, overhead=overhead, cache=view, economy=economy)
    chosen = plan_cached([outline(m) for m in messages], budget, overhead=overhead, cache=view, economy=economy)
    assert (first, marks) == (again, again_marks)
    assert (chosen.plan.cleared, chosen.plan.tokens, chosen.breakpoints) == (first.cleared, first.tokens, marks)


def savings(messages: list[dict[str, Any]]) -> dict[str, int]:
    """What clearing each result saves, as the policy counts it."""
    note = note_costs(get_profile("claude")).cleared_result
    return {r.tool_use_id: r.tokens - note for m in messages for r in outline(m).results}


def grown(rounds: int, words: list[int]) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Read every document."}]
    for index in range(rounds):
        history += tool_round(index, text_of("en", words[index % len(words)], seed=index))
    return history


@settings(max_examples=examples(40), deadline=None)
@given(
    sizes=st.lists(st.integers(20, 3_000), min_size=3, max_size=12),
    results_per_budget=st.integers(4, 14),
    low_water=st.floats(0.3, 0.95),
    pin=st.sampled_from([0.0, 0.0, 0.2]) | st.floats(0.0, 0.6),
)
def test_while_warm_the_prefix_changes_only_when_the_request_no_longer_fits(
    sizes: list[int], results_per_budget: int, low_water: float, pin: float
) -> None:
    """Call after call, what was cleared stays cleared while the request fits, and the next request keeps every
    message up to each breakpoint of the one before; when it must change, the cleared set only grows."""
    history = grown(60, sizes)
    estimates = [estimate_message(m) for m in history]
    budget = sum(estimates[:3]) + results_per_budget * sum(estimates[1:3] + estimates[3:5]) // 2
    economy = Economy(low_water=low_water, pin=pin)
    previous: tuple[str, ...] | None = None
    before: tuple[list[dict[str, Any]], tuple[int, ...]] = ([], ())
    for end in range(3, len(history) + 1, 2):
        view = CacheView(idle_seconds=20.0, previous_cleared=previous)
        try:
            result, marks = fit_cached(history[:end], budget, estimates=estimates[:end], cache=view, economy=economy)
        except DoesNotFit:
            return
        fell_back = result.stage != "as_is" and not marks  # clearing alone could not fit: fit's own stages
        if previous is not None and result.stage == "cleared_results" and not fell_back:
            assert set(previous) <= set(result.cleared)
            if set(result.cleared) != set(previous):
                saving = savings(history[:end])
                with_previous = sum(estimates[:end]) - sum(saving[i] for i in previous)
                assert with_previous > budget  # it changed only because the old set no longer fit
            if pin == 0:  # with a pinned head, the head is cleared too when nothing else is left
                for mark in before[1]:
                    assert result.messages[: mark + 1] == before[0][: mark + 1]
        previous = result.cleared
        before = (result.messages, marks)


def test_one_large_old_result_is_cleared_before_many_small_ones() -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
    for index in range(39):
        history += tool_round(index, text_of("en", 200, seed=index))
    history += tool_round(39, text_of("en", 40_000))  # a long traceback behind 39 small results
    for index in range(40, 44):
        history += tool_round(index, text_of("en", 200, seed=index))
    budget = total(history) - 20_000
    result, _ = fit_cached(history, budget, cache=CacheView(previous_cleared=()), economy=Economy(pin=0.0))
    assert result.cleared == ("toolu_00039",)
    oldest_first, _ = fit_cached(history, budget, cache=CacheView(caches=False))
    assert len(oldest_first.cleared) > 1 and "toolu_00000" in oldest_first.cleared


def test_the_pinned_head_stays_whole_and_ends_at_a_breakpoint() -> None:
    history = grown(30, [1_000])
    budget = total(history) // 2
    economy = Economy(low_water=0.75, pin=0.25)
    result, marks = fit_cached(history, budget, cache=CacheView(previous_cleared=()), economy=economy)
    sent = results_of(result.messages)
    pinned = [b for b in sent[: len(sent) // 2] if b["content"] != CLEARED_RESULT_NOTE]
    assert pinned and pinned[0]["tool_use_id"] == "toolu_00000"  # the oldest results are the whole head
    first_cleared = next(i for i, m in enumerate(result.messages) if set(result.cleared) & set(newest_round([m])))
    assert first_cleared - 1 in marks
    assert result.tokens <= 0.75 * budget


def test_a_cold_cache_is_the_moment_to_clear_deeply() -> None:
    history = grown(40, [1_000])
    end = 41
    budget = total(history[:end]) * 8 // 10
    economy = Economy(low_water=0.5, pin=0.0)
    first, _ = fit_cached(history[:end], budget, cache=CacheView(previous_cleared=()), economy=economy)
    assert first.tokens <= budget * 0.5
    warm = first
    while warm.tokens <= (0.5 + 1) / 2 * budget:  # warm: what was cleared stays, the prefix does not move
        cool = CacheView(idle_seconds=400, previous_cleared=first.cleared)  # cold, but lower half: nothing to gain
        assert fit_cached(history[:end], budget, cache=cool, economy=economy)[0] == warm
        end += 2
        warm, _ = fit_cached(
            history[:end], budget, cache=CacheView(idle_seconds=20, previous_cleared=first.cleared), economy=economy
        )
        assert warm.cleared == first.cleared
    view = CacheView(idle_seconds=400, previous_cleared=first.cleared)
    cold, _ = fit_cached(history[:end], budget, cache=view, economy=economy)
    assert len(cold.cleared) > len(warm.cleared) and cold.tokens <= 0.5 * budget
    one_hour = CacheView(ttl_seconds=3600, idle_seconds=400, previous_cleared=first.cleared)
    assert fit_cached(history[:end], budget, cache=one_hour, economy=economy)[0] == warm


def test_without_a_cache_the_least_clearing_that_fits() -> None:
    history = grown(30, [1_000])
    budget = total(history) * 7 // 10
    result, _ = fit_cached(history, budget, cache=CacheView(caches=False))
    assert result.tokens <= budget
    order = [b["tool_use_id"] for b in results_of(history)]
    assert result.cleared == tuple(order[: len(result.cleared)])  # the oldest
    assert result.tokens + savings(history)[result.cleared[-1]] > budget  # and not one more than needed


def test_bad_knobs_get_a_clear_error() -> None:
    with pytest.raises(ValueError, match="low_water"):
        Economy(low_water=0)
    with pytest.raises(ValueError, match="pin"):
        Economy(pin=1.0)
    with pytest.raises(ValueError, match="budget"):
        fit_cached(grown(2, [10]), 0)

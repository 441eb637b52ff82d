"""The request-fitting pipeline: its invariants over generated conversations, and each stage by example."""

from __future__ import annotations

import contextlib
import copy
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import plimsoll.estimate
from plimsoll import (
    DoesNotFit,
    InvalidConversation,
    apply_plan,
    bodies_needed,
    build_request,
    estimate_message,
    fit,
    outline,
    plan,
)
from plimsoll.history import from_outlines
from plimsoll.notices import CLEARED_RESULT_NOTE, TRUNCATION_NOTE
from tests.conversations import conversations, text_of, tool_round
from tests.examples import examples

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def total(messages: list[dict[str, Any]], overhead: int = 0) -> int:
    return overhead + sum(estimate_message(m) for m in messages)


def pairs_and_roles_are_valid(messages: list[dict[str, Any]]) -> None:
    """Raises unless the Anthropic API would take these messages: a user message first, roles alternating,
    every tool call answered by the next message and every result answering a call."""
    from_outlines([outline(m) for m in messages])


def tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        b for m in messages if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"
    ]


@st.composite
def fitting_cases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, int]:
    messages = draw(conversations())
    overhead = draw(st.integers(0, 300))
    size = total(messages, overhead)
    budget = draw(st.integers(max(1, size // 20), size + 100))
    return messages, budget, overhead


@SETTINGS
@given(fitting_cases())
def test_a_request_never_exceeds_its_budget_and_its_count_is_exact(case: tuple[list[dict[str, Any]], int, int]) -> None:
    messages, budget, overhead = case
    try:
        result = fit(messages, budget, overhead=overhead)
    except DoesNotFit as error:
        assert error.needed > budget
        return
    assert result.tokens <= budget
    assert total(result.messages, overhead) == result.tokens


@SETTINGS
@given(fitting_cases())
def test_calls_and_results_stay_together_and_roles_alternate(case: tuple[list[dict[str, Any]], int, int]) -> None:
    messages, budget, overhead = case
    try:
        result = fit(messages, budget, overhead=overhead)
    except DoesNotFit:
        return
    pairs_and_roles_are_valid(result.messages)
    assert result.messages[0]["role"] == "user"


@SETTINGS
@given(fitting_cases())
def test_the_stored_history_is_never_changed(case: tuple[list[dict[str, Any]], int, int]) -> None:
    messages, budget, overhead = case
    before = copy.deepcopy(messages)
    with contextlib.suppress(DoesNotFit):
        fit(messages, budget, overhead=overhead)
    assert messages == before


@SETTINGS
@given(fitting_cases())
def test_the_same_input_gives_the_same_request(case: tuple[list[dict[str, Any]], int, int]) -> None:
    messages, budget, overhead = case
    try:
        first = fit(messages, budget, overhead=overhead)
    except DoesNotFit:
        with pytest.raises(DoesNotFit):
            fit(copy.deepcopy(messages), budget, overhead=overhead)
        return
    assert fit(copy.deepcopy(messages), budget, overhead=overhead) == first


@SETTINGS
@given(fitting_cases())
def test_each_stage_is_tried_only_when_the_one_before_cannot_fit(case: tuple[list[dict[str, Any]], int, int]) -> None:
    messages, budget, overhead = case
    try:
        result = fit(messages, budget, overhead=overhead)
    except DoesNotFit:
        return
    fits_as_is = total(messages, overhead) <= budget
    assert (result.stage == "as_is") == fits_as_is
    if result.stage in ("as_is", "cleared_results"):
        assert result.dropped == 0
        assert len(result.messages) == len(messages)
    if result.stage == "cleared_results":
        assert result.cleared and set(result.cleared) <= {b["tool_use_id"] for b in tool_results(messages)}
    if result.stage == "user_turns":
        assert result.messages[1] == {"role": "assistant", "content": [{"type": "text", "text": TRUNCATION_NOTE}]}
    if result.stage == "tool_rounds":
        assert result.messages[0]["content"][-1] == {"type": "text", "text": TRUNCATION_NOTE}
    if result.stage in ("user_turns", "tool_rounds"):
        assert result.dropped > 0
        assert len(result.messages) == len(messages) - result.dropped + (result.stage == "user_turns")


@SETTINGS
@given(fitting_cases())
def test_the_newest_result_is_never_cleared_and_cleared_results_keep_their_ids(
    case: tuple[list[dict[str, Any]], int, int],
) -> None:
    messages, budget, overhead = case
    try:
        result = fit(messages, budget, overhead=overhead)
    except DoesNotFit:
        return
    sent = tool_results(result.messages)
    stored = {b["tool_use_id"]: b for b in tool_results(messages)}
    if sent:
        assert sent[-1] == stored[sent[-1]["tool_use_id"]]
    for block in sent:
        original = stored[block["tool_use_id"]]
        if block["tool_use_id"] in result.cleared:
            assert block["content"] == CLEARED_RESULT_NOTE
            assert block.get("is_error") == original.get("is_error")
        else:
            assert block == original


@SETTINGS
@given(fitting_cases())
def test_results_are_cleared_oldest_first_in_batches_of_four(case: tuple[list[dict[str, Any]], int, int]) -> None:
    messages, budget, overhead = case
    try:
        result = fit(messages, budget, overhead=overhead)
    except DoesNotFit:
        return
    if result.stage != "cleared_results":
        return
    order = [b["tool_use_id"] for b in tool_results(messages)]
    positions = [order.index(i) for i in result.cleared]
    assert positions == sorted(positions)
    # Everything older than the newest cleared result was cleared too, unless it was too small to bother.
    note = plimsoll.estimate_tokens(CLEARED_RESULT_NOTE)
    skipped = [i for i in order[: max(positions) + 1] if i not in result.cleared]
    sizes = {
        b["tool_use_id"]: outline({"role": "user", "content": [b]}).results[0].tokens for b in tool_results(messages)
    }
    assert all(sizes[i] < 2 * note for i in skipped)
    # A batch is four results; only the last one may be short, when it takes every result left to clear.
    newest_round = newest_round_ids(messages)
    eligible_left = [i for i in order[max(positions) + 1 :] if sizes[i] >= 2 * note and i not in newest_round]
    assert len(result.cleared) % 4 == 0 or not eligible_left or _protected(eligible_left, sizes, budget, messages)


def newest_round_ids(messages: list[dict[str, Any]]) -> list[str]:
    """The tool_use_ids answered by the last message that carries tool results."""
    for message in reversed(messages):
        ids = [b["tool_use_id"] for b in tool_results([message])]
        if ids:
            return ids
    return []


def _protected(left: list[str], sizes: dict[str, int], budget: int, messages: list[dict[str, Any]]) -> bool:
    """True when every eligible result left uncleared is kept whole: the newest round, then the newest older
    results within a quarter of the budget."""
    newest = newest_round_ids(messages)
    used = sum(sizes[i] for i in newest)
    order = [b["tool_use_id"] for b in tool_results(messages)]
    for tool_id in reversed(order[: len(order) - len(newest)]):
        if used + sizes[tool_id] > budget // 4:
            break
        newest.append(tool_id)
        used += sizes[tool_id]
    return set(left) <= set(newest)


@SETTINGS
@given(fitting_cases())
def test_given_estimates_nothing_is_estimated_again(case: tuple[list[dict[str, Any]], int, int]) -> None:
    messages, budget, overhead = case
    estimates = [estimate_message(m) for m in messages]
    try:
        expected: Any = fit(messages, budget, overhead=overhead, estimates=estimates)
    except DoesNotFit as error:
        expected = error.needed

    def forbidden(text: str, profile: Any) -> int:
        raise AssertionError("a message was estimated again")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plimsoll.estimate, "estimated_units", forbidden)
        try:
            again: Any = fit(messages, budget, overhead=overhead, estimates=estimates)
        except DoesNotFit as error:
            again = error.needed
    assert again == expected


def test_given_estimates_are_the_ones_used() -> None:
    messages = [{"role": "user", "content": "Read."}]
    for index in range(12):
        messages += tool_round(index, "tiny")
    estimates = [10] + [50, 1_000] * 12  # the results claim 1,000 tokens each, though they read "tiny"
    result = fit(messages, 4_000, estimates=estimates)
    assert result.stage == "cleared_results"
    assert result.tokens <= 4_000
    assert result.cleared == tuple(f"toolu_{i:05d}" for i in range(11))  # all but the newest, by those numbers
    assert fit(messages, 4_000).stage == "as_is"  # by its own estimates the history would fit as it is


def grown_history(rounds: int, words: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every chapter and note one fact of each."}]
    for index in range(rounds):
        messages += tool_round(index, text_of("ru", words, seed=index))
    return messages


def prefix_changes(batching: str, words: int, budget: int, calls: int) -> list[int]:
    """Grow a history one tool round per call; the calls at which the request stops extending the last one."""
    messages = grown_history(1, words)
    changes = []
    previous = fit(messages, budget)
    for call_number in range(calls):
        messages += tool_round(len(messages) // 2, text_of("ru", words, seed=call_number))
        current = fit(messages, budget, batching=batching)  # type: ignore[arg-type]
        assert current.stage in ("as_is", "cleared_results")
        if current.messages[: len(previous.messages)] != previous.messages:
            changes.append(call_number)
        previous = current
    return changes


@settings(max_examples=examples(12), deadline=None)
@given(words=st.integers(3_000, 12_000), results_per_budget=st.integers(6, 12))
def test_while_clearing_the_prefix_changes_at_most_once_every_four_calls(words: int, results_per_budget: int) -> None:
    size = estimate_message(tool_round(0, text_of("ru", words))[1])
    changes = prefix_changes("four", words, budget=size * results_per_budget, calls=40)
    assert changes, "the history should have outgrown the budget"
    assert all(later - earlier >= 4 for earlier, later in itertools.pairwise(changes))


def test_adaptive_batches_change_the_prefix_less_often_with_small_results() -> None:
    words = 60
    budget = 80 * estimate_message(tool_round(0, text_of("ru", words))[1])  # results are 1/80 of the budget
    four = prefix_changes("four", words, budget, calls=200)
    adaptive = prefix_changes("adaptive", words, budget, calls=200)
    assert 0 < len(adaptive) < len(four) / 2


def test_reproduction_of_the_original_failure_a_subagent_with_200_rounds_of_40000_tokens() -> None:
    per_word = plimsoll.estimate_tokens(text_of("en", 10_000)) / 10_000
    chapter = text_of("en", int(40_000 / per_word))  # the same string in every result: 200 copies cost no memory
    assert 39_500 <= plimsoll.estimate_tokens(chapter) <= 40_500
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read all 200 files and summarise each."}]
    for index in range(200):
        messages += tool_round(index, chapter)
    result = fit(messages, 400_000)
    assert result.tokens <= 400_000
    assert total(result.messages) <= 400_000
    assert result.stage == "cleared_results"
    assert result.messages[-1] == messages[-1]  # the newest result is whole
    pairs_and_roles_are_valid(result.messages)
    assert len(result.cleared) >= 190


def test_user_turns_keep_the_first_message_a_note_and_the_newest_whole_turns() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Hello."}]
    for turn in range(6):
        messages.append({"role": "assistant", "content": text_of("en", 400, seed=turn)})
        messages.append({"role": "user", "content": f"Question {turn}?"})
    budget = total(messages[:1]) + total(messages[-3:]) + 150  # room for the note, not for one more turn
    result = fit(messages, budget)
    assert result.stage == "user_turns"
    assert result.messages[0] == messages[0]
    assert result.messages[1]["content"][0]["text"] == TRUNCATION_NOTE
    assert result.messages[2:] == messages[-3:]
    assert result.dropped == len(messages) - 4


def test_tool_rounds_keep_the_newest_rounds_of_one_long_turn() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every file."}]
    for index in range(400):
        messages += tool_round(index, "short result " * 4, text=text_of("en", 40, seed=index))
    budget = total(messages) // 5
    result = fit(messages, budget)
    assert result.stage == "tool_rounds"
    assert result.tokens <= budget
    assert result.messages[0]["content"] == [
        {"type": "text", "text": messages[0]["content"]},
        {"type": "text", "text": TRUNCATION_NOTE},
    ]
    assert result.messages[-2:] == messages[-2:]
    assert result.dropped % 8 == 0  # cuts fall before every fourth round: the kept part starts at stable places
    pairs_and_roles_are_valid(result.messages)


def test_a_first_message_over_budget_does_not_fit() -> None:
    messages = [{"role": "user", "content": text_of("en", 2_000)}]
    with pytest.raises(DoesNotFit) as raised:
        fit(messages, 100)
    assert raised.value.needed > 100


def test_a_newest_result_too_big_for_the_budget_does_not_fit() -> None:
    messages = [{"role": "user", "content": "Read."}, *tool_round(0, "small"), *tool_round(1, text_of("zh", 9_000))]
    with pytest.raises(DoesNotFit):
        fit(messages, 2_000)


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([], "empty"),
        ([{"role": "assistant", "content": "Hi."}], "start with a user"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "alternate"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "assistant"),
        ([{"role": "user", "content": "Read."}, tool_round(0, "x")[0]], "no result"),
        (
            [{"role": "user", "content": "Read."}, {"role": "assistant", "content": "ok"}, tool_round(0, "x")[1]],
            "exactly",
        ),
        ([{"role": "user", "content": [{"text": "no type"}]}], "type"),
        ([{"role": "user", "content": 42}], "string or a list"),
    ],
)
def test_malformed_conversations_get_a_clear_error(messages: list[dict[str, Any]], problem: str) -> None:
    for estimates in (None, [100] * len(messages)):
        with pytest.raises(InvalidConversation, match=problem):
            fit(messages, 10, estimates=estimates)


def test_bad_arguments_get_a_clear_error() -> None:
    messages = [{"role": "user", "content": "a"}]
    with pytest.raises(ValueError, match="budget"):
        fit(messages, 0)
    with pytest.raises(ValueError, match="estimates"):
        fit(messages, 10, estimates=[1, 2])
    with pytest.raises(ValueError, match="unknown estimate profile"):
        fit(messages, 10, profile="gpt-2")


def test_planning_from_outlines_matches_fitting_the_messages() -> None:
    messages = grown_history(30, 2_000)
    outlines = [outline(m) for m in messages]
    chosen = plan(outlines, 60_000)
    fitted = fit(messages, 60_000)
    assert (chosen.stage, chosen.tokens, chosen.cleared, chosen.dropped) == (
        fitted.stage,
        fitted.tokens,
        fitted.cleared,
        fitted.dropped,
    )
    assert all(type(o).from_dict(o.to_dict()) == o for o in outlines)


@SETTINGS
@given(fitting_cases())
def test_a_request_built_from_outlines_and_the_bodies_it_needs_is_the_request_of_the_whole_messages(
    case: tuple[list[dict[str, Any]], int, int],
) -> None:
    # What the worker does: plan over stored outlines, load only the bodies the plan needs, build the request.
    messages, budget, overhead = case
    outlines = [outline(m) for m in messages]
    try:
        chosen = plan(outlines, budget, overhead=overhead)
    except DoesNotFit:
        return
    needed = bodies_needed(chosen, outlines)
    built = build_request(chosen, outlines, {i: messages[i] for i in needed})
    assert built == apply_plan(messages, chosen)

"""Compaction planning (plimsoll.compaction): its promises over generated conversations, and by example."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plimsoll import DoesNotFit, estimate_message, fit, outline
from plimsoll.compaction import (
    ROOM_SHARE,
    RUNWAY,
    STAGE_1,
    Compaction,
    Policy,
    Previous,
    Summary,
    kept_growth,
    plan_compaction,
    summary_request,
    summary_tokens,
    view,
    view_messages,
)
from plimsoll.economics import growth_per_call
from plimsoll.fitting import note_costs, plan_history
from plimsoll.history import from_outlines
from plimsoll.notices import SUMMARY_HEADER
from plimsoll.profiles import get_profile
from tests.conversations import conversations, text_of, tool_round
from tests.examples import examples

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROFILE = get_profile("claude")
HEADER_START = SUMMARY_HEADER.split(":", 1)[0]


def total(messages: list[dict[str, Any]], overhead: int = 0) -> int:
    return overhead + sum(estimate_message(m) for m in messages)


def valid(messages: list[dict[str, Any]]) -> None:
    from_outlines([outline(m) for m in messages])  # raises on a split pair or broken alternation


def text_within(tokens: int, seed: int) -> str:
    """A summary text of at most ``tokens`` tokens (and close to it)."""
    words = max(0, tokens)
    text = text_of("en", words, seed)
    while words and summary_tokens(text, 3, PROFILE) - summary_tokens("", 3, PROFILE) > tokens:
        words -= max(1, words // 10)
        text = text_of("en", words, seed)
    return text


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    messages = draw(conversations(max_rounds=30, max_words=draw(st.sampled_from([120, 600]))))
    if draw(st.booleans()):  # the agent writes at length in its own messages: nothing stage 1 could clear
        words = draw(st.integers(50, 400))
        messages = [_wordy(m, words, i) if m["role"] == "assistant" else m for i, m in enumerate(messages)]
    overhead = draw(st.integers(0, 300))
    assistants = list(range(1, len(messages) - 1, 2))
    summary: Summary | None = None
    text = ""
    if len(assistants) > 2 and draw(st.booleans()):
        end = draw(st.sampled_from(assistants[1:]))
        text = text_of("en", draw(st.integers(0, 300)), seed=end)
        summary = Summary(end, summary_tokens(text, end, PROFILE))
    shown = view([outline(m) for m in messages], summary)
    size = overhead + sum(o.tokens for o in shown)
    budget = draw(st.integers(max(1, size // 6), size + 100) | st.integers(max(1, size * 3 // 10), size))
    previous = None
    if draw(st.booleans()) and len(shown) > 3:
        newest = len(shown) - 2 if len(shown) % 2 else len(shown) - 1  # the request before the newest round
        sent = draw(st.just(newest) | st.sampled_from(range(1, len(shown) - 1, 2)))
        ids = [rid for i, _, rid in from_outlines(shown).results if i < sent]
        previous = Previous(sent, tuple(draw(st.lists(st.sampled_from(ids), unique=True))) if ids else ())
    policy = draw(st.sampled_from(["auto", "summarize_all"]))
    cached = draw(cached_requests(shown, previous))
    return {
        "messages": messages,
        "overhead": overhead,
        "summary": summary,
        "text": text,
        "budget": budget,
        "previous": previous,
        "policy": policy,
        "cached": cached,
    }


@st.composite
def due_cases(draw: st.DrawFn) -> dict[str, Any]:
    """Cases where auto compaction is likely due: the agent writes at length, results are small, the budget is
    tight, and the previous request was the history before the newest round."""
    messages = draw(conversations(max_rounds=30, max_words=80))
    words = draw(st.integers(100, 300))
    messages = [_wordy(m, words, i) if m["role"] == "assistant" else m for i, m in enumerate(messages)]
    overhead = draw(st.integers(0, 300))
    size = total(messages, overhead)
    newest = len(messages) - 2 if len(messages) % 2 else len(messages) - 1
    ids = [rid for i, _, rid in from_outlines([outline(m) for m in messages]).results if i < newest]
    previous = Previous(newest, tuple(draw(st.lists(st.sampled_from(ids), unique=True))) if ids else ())
    return {
        "messages": messages,
        "overhead": overhead,
        "summary": None,
        "text": "",
        "budget": draw(st.integers(max(1, size * 2 // 5), max(1, size * 9 // 10))),
        "previous": previous,
        "policy": "auto",
        "cached": draw(cached_requests([outline(m) for m in messages], previous)),
    }


@st.composite
def cached_requests(draw: st.DrawFn, shown: list[Any], previous: Previous | None) -> list[Previous]:
    """Earlier requests still cached: whole requests before the previous one, mostly prefixes of it (clearing,
    among their messages, what it cleared), sometimes not."""
    if previous is None or previous.sent < 1:
        return []
    results = from_outlines(shown).results
    cached = []
    for sent in draw(st.lists(st.sampled_from(range(1, previous.sent + 1, 2)), unique=True, max_size=6)):
        before = {rid for index, _, rid in results if index < sent}
        cleared = set(previous.cleared) & before
        if before and draw(st.integers(0, 4)) == 0:  # not a prefix of the previous request
            cleared ^= {draw(st.sampled_from(sorted(before)))}
        cached.append(Previous(sent, tuple(sorted(cleared))))
    return cached


def _wordy(message: dict[str, Any], words: int, seed: int) -> dict[str, Any]:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return {**message, "content": [{"type": "text", "text": text_of("ru", words, seed)}, *blocks]}


def planned(case: dict[str, Any]) -> Compaction | None:
    shown = view([outline(m) for m in case["messages"]], case["summary"])
    try:
        current = plan_history(from_outlines(shown), case["budget"], profile=PROFILE, overhead=case["overhead"])
    except DoesNotFit:
        return None
    policy: Policy = case["policy"]
    return plan_compaction(
        [outline(m) for m in case["messages"]],
        case["budget"],
        profile=PROFILE,
        overhead=case["overhead"],
        summary=case["summary"],
        current=current,
        previous=case["previous"],
        policy=policy,
        cached=case["cached"],
    )


@SETTINGS
@given(cases() | due_cases())
def test_the_summary_request_fits_its_budget_pairs_up_and_its_count_is_exact(case: dict[str, Any]) -> None:
    compaction = planned(case)
    if compaction is None:
        return
    shown = view_messages(case["messages"], case["summary"], case["text"])
    request = summary_request(shown, compaction)
    assert compaction.request.tokens <= case["budget"]
    assert total(request, case["overhead"]) == compaction.request.tokens
    valid(request)
    # The range ends at a stored assistant message the request shows, before the newest round, past the old one.
    assert compaction.end % 2 == 1 and compaction.end <= len(case["messages"]) - 2
    assert compaction.end > (case["summary"].end if case["summary"] else 1)
    range_end = len(request) - compaction.keep
    assert request[range_end]["role"] == "assistant" if compaction.keep else range_end == len(request)


@SETTINGS
@given(cases() | due_cases())
def test_the_request_after_compaction_fits_and_never_splits_a_pair(case: dict[str, Any]) -> None:
    compaction = planned(case)
    if compaction is None:
        return
    text = text_within(compaction.allowance, compaction.end)
    after = view_messages(case["messages"], Summary(compaction.end, 0), text)
    result = fit(after, case["budget"], overhead=case["overhead"])
    assert result.tokens <= case["budget"]
    valid(result.messages)
    if case["policy"] == "auto" and not compaction.partial:  # it makes room: stage 1, not stages 2-3 again
        assert result.stage in STAGE_1


@SETTINGS
@given(cases() | due_cases())
def test_the_history_is_untouched_and_a_summary_is_never_of_a_summary_of_a_summary(case: dict[str, Any]) -> None:
    before = copy.deepcopy(case["messages"])
    compaction = planned(case)
    if compaction is not None:
        shown = view_messages(case["messages"], case["summary"], case["text"])
        request = summary_request(shown, compaction)
        blocks = request[0]["content"] if isinstance(request[0]["content"], list) else []
        summaries = [b for b in blocks if b.get("type") == "text" and b["text"].startswith(HEADER_START)]
        assert len(summaries) == (1 if case["summary"] else 0)  # the previous summary, once, plus originals
        start = case["summary"].end if case["summary"] else 1
        for sent, stored in zip(request[1:], case["messages"][start:], strict=False):  # originals, in order
            assert outline(sent).tool_uses == outline(stored).tool_uses
            assert [r.tool_use_id for r in outline(sent).results] == [r.tool_use_id for r in outline(stored).results]
    assert case["messages"] == before


@SETTINGS
@given(cases() | due_cases())
def test_off_never_compacts_and_auto_only_when_stages_2_3_are_due_or_clearing_leaves_no_room(
    case: dict[str, Any],
) -> None:
    shown = view([outline(m) for m in case["messages"]], case["summary"])
    try:
        current = plan_history(from_outlines(shown), case["budget"], profile=PROFILE, overhead=case["overhead"])
    except DoesNotFit:
        return
    arguments = {
        "profile": PROFILE,
        "overhead": case["overhead"],
        "summary": case["summary"],
        "current": current,
        "previous": case["previous"],
        "cached": case["cached"],
    }
    outlines = [outline(m) for m in case["messages"]]
    assert plan_compaction(outlines, case["budget"], policy="off", **arguments) is None
    if current.stage in STAGE_1 and plan_compaction(outlines, case["budget"], policy="auto", **arguments):
        # Stage 1 fits, but only by clearing what the previous request did not, without room for more rounds.
        previous = case["previous"]
        assert current.stage == "cleared_results" and previous is not None
        assert not set(current.cleared) <= set(previous.cleared)
        growth = RUNWAY * kept_growth(from_outlines(shown), PROFILE)
        assert current.tokens > case["budget"] - growth


def long_output_history(rounds: int) -> list[dict[str, Any]]:
    """An agent that writes a long summary of each document in its own message: nothing for stage 1 to clear."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Summarize each document."}]
    for index in range(rounds):
        messages.extend(tool_round(index, text_of("en", 40, index), text=text_of("ru", 300, index)))
    return messages


def test_a_due_compaction_replays_the_previous_request_and_reads_it_from_the_cache() -> None:
    messages = long_output_history(12)
    outlines = [outline(m) for m in messages]
    budget = total(messages) - 200
    current = plan_history(from_outlines(outlines), budget, profile=PROFILE)
    assert current.stage == "tool_rounds"
    previous = Previous(len(messages) - 2, ())
    compaction = plan_compaction(
        outlines, budget, profile=PROFILE, overhead=0, summary=None, current=current, previous=previous, policy="auto"
    )
    assert compaction is not None and compaction.replayed
    request = summary_request(messages, compaction)
    assert request[:-1] == messages[: previous.sent - 1]  # the same prefix, message for message
    assert request[-1]["content"][:-1] == messages[previous.sent - 1]["content"]  # the instruction appended
    # It covers enough that the request after it, its summary as long as allowed, leaves room for more steps.
    after = view_messages(messages, Summary(compaction.end, 0), text_within(compaction.allowance, 1))
    assert total([dict(message) for message in after]) <= ROOM_SHARE * budget


def test_no_compaction_when_it_cannot_make_room() -> None:
    """The newest round alone fills most of the budget: summarizing the rest would not leave room."""
    messages = long_output_history(3)
    messages.extend(tool_round(99, text_of("en", 20), text=text_of("ru", 3000)))
    outlines = [outline(m) for m in messages]
    budget = outlines[0].tokens + outlines[-1].tokens + outlines[-2].tokens + 400
    current = plan_history(from_outlines(outlines), budget, profile=PROFILE)
    assert current.stage in ("user_turns", "tool_rounds")
    assert (
        plan_compaction(
            outlines, budget, profile=PROFILE, overhead=0, summary=None, current=current, previous=None, policy="auto"
        )
        is None
    )


def test_a_due_compaction_sends_the_shortest_cached_request_that_covers_the_range() -> None:
    """Rather than the whole previous request, an earlier one the provider still caches, ending where the range
    ends: the summary request shows the range and reads it from the cache, and is shorter."""
    messages = long_output_history(12)
    outlines = [outline(m) for m in messages]
    budget = total(messages) - 200
    current = plan_history(from_outlines(outlines), budget, profile=PROFILE)
    previous = Previous(len(messages) - 2, ())
    arguments: dict[str, Any] = {"profile": PROFILE, "overhead": 0, "summary": None, "current": current}
    whole = plan_compaction(outlines, budget, previous=previous, policy="auto", **arguments)
    cached = [Previous(sent, ()) for sent in range(1, previous.sent + 1, 2)]
    shortest = plan_compaction(outlines, budget, previous=previous, policy="auto", cached=cached, **arguments)
    assert whole is not None and shortest is not None and shortest.replayed
    assert shortest.end == whole.end and shortest.keep == 0 < whole.keep
    assert shortest.request.tokens < whole.request.tokens
    request = summary_request(messages, shortest)
    assert request[:-1] == messages[: shortest.sent - 1]  # an earlier request, message for message
    assert request[-1]["content"][:-1] == messages[shortest.sent - 1]["content"]  # the instruction appended
    # A cached request that cleared differently is not a prefix of the previous one: not sent.
    changed = [Previous(sent, ("toolu_00000",)) for sent in range(3, previous.sent + 1, 2)]
    assert plan_compaction(outlines, budget, previous=previous, policy="auto", cached=changed, **arguments) == whole


@SETTINGS
@given(conversations(max_rounds=40))
def test_the_growth_kept_after_clearing_is_that_of_the_newest_rounds_over_the_whole_history(
    messages: list[dict[str, Any]],
) -> None:
    # kept_growth reads only the newest rounds (what a step at 10,000 messages can afford); the definition walks all.
    history = from_outlines([outline(m) for m in messages])
    note = note_costs(PROFILE).cleared_result
    freed = [0] * len(history)
    for index, tokens, _ in history.results:
        freed[index] += max(0, tokens - note)
    net = [tokens - free for tokens, free in zip(history.tokens, freed, strict=True)]
    assert kept_growth(history, PROFILE) == growth_per_call(net)

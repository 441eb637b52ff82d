"""The engine's incremental index (``plimsoll.history.Index``) and a summary's view from it reduce a conversation
exactly as ``from_outlines`` does from scratch, and the plans made from them are the same, over random histories
grown in random pieces."""

from __future__ import annotations

from itertools import count

from hypothesis import given, settings
from hypothesis import strategies as st

from plimsoll import CacheView, DoesNotFit, InvalidConversation, Outline, Result, get_profile, plan_cached
from plimsoll.compaction import Previous, Summary, plan_compaction, view, view_history
from plimsoll.economics import plan_economic
from plimsoll.fitting import Plan, plan_history
from plimsoll.history import History, Index, from_outlines
from tests.examples import examples

PROFILE = get_profile("claude")
sizes = st.integers(min_value=1, max_value=6_000)


@st.composite
def conversations(draw: st.DrawFn) -> list[Outline]:
    """A well-formed stored conversation: the instruction, then tool rounds (parallel calls answered in any order)
    and user turns; it may end with an assistant's calls whose results are still to come."""
    ids = count()
    outlines = [Outline("user", draw(sizes), has_text=True)]
    for _ in range(draw(st.integers(min_value=0, max_value=40))):
        calls = tuple(f"toolu_{next(ids)}" for _ in range(draw(st.integers(min_value=0, max_value=3))))
        outlines.append(Outline("assistant", draw(sizes), calls, has_text=True))
        if not calls:
            outlines.append(Outline("user", draw(sizes), has_text=True))
            continue
        answered = draw(st.permutations(calls))
        results = tuple(Result(i, draw(sizes), draw(st.sampled_from([None, True, False]))) for i in answered)
        text = draw(st.booleans())
        outlines.append(Outline("user", sum(r.tokens for r in results) + 7, results=results, has_text=text))
    if draw(st.booleans()) and outlines[-1].results:
        outlines.pop()  # the last round's results are still to come (a delegation's, carried by the step)
    return outlines


def reduced(outlines: list[Outline]) -> History | type[InvalidConversation]:
    try:
        return from_outlines(outlines)
    except InvalidConversation:
        return InvalidConversation


def grown(index: Index, carried: list[Outline]) -> History | type[InvalidConversation]:
    try:
        return index.history(carried)
    except InvalidConversation:
        return InvalidConversation


@given(conversations(), st.lists(st.integers(min_value=1, max_value=12), max_size=12), st.data())
@settings(max_examples=examples(150), deadline=None)
def test_an_index_grown_piece_by_piece_reduces_as_from_outlines(
    outlines: list[Outline], pieces: list[int], data: st.DataObject
) -> None:
    index = Index()
    start = 0
    for size in [*pieces, len(outlines)]:
        end = min(len(outlines), start + size)
        index.extend(outlines[start:end])
        start = end
        # With the next message carried (as a step carries delegate results), and without.
        assert grown(index, []) == reduced(outlines[:end])
        carried = outlines[end : end + data.draw(st.integers(min_value=0, max_value=2))]
        assert grown(index, carried) == reduced(outlines[: end + len(carried)])
        if end == len(outlines):
            break


@given(conversations(), st.integers(min_value=0, max_value=80), st.sampled_from(["role", "answer"]))
@settings(max_examples=examples(100), deadline=None)
def test_a_broken_conversation_is_refused_grown_or_not(outlines: list[Outline], at: int, kind: str) -> None:
    at = at % len(outlines)
    broken = list(outlines)
    current = broken[at]
    if kind == "role":
        broken[at] = Outline("assistant" if current.role == "user" else "user", current.tokens, has_text=True)
    else:
        broken[at] = Outline(current.role, current.tokens, current.tool_uses, current.results[1:], current.has_text)
    index = Index()
    try:
        index.extend(broken[: at + 1])
        index.extend(broken[at + 1 :])
    except InvalidConversation:
        assert reduced(broken) is InvalidConversation
        return
    assert grown(index, []) == reduced(broken)


def complete(outlines: list[Outline]) -> list[Outline]:
    return outlines if outlines[-1].role == "user" else outlines[:-1]


@given(conversations(), st.integers(min_value=0, max_value=40), st.integers(min_value=0, max_value=3_000))
@settings(max_examples=examples(150), deadline=None)
def test_a_summary_view_from_the_index_is_the_view_reduced(outlines: list[Outline], at: int, tokens: int) -> None:
    outlines = complete(outlines)
    ends = list(range(1, len(outlines), 2))
    summary = Summary(ends[at % len(ends)], tokens) if ends else None
    assert view_history(outlines, from_outlines(outlines), summary) == from_outlines(view(outlines, summary))


def plans(outlines: list[Outline], history: History | None, budget: int, cache: CacheView) -> object:
    """The plans the worker makes, from ``history`` (None: from the outlines, as before the index)."""
    try:
        return (
            plan_cached(outlines, budget, profile=PROFILE, overhead=500, cache=cache)
            if history is None
            else plan_economic(history, budget, profile=PROFILE, overhead=500, cache=cache),
            plan_history(
                from_outlines(outlines) if history is None else history, budget, profile=PROFILE, overhead=500
            ),
        )
    except DoesNotFit as error:
        return error.needed


@given(
    conversations(),
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=2_000, max_value=120_000),
    st.booleans(),
    st.data(),
)
@settings(max_examples=examples(150), deadline=None)
def test_plans_and_compactions_from_the_index_are_the_plans_from_scratch(
    outlines: list[Outline], at: int, budget: int, summarized: bool, data: st.DataObject
) -> None:
    outlines = complete(outlines)
    ends = list(range(1, len(outlines), 2))
    summary = Summary(ends[at % len(ends)], 300) if summarized and ends else None
    index = Index()
    index.extend(outlines)
    shown = view(outlines, summary)
    earlier = data.draw(st.lists(st.sampled_from([r.tool_use_id for o in outlines for r in o.results] or ["x"])))
    cache = CacheView(idle_seconds=data.draw(st.sampled_from([None, 10.0, 900.0])), previous_cleared=earlier)
    from_index = plans(shown, view_history(outlines, index.history(), summary), budget, cache)
    assert from_index == plans(shown, None, budget, cache)
    current = from_index[0].plan if isinstance(from_index, tuple) else Plan("user_turns", budget, 1, (), (), "none")
    previous = Previous(len(shown) - 2 + len(shown) % 2, tuple(earlier)) if data.draw(st.booleans()) else None
    for policy in ("auto", "summarize_all"):
        compacted = [
            plan_compaction(
                outlines,
                budget,
                profile=PROFILE,
                overhead=500,
                summary=summary,
                current=current,
                previous=previous,
                policy=policy,
                history=history,
            )
            for history in (index.history(), None)
        ]
        assert compacted[0] == compacted[1]

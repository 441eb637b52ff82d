"""Fitting a conversation into a per-request token budget.

Every stage chooses the same two things: where the kept part of the history starts (``keep_from``: everything
between the first message and it is left out) and which tool results are sent as a short note instead of their
content (``cleared``). The stages differ only in what they may choose:

1. ``cleared_results``: keep every message; clear the oldest eligible results, in batches of four;
2. ``user_turns``: keep the first message, a truncation note and the newest whole user turns;
3. ``tool_rounds``: keep the first message (the note appended) and the newest whole tool rounds.

Stages 2 and 3 clear every eligible result of what they keep. A cut always falls before a user turn or before
an assistant message, so a tool call and its result are kept or left out together.

Planning needs only :class:`~plimsoll.messages.Outline` s (no message bodies); :func:`apply_plan` builds the
request from the plan.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import accumulate
from typing import Any, Literal, overload

from plimsoll.estimate import Profile, count_tokens
from plimsoll.history import History, from_messages, from_outlines
from plimsoll.messages import BLOCK_OVERHEAD, Message, Outline, estimate_message
from plimsoll.notices import CLEARED_RESULT_NOTE, TRUNCATION_NOTE
from plimsoll.profiles import get_profile

Stage = Literal["as_is", "cleared_results", "user_turns", "tool_rounds", "compaction"]  # compaction: a summary request
BATCH = 4  # results are cleared four at a time, so the request prefix changes only once every few calls
ADAPTIVE_SHARE = 8  # an adaptive batch also frees at least budget // ADAPTIVE_SHARE tokens
Batching = Literal["four", "adaptive", "one"]  # "one": a result at a time, the cache-breaking way, for comparison
KEEP_SHARE = 4  # the newest results within budget // KEEP_SHARE stay whole (always the whole newest round)
ELIGIBLE_FACTOR = 2  # a result under twice the note's size is left alone: clearing it would save next to nothing


class DoesNotFit(Exception):
    """Even the smallest request we may send (the first message, the note and the newest round) is over budget."""

    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(f"the smallest possible request needs {needed} tokens; the budget is {budget}")
        self.needed = needed
        self.budget = budget


@dataclass(frozen=True)
class Plan:
    stage: Stage
    tokens: int  # estimated tokens of the request, overhead included
    keep_from: int  # index of the first stored message kept after the first one
    cleared: tuple[str, ...]  # tool_use_ids whose results are replaced by the note
    cleared_in: tuple[int, ...]  # indices of the messages that carry them
    note: Literal["none", "message", "appended"]

    @property
    def dropped(self) -> int:
        return self.keep_from - 1

    def kept(self, total: int) -> list[int]:
        """Indices of the stored messages this plan sends (whole or with results cleared)."""
        return [0, *range(self.keep_from, total)] if total else []


@dataclass(frozen=True)
class Fit:
    messages: list[dict[str, Any]]
    stage: Stage
    tokens: int
    cleared: tuple[str, ...]
    dropped: int


@dataclass(frozen=True)
class NoteCosts:
    cleared_result: int  # content tokens of a cleared result
    note_message: int  # the assistant message carrying the truncation note (stage 2)
    note_block: int  # the note as a block appended to the first message (stage 3)


@cache
def note_costs(profile: Profile) -> NoteCosts:
    return NoteCosts(
        cleared_result=count_tokens(CLEARED_RESULT_NOTE, profile),
        note_message=estimate_message(_note_message(), profile),
        note_block=BLOCK_OVERHEAD + count_tokens(TRUNCATION_NOTE, profile),
    )


def _note_message() -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": TRUNCATION_NOTE}]}


def protected_from(results: Sequence[tuple[int, int, str]], allowance: int) -> int:
    """Index into ``results`` of the oldest result that stays whole: every result of the newest round (the model
    has not seen them yet; parallel calls make several), then older ones while they fit in ``allowance``."""
    if not results:
        return 0
    start = len(results) - 1
    newest_round = results[start][0]
    used = results[start][1]
    while start > 0 and results[start - 1][0] == newest_round:
        start -= 1
        used += results[start][1]
    while start > 0 and used + results[start - 1][1] <= allowance:
        start -= 1
        used += results[start][1]
    return start


def _batch_end(savings: Sequence[int], count: int, budget: int, batching: Batching) -> int:
    """How many of the oldest eligible results to clear: the end of the batch holding the ``count``-th one.

    Batch ends depend only on the results themselves, never on how far the history has grown since, so the same
    set stays cleared over several calls. ``"four"``: every fourth result. ``"adaptive"``: a batch also frees at
    least ``budget // ADAPTIVE_SHARE`` tokens, so with small results one change of the prefix serves many calls.
    """
    if batching == "one":
        return count
    if batching == "four":
        return min(len(savings), -(-count // BATCH) * BATCH)
    quantum = budget // ADAPTIVE_SHARE
    size = freed = 0
    for end, saving in enumerate(savings, start=1):
        size += 1
        freed += saving
        if size >= BATCH and freed >= quantum:
            if end >= count:
                return end
            size = freed = 0
    return len(savings)


def _round_cuts(length: int) -> list[int]:
    """Where stage 3 may cut: before every fourth round counted from the first (so the kept part keeps its start
    over several calls, as clearing does), and before the last round, the smallest request we can send."""
    last_round = length - 1 if length % 2 == 0 else length - 2  # the newest assistant message: odd indices
    cuts = list(range(1 + 2 * BATCH, last_round, 2 * BATCH))
    return [*cuts, last_round] if last_round > 1 else cuts


def plan_history(
    history: History, budget: int, *, profile: Profile, overhead: int = 0, batching: Batching = "four"
) -> Plan:
    """Decide what to send. Raises :class:`DoesNotFit` when nothing we may send fits in ``budget``.

    The newest results within a quarter of the budget stay whole when the request can fit that way; when it
    cannot, only the newest round does. So a request fits exactly when the smallest one (the first message, the
    note, the newest round, everything else left out or cleared) does, and ``DoesNotFit.needed`` is its size:
    fitting again at that budget succeeds.
    """
    chosen = _attempt(history, budget, budget // KEEP_SHARE, profile, overhead, batching)
    if isinstance(chosen, Plan):
        return chosen
    smallest = _attempt(history, budget, 0, profile, overhead, batching)
    if isinstance(smallest, Plan):
        return smallest
    raise DoesNotFit(smallest, budget)


def _attempt(
    history: History, budget: int, allowance: int, profile: Profile, overhead: int, batching: Batching
) -> Plan | int:
    """The plan that fits ``budget`` keeping whole the newest results within ``allowance`` (and always the
    newest round); when none fits, the size of the smallest request under that rule."""
    tokens = history.tokens
    total = overhead + sum(tokens)
    if total <= budget:
        return Plan("as_is", total, 1, (), (), "none")
    note = note_costs(profile)
    results = history.results
    smallest = ELIGIBLE_FACTOR * note.cleared_result
    eligible = [r for r in results[: protected_from(results, allowance)] if r[1] >= smallest]
    savings = [size - note.cleared_result for _, size, _ in eligible]
    saved = list(accumulate(savings, initial=0))

    # Stage 1: the fewest batches of the oldest eligible results that bring the request within budget.
    if total - saved[-1] <= budget:
        count = _batch_end(savings, bisect_left(saved, total - budget), budget, batching)
        return _plan("cleared_results", total - saved[count], 1, eligible[:count], "none")

    # Stages 2 and 3: the smallest cut that fits, every eligible result of the kept part cleared.
    net = tokens.copy()
    for (index, _, _), saving in zip(eligible, savings, strict=True):
        net[index] -= saving
    tail = [*reversed(list(accumulate(reversed(net)))), 0]  # tail[c]: tokens of messages[c:], cleared
    head = overhead + tokens[0]
    needed = total - saved[-1]
    for stage, placement, extra, cuts in (
        ("user_turns", "message", note.note_message, [c for c in history.turn_starts if c > 1]),
        ("tool_rounds", "appended", note.note_block, _round_cuts(len(tokens))),
    ):
        for cut in cuts:
            size = head + extra + tail[cut]
            needed = min(needed, size)
            if size <= budget:
                kept = eligible[bisect_left(eligible, (cut,)) :]
                return _plan(stage, size, cut, kept, placement)  # type: ignore[arg-type]
    return needed


def _plan(
    stage: Stage,
    tokens: int,
    keep_from: int,
    cleared: list[tuple[int, int, str]],
    note: Literal["none", "message", "appended"],
) -> Plan:
    return Plan(
        stage,
        tokens,
        keep_from,
        tuple(rid for _, _, rid in cleared),
        tuple(sorted({i for i, _, _ in cleared})),
        note,
    )


def plan(
    outlines: Sequence[Outline],
    budget: int,
    *,
    profile: str | Profile = "claude",
    overhead: int = 0,
    batching: Batching = "four",
) -> Plan:
    """Plan a request from stored outlines, without the message bodies (see :func:`apply_plan`)."""
    return plan_history(
        from_outlines(outlines), budget, profile=get_profile(profile), overhead=overhead, batching=batching
    )


def apply_plan(messages: Sequence[Message], chosen: Plan) -> list[dict[str, Any]]:
    """Build the request that ``chosen`` describes. New dicts where something changed; the input is untouched."""
    if not messages:
        return []
    first: Any = messages[0]
    if chosen.note == "appended":
        first = _with_note(first)
    request: list[Any] = [first]
    if chosen.note == "message":
        request.append(_note_message())
    offset = len(request) - chosen.keep_from
    request.extend(messages[chosen.keep_from :])
    cleared = set(chosen.cleared)
    for index in chosen.cleared_in:
        request[index + offset] = _with_results_cleared(messages[index], cleared)
    return request


def bodies_needed(chosen: Plan, outlines: Sequence[Outline], *, start: int = 0) -> list[int]:
    """Indices of the stored messages (from ``start`` on) whose bodies the request needs. Messages that carry
    nothing but results being cleared are rebuilt from their outlines, so their (often large) bodies are never
    loaded."""
    cleared = set(chosen.cleared)
    rebuilt = {
        i
        for i in chosen.cleared_in
        if i >= start and not outlines[i].has_text and all(r.tool_use_id in cleared for r in outlines[i].results)
    }
    kept = chosen.kept(len(outlines)) if start == 0 else range(max(start, chosen.keep_from), len(outlines))
    return [i for i in kept if i not in rebuilt]


def build_request(chosen: Plan, outlines: Sequence[Outline], bodies: Mapping[int, Message]) -> list[dict[str, Any]]:
    """The request ``chosen`` describes, from stored outlines and the bodies of :func:`bodies_needed`. A message
    without its body is rebuilt from its outline with its results cleared already, so only the bodies are
    cleared; and only the messages the request keeps are built."""
    messages = _Rebuilt(outlines, bodies)
    return apply_plan(messages, replace(chosen, cleared_in=tuple(i for i in chosen.cleared_in if i in bodies)))


def request_from(
    chosen: Plan, outlines: Sequence[Outline], bodies: Mapping[int, Message], *, start: int
) -> list[dict[str, Any]]:
    """The messages :func:`build_request` builds for the outlines from ``start`` on (``start`` past
    ``chosen.keep_from``), from the bodies of ``bodies_needed(chosen, outlines, start=start)``. The same plan's
    request over the outlines before ``start``, followed by these, is its request over them all."""
    messages = _Rebuilt(outlines, bodies)
    built: list[Any] = messages[start:]
    late = [i for i in chosen.cleared_in if i >= start and i in bodies]
    if late:
        cleared = set(chosen.cleared)
        for index in late:
            built[index - start] = _with_results_cleared(messages[index], cleared)
    return built


class _Rebuilt(Sequence[Message]):
    """The stored messages as :func:`apply_plan` reads them: each its body if loaded, else rebuilt from its
    outline when read."""

    def __init__(self, outlines: Sequence[Outline], bodies: Mapping[int, Message]) -> None:
        self._outlines, self._bodies = outlines, bodies

    def __len__(self) -> int:
        return len(self._outlines)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        bodies, outlines = self._bodies, self._outlines
        if isinstance(index, slice):  # a request's kept messages, thousands of them: one loop, no call per message
            return [
                bodies[i] if i in bodies else _cleared_from_outline(outlines[i])
                for i in range(*index.indices(len(outlines)))
            ]
        found = bodies.get(index)
        return found if found is not None else _cleared_from_outline(outlines[index])


def _cleared_from_outline(message: Outline) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for result in message.results:
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": result.tool_use_id,
            "content": CLEARED_RESULT_NOTE,
        }
        if result.is_error is not None:
            block["is_error"] = result.is_error
        blocks.append(block)
    return {"role": message.role, "content": blocks}


def _cleared_block(block: Mapping[str, Any]) -> dict[str, Any]:
    cleared = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": CLEARED_RESULT_NOTE}
    if "is_error" in block:
        cleared["is_error"] = block["is_error"]
    return cleared


def _with_results_cleared(message: Message, cleared: set[str]) -> dict[str, Any]:
    content = message["content"]
    changed = dict(message)
    if len(content) == 1 and "is_error" not in content[0]:  # the usual: one result, which is cleared
        changed["content"] = [
            {"type": "tool_result", "tool_use_id": content[0]["tool_use_id"], "content": CLEARED_RESULT_NOTE}
        ]
    elif len(content) == 1:
        changed["content"] = [_cleared_block(content[0])]
    else:
        changed["content"] = [
            _cleared_block(b) if b["type"] == "tool_result" and b["tool_use_id"] in cleared else b for b in content
        ]
    return changed


def _with_note(message: Message) -> dict[str, Any]:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return {**message, "content": [*blocks, {"type": "text", "text": TRUNCATION_NOTE}]}


def fit(
    messages: Sequence[Message],
    budget: int,
    *,
    estimates: Sequence[int] | None = None,
    profile: str | Profile = "claude",
    overhead: int = 0,
    batching: Batching = "four",
) -> Fit:
    """Fit ``messages`` into ``budget`` tokens, ``overhead`` (the system prompt and tool schemas) included.

    With ``estimates`` (one per message, as stored) nothing is re-estimated.
    """
    history, chosen_profile = history_to_fit(messages, budget, estimates, profile)
    chosen = plan_history(history, budget, profile=chosen_profile, overhead=overhead, batching=batching)
    return Fit(apply_plan(messages, chosen), chosen.stage, chosen.tokens, chosen.cleared, chosen.dropped)


def history_to_fit(
    messages: Sequence[Message], budget: int, estimates: Sequence[int] | None, profile: str | Profile
) -> tuple[History, Profile]:
    """The checked arguments of a fit: the messages as a History (estimated unless ``estimates`` are given)
    and the profile."""
    if budget <= 0:
        raise ValueError(f"the budget must be positive, got {budget}")
    if estimates is not None and len(estimates) != len(messages):
        raise ValueError(f"got {len(estimates)} estimates for {len(messages)} messages")
    chosen_profile = get_profile(profile)
    return from_messages(messages, estimates, chosen_profile), chosen_profile

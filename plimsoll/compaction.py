"""Compaction: what stages 2 and 3 would drop is summarized once, and later requests carry the summary.

Pure planning, no I/O. A stored summary covers the stored messages ``1 .. end - 1``, where ``end`` is an
assistant message, so a tool call and its result are always covered or kept together. Requests then see the
*view*: the first message with the summary appended as a text block (under ``SUMMARY_HEADER``), then the stored
messages from ``end`` on. Every stage of fitting applies to the view exactly as it did to the history, so a
request after compaction fits its budget by the same guarantees; the stored history is never changed.

When is a compaction due, and over what:

- ``auto``: when the plan of the view would reach stage 2 or 3 (clearing alone no longer fits), or when stage 1
  fits only by clearing results the previous request did not clear and still leaves no room for :data:`RUNWAY`
  more rounds: each of the next steps would then clear again, and every clearing rewrites the provider's cache
  from the cleared result on, until stage 2 comes anyway (in the benchmark's long-output job, six such steps in a
  row, each writing ~38,000 tokens to the cache). The range ends at the oldest round boundary after which the
  request, with a summary of at most its allowance, fits at stage 1 within :data:`ROOM_SHARE` of the budget, or
  else at the newest boundary; either way with room for :data:`RUNWAY` more rounds of what a round adds once
  cleared, so it does not come back at the next step. If no boundary makes that room, no compaction (stages 2
  and 3 as before).
- ``summarize_all``: the baseline in the style of LangChain's ``SummarizationMiddleware``: whenever the view
  passes :data:`TRIGGER_SHARE` of the budget (masking or not), everything but the newest :data:`KEEP_MESSAGES`
  messages is summarized, from a fresh request.

A new summary always starts at message 1 and is written from what its request shows: the previous summary (in
the first message) and the originals after it. So each summary is built from one summary plus originals, never
from a summary of a summary of a summary.

The summary request, under ``auto``, sends again a request the provider still caches, with
:data:`~plimsoll.notices.SUMMARY_INSTRUCTION` appended to its last message, so it reads that prefix from the
cache: the shortest earlier request over the same summary (one that ended at a round boundary at or after the
chosen one, and is a prefix of the previous request) when there is one, so the summary request shows the range
and little more; otherwise the previous request itself (same messages, same cleared results), the instruction
telling how many of its last messages to leave out. When neither is replayable (stage 2 or 3 before, or no
previous request) or would pass the budget, a smaller request is planned over the range alone, and when even
that cannot see the whole range at stage 1, there is no compaction. The summary's size is capped by the
request's ``max_tokens``: its allowance, a share of the budget, plus the person's words of the range it covers
(those an earlier summary quotes included; up to another share), which the summary quotes word for word. The
instruction states that limit, and asks the model, if the summary cannot all fit, to leave out the oldest tool
calls, then the oldest notes, the person's words last: a reply cut at ``max_tokens`` would lose its end, where
the newest notes are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import accumulate
from typing import Any, Literal

from plimsoll.economics import RECENT_ROUNDS, growth_per_call
from plimsoll.estimate import Profile, count_tokens
from plimsoll.fitting import DoesNotFit, Plan, apply_plan, note_costs, plan_history
from plimsoll.fitting import _plan as plan_of
from plimsoll.history import History, from_outlines
from plimsoll.messages import BLOCK_OVERHEAD, Message, Outline
from plimsoll.notices import SUMMARY_HEADER, SUMMARY_INSTRUCTION

Policy = Literal["off", "auto", "summarize_all"]
POLICIES: tuple[Policy, ...] = ("off", "auto", "summarize_all")
DROPPING = ("user_turns", "tool_rounds")
SUMMARY_SHARE = 5  # a summary gets up to budget // SUMMARY_SHARE tokens of its own ...
PERSON_SHARE = 10  # ... plus the person's words of its range, up to budget // PERSON_SHARE
ROOM_SHARE = 0.5  # after compaction, the request fits at stage 1 within this share of the budget
RUNWAY = 2  # and at least this many more rounds of the recent size fit
TRIGGER_SHARE = 0.8  # summarize_all: summarize when the view passes this share of the budget
KEEP_MESSAGES = 20  # summarize_all: the newest messages kept (LangChain's default)
STAGE_1 = ("as_is", "cleared_results")


@dataclass(frozen=True)
class Summary:
    """A stored summary as planning sees it."""

    end: int  # covers stored messages 1 .. end - 1; ``end`` is an assistant message
    tokens: int  # estimate of the block carrying it in the first message, framing included


@dataclass(frozen=True)
class Previous:
    """The previous request, as far as replaying it needs: how many view messages it sent and what it cleared.
    Only a request that sent its whole view at stage 1, over the same summary, can be replayed."""

    sent: int
    cleared: tuple[str, ...]


@dataclass(frozen=True)
class Compaction:
    end: int  # stored index: the new summary covers stored messages 1 .. end - 1
    keep: int  # messages at the end of the summary request that the summary leaves out
    allowance: int  # the summary's largest size in tokens: the summary request's max_tokens
    request: Plan  # the summary request over view[:sent], stage "compaction", the instruction counted in
    sent: int  # view messages the summary request sends (the instruction is appended to the last)
    replayed: bool  # the previous request's prefix, replayed: read from the provider's cache
    partial: bool = False  # covers less than the room needs (its request could not show more): more follows


def view(outlines: Sequence[Outline], summary: Summary | None) -> list[Outline]:
    """The outlines requests are planned over: the first message with the summary appended, then the rest."""
    if summary is None:
        return list(outlines)
    return [with_block(outlines[0], summary.tokens), *outlines[summary.end :]]


def view_history(outlines: Sequence[Outline], history: History, summary: Summary | None) -> History:
    """``from_outlines(view(outlines, summary))`` from the History of ``outlines``, without going over them again."""
    if summary is None:
        return history
    end = summary.end
    if end % 2 == 0 or end >= len(outlines) or outlines[0].results:  # not a view stored summaries make: check all
        return from_outlines(view(outlines, summary))
    shift = end - 1
    return History(
        [history.tokens[0] + summary.tokens, *history.tokens[end:]],
        [(index - shift, tokens, rid) for index, tokens, rid in history.results if index >= end],
        [0, *(index - shift for index in history.turn_starts if index >= end)],
    )


def with_block(first: Outline, tokens: int) -> Outline:
    return Outline(first.role, first.tokens + tokens, first.tool_uses, first.results, True)


def stored_index(index: int, summary: Summary | None) -> int:
    """The stored message a view index stands for (0: the first message, whatever the summary)."""
    return index if summary is None or index == 0 else index + summary.end - 1


def summary_text(summary: str, end: int) -> str:
    """The block carrying a summary of stored messages 1 .. end - 1."""
    return f"{SUMMARY_HEADER.format(last=end - 1)}\n{summary}"


def summary_tokens(summary: str, end: int, profile: Profile) -> int:
    return BLOCK_OVERHEAD + count_tokens(summary_text(summary, end), profile)


def instruction(keep: int, limit: int) -> str:
    """The summary instruction: the range is the request but its last ``keep`` messages; the summary's size
    ``limit`` (its ``max_tokens``) is stated, so a summary that cannot hold everything leaves out the oldest
    lines rather than being cut at the end, where the newest notes are."""
    return SUMMARY_INSTRUCTION.format(keep=keep, limit=limit)


def view_messages(messages: Sequence[Message], summary: Summary | None, text: str) -> list[Message]:
    """The view of stored ``messages`` (all of them, or those a request needs, by index) with the summary
    ``text``; new dicts where something changed, the input untouched."""
    if summary is None:
        return list(messages)
    return [appended(messages[0], summary_text(text, summary.end)), *messages[summary.end :]]


def summary_request(view_of: Sequence[Message], compaction: Compaction) -> list[dict[str, Any]]:
    """The summary request's messages from the view's messages: the planned prefix, the instruction last."""
    return with_instruction(apply_plan(view_of[: compaction.sent], compaction.request), compaction)


def with_instruction(prefix: list[dict[str, Any]], compaction: Compaction) -> list[dict[str, Any]]:
    """The summary request: its planned ``prefix`` (a new list) with the instruction appended to the last."""
    return [*prefix[:-1], appended(prefix[-1], instruction(compaction.keep, compaction.allowance))]


def appended(message: Message, text: str) -> dict[str, Any]:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return {**message, "content": [*blocks, {"type": "text", "text": text}]}


def plan_compaction(
    outlines: Sequence[Outline],
    budget: int,
    *,
    profile: Profile,
    overhead: int,
    summary: Summary | None,
    current: Plan,
    previous: Previous | None,
    policy: Policy,
    cached: Iterable[Previous] = (),
    max_output: int | None = None,
    history: History | None = None,
) -> Compaction | None:
    """The compaction due before the request ``current`` (planned over the view), or None. ``cached``: earlier
    requests over the same summary whose whole prefix the provider may still cache (each ended with a cache
    breakpoint on its last block); a summary request that sends one of them again, the instruction appended,
    reads it from the cache and is shorter than replaying the previous request. ``max_output``: the most the
    model may write in one reply, if less than a summary's allowance. ``history``: ``from_outlines(outlines)``,
    if the caller has it."""
    if policy == "off":
        return None
    stored = from_outlines(outlines) if history is None else history
    shown = view(outlines, summary)
    history = view_history(outlines, stored, summary)
    last_round = len(shown) - 2 if len(shown) % 2 else len(shown) - 1  # the newest assistant message stays
    # The person's words a summary ending before view index c quotes: those of every stored turn it covers, the
    # ones an earlier summary quotes included (its range starts at message 1 too).
    setting = _Setting(budget, profile, overhead, summary)

    @cache
    def person() -> list[int]:
        stored_person = _person_tokens(stored, len(outlines))
        return [stored_person[stored_index(c, summary)] for c in range(len(shown) + 1)]

    def allowance_of(cut: int) -> int:
        allowance = _allowance(budget, person()[cut])
        return allowance if max_output is None else min(allowance, max_output)

    def after(cut: int) -> History:
        """The view after a summary of view[1:cut] as long as its allowance."""
        header = count_tokens(summary_text("", stored_index(cut, summary)), profile) + BLOCK_OVERHEAD
        return from_outlines([with_block(outlines[0], header + allowance_of(cut)), *shown[cut:]])

    def fits_after(cut: int) -> bool:
        try:
            plan_history(after(cut), budget, profile=profile, overhead=overhead)
        except DoesNotFit:
            return False
        return True

    if policy == "summarize_all":
        if overhead + sum(history.tokens) <= TRIGGER_SHARE * budget:
            return None
        cut = max(3, len(shown) - KEEP_MESSAGES)
        cut += 1 - cut % 2  # an assistant message: odd in the view
        if cut > last_round or not fits_after(cut):  # the request after it must fit, at some stage
            return None
        return _fresh(shown, cut, setting, allowance_of(cut))
    growth = RUNWAY * kept_growth(history, profile)
    if current.stage not in DROPPING and not _clearing_without_room(current, previous, budget - growth):
        return None

    def makes_room(cut: int, room: int) -> bool:
        return _stage_1(after(cut), room, profile, overhead) is not None

    # The oldest boundary that brings the request down to ROOM_SHARE of the budget; failing that, the newest,
    # if it leaves room for RUNWAY more rounds; failing that, none (it would come back at once).
    cuts = range(3, last_round + 1, 2)
    target = budget - max(growth, int((1 - ROOM_SHARE) * budget))
    chosen = next((c for c in cuts if makes_room(c, target)), None)
    if chosen is None and cuts and makes_room(cuts[-1], budget - growth):
        chosen, target = cuts[-1], budget - growth
    if chosen is None:
        return None
    cut = chosen
    if previous is not None:  # the shortest prefix of the previous request still cached that makes the room
        for earlier in sorted(cached, key=lambda request: request.sent):
            # (a longer range may cover more of the person's words, so its summary may hold more: checked again)
            if cut <= earlier.sent <= last_round and _prefix_of(history, earlier, previous):
                if not makes_room(earlier.sent, target):
                    continue
                prefix = _replay(history, earlier, earlier.sent, setting, allowance_of(earlier.sent))
                if prefix is not None:
                    return prefix
    allowance = allowance_of(cut)
    if previous is not None and cut <= previous.sent:
        replay = _replay(history, previous, cut, setting, allowance)
        if replay is not None:
            return replay
    fresh = _fresh(shown, cut, setting, allowance)
    if fresh is not None:
        return fresh
    # Planned smaller: the longest range a request can show whole now. The next step compacts again, from this
    # summary and the originals after it, until there is room.
    for shorter in range(cut - 2, 2, -2):
        part = _fresh(shown, shorter, setting, allowance_of(shorter))
        if part is not None and fits_after(shorter):
            return replace(part, partial=True)
    return None


def _clearing_without_room(current: Plan, previous: Previous | None, room: int) -> bool:
    """Stage 1 fits, but only by clearing what the previous request did not (which rewrites the prompt cache
    from there) and without room for the next rounds: every following step would clear again and rewrite the
    cache again until stages 2-3. The summary is due now, while the previous request is still replayable."""
    if current.stage != "cleared_results" or previous is None:
        return False
    return not set(current.cleared) <= set(previous.cleared) and current.tokens > room


def _prefix_of(history: History, earlier: Previous, previous: Previous) -> bool:
    """The earlier request is a prefix of the previous one: a whole request (it ended with a user message) that
    cleared, among its messages, what the previous request cleared there."""
    if earlier.sent % 2 == 0 or earlier.sent > previous.sent:
        return False
    before = {rid for index, _, rid in history.results if index < earlier.sent}
    return set(earlier.cleared) == set(previous.cleared) & before


def kept_growth(history: History, profile: Profile) -> int:
    """Tokens a round adds to the request once stage 1 has cleared its results: what clearing cannot take back
    (the assistant's message, the notes in place of results), by the mean of the newest rounds."""
    note = note_costs(profile).cleared_result
    # growth_per_call reads the newest RECENT_ROUNDS rounds only: those, and the message before them.
    start = max(0, len(history) - 2 * RECENT_ROUNDS - 1)
    net = history.tokens[start:]
    for index, tokens, _ in reversed(history.results):  # oldest first: the newest rounds' are at the end
        if index < start:
            break
        net[index - start] -= max(0, tokens - note)
    return growth_per_call(net)


def _allowance(budget: int, person: int) -> int:
    return budget // SUMMARY_SHARE + min(person, budget // PERSON_SHARE)


def _person_tokens(history: History, length: int) -> list[int]:
    """``[c]``: tokens of the person's turns (user messages with text, the first one aside) before index c."""
    turns = set(history.turn_starts) - {0}
    return list(accumulate((history.tokens[i] if i in turns else 0 for i in range(length)), initial=0))


def _stage_1(history: History, budget: int, profile: Profile, overhead: int) -> Plan | None:
    if budget <= 0:
        return None
    try:
        chosen = plan_history(history, budget, profile=profile, overhead=overhead)
    except DoesNotFit:
        return None
    return chosen if chosen.stage in STAGE_1 else None


def _instruction_tokens(keep: int, limit: int, profile: Profile) -> int:
    return BLOCK_OVERHEAD + count_tokens(instruction(keep, limit), profile)


@dataclass(frozen=True)
class _Setting:
    """What every summary request is planned under."""

    budget: int
    profile: Profile
    overhead: int
    summary: Summary | None


def _replay(history: History, previous: Previous, cut: int, setting: _Setting, allowance: int) -> Compaction | None:
    """The previous request again, with the instruction appended: None if it would pass the budget."""
    sent = previous.sent
    if sent > len(history) or sent % 2 == 0:  # it ended with a user message, which is odd in length
        return None
    note = note_costs(setting.profile).cleared_result
    cleared = set(previous.cleared)
    kept = [(index, tokens, rid) for index, tokens, rid in history.results if index < sent and rid in cleared]
    keep = sent - cut
    tokens = setting.overhead + sum(history.tokens[:sent]) - sum(t - note for _, t, _ in kept)
    tokens += _instruction_tokens(keep, allowance, setting.profile)
    if tokens > setting.budget:
        return None
    request = plan_of("compaction", tokens, 1, kept, "none")
    return Compaction(stored_index(cut, setting.summary), keep, allowance, request, sent, True)


def _fresh(shown: Sequence[Outline], cut: int, setting: _Setting, allowance: int) -> Compaction | None:
    """A request over the range alone (view[:cut]), cleared as stage 1 needs: None if it cannot show the
    whole range within the budget."""
    if cut > len(shown) - 2:
        return None
    instruction_tokens = _instruction_tokens(0, allowance, setting.profile)
    chosen = _stage_1(
        from_outlines(shown[:cut]), setting.budget - instruction_tokens, setting.profile, setting.overhead
    )
    if chosen is None:
        return None
    request = Plan("compaction", chosen.tokens + instruction_tokens, 1, chosen.cleared, chosen.cleared_in, "none")
    return Compaction(stored_index(cut, setting.summary), 0, allowance, request, cut, False)

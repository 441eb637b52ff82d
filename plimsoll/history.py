"""A conversation reduced to what planning a request needs, checked on the way in.

Built either from stored outlines (the worker: no message bodies) or straight from the messages (``fit``); the
second path is written for speed, since ``fit`` over 10,000 messages must take milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from plimsoll.estimate import Profile
from plimsoll.messages import (
    BLOCK_OVERHEAD,
    MESSAGE_OVERHEAD,
    InvalidConversation,
    Outline,
    block_size,
    outline,
    share_out,
)


@dataclass(frozen=True, slots=True)
class History:
    tokens: list[int]  # estimate of each message
    results: list[tuple[int, int, str]]  # (message index, content tokens, tool_use_id), oldest first
    turn_starts: list[int]  # indices of the user messages that start a user turn (text, no tool results)

    def __len__(self) -> int:
        return len(self.tokens)


def _check_roles(roles: list[Any], offset: int = 0) -> None:
    """Roles alternate from a user's; ``roles`` may be the first role followed by those from index ``offset``."""
    if not roles:
        raise InvalidConversation("the conversation is empty")
    if offset:
        roles = roles[1:]
    users, assistants = roles[offset % 2 :: 2], roles[1 - offset % 2 :: 2]
    if users.count("user") != len(users) or assistants.count("assistant") != len(assistants):
        raise InvalidConversation(
            "the conversation must start with a user message and alternate user and assistant messages"
        )


def _check_answers(index: int, calls: Sequence[str], answers: Sequence[str]) -> None:
    if len(calls) != len(answers) or (calls and set(calls) != set(answers)) or len(set(answers)) != len(answers):
        raise InvalidConversation(
            f"message {index} must answer exactly the tool calls of message {index - 1}: "
            f"calls {list(calls)}, results {list(answers)}"
        )


def from_outlines(outlines: Sequence[Outline]) -> History:
    index = Index()
    index.extend(outlines)
    return index.history()


@dataclass(slots=True)
class Index:
    """A stored conversation's outlines, checked and reduced to a :class:`History` as they arrive: extending it
    checks and reduces only the new ones, so a caller that keeps it between requests pays for what was appended
    since, not for the whole history. ``history()`` equals ``from_outlines`` of the same outlines, errors too."""

    outlines: list[Outline] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    results: list[tuple[int, int, str]] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    calls: Sequence[str] = ()  # the tool calls of the last message, if it is an assistant's

    def __len__(self) -> int:
        return len(self.outlines)

    def extend(self, outlines: Sequence[Outline]) -> None:
        """Append ``outlines``; raises :class:`InvalidConversation` (and is then unusable) if they do not go on
        the conversation as ``from_outlines`` requires."""
        start = len(self.outlines)
        _check_roles([o.role for o in [*self.outlines[:1], *outlines]], offset=start)
        calls = self.calls
        for index, current in enumerate(outlines, start=start):
            if current.role == "user":
                _check_answers(index, calls, [r.tool_use_id for r in current.results])
                self.results.extend((index, r.tokens, r.tool_use_id) for r in current.results)
                if current.has_text and not current.results:
                    self.turn_starts.append(index)
                calls = ()
            else:
                calls = current.tool_uses
        self.calls = calls
        self.outlines.extend(outlines)
        self.tokens.extend(o.tokens for o in outlines)

    def copy(self) -> Index:
        return Index(self.outlines.copy(), self.tokens.copy(), self.results.copy(), self.turn_starts.copy(), self.calls)

    def history(self, carried: Sequence[Outline] = ()) -> History:
        """The History of these outlines followed by ``carried`` (which are not kept), in lists of its own."""
        if carried:
            grown = self.copy()
            grown.extend(carried)
            return grown.history()
        _check_roles([o.role for o in self.outlines[:1]])
        if self.calls:
            raise InvalidConversation("the last message calls a tool that has no result yet")
        return History(self.tokens.copy(), self.results.copy(), self.turn_starts.copy())


def from_messages(messages: Sequence[Mapping[str, Any]], estimates: Sequence[int] | None, profile: Profile) -> History:
    """With ``estimates`` given nothing is estimated; a result's share of its message's estimate is taken in
    proportion to the size of its content when the message carries more than one block.

    This path avoids a Python-level step per message where it can (``fit`` over 10,000 messages must take
    milliseconds): comprehensions over all messages at once, and one comparison of every call with every result.
    """
    if estimates is None:
        return from_outlines([outline(m, profile) for m in messages])
    try:
        roles = list(map(itemgetter("role"), messages))
        contents = list(map(itemgetter("content"), messages))
        _check_roles(roles)
        n = len(contents)
        calls = [
            (i + 1, b["id"])
            for i in range(1, n, 2)
            if (c := contents[i]).__class__ is not str
            for b in c
            if b["type"] == "tool_use"
        ]
        framing = MESSAGE_OVERHEAD + BLOCK_OVERHEAD
        results = [
            (i, estimates[i] - framing if len(c) == 1 else -1, b["tool_use_id"])
            for i in range(0, n, 2)
            if (c := contents[i]).__class__ is not str
            for b in c
            if b["type"] == "tool_result"
        ]
    except (KeyError, TypeError, AttributeError):
        raise InvalidConversation(
            "every message needs a 'role' and a 'content': a string or a list of blocks with a 'type' "
            "(and ids on tool blocks)"
        ) from None
    if calls != [(i, rid) for i, _, rid in results] and sorted(calls) != sorted((i, rid) for i, _, rid in results):
        from_outlines([outline(m, profile, e) for m, e in zip(messages, estimates, strict=True)])  # says what
        raise InvalidConversation("tool calls and tool results do not pair up")
    if any(tokens < 0 for _, tokens, _ in results):
        results = _shared_results(results, contents, estimates)
    answered = {i for i, _, _ in results}
    return History(list(estimates), results, [i for i in range(0, n, 2) if i not in answered])


def _shared_results(
    results: list[tuple[int, int, str]], contents: list[Any], estimates: Sequence[int]
) -> list[tuple[int, int, str]]:
    """Fill in the tokens of results that share their message with other blocks, in proportion to size."""
    shared: dict[tuple[int, str], int] = {}
    for index in sorted({i for i, tokens, _ in results if tokens < 0}):
        content = contents[index]
        total = max(0, estimates[index] - MESSAGE_OVERHEAD - BLOCK_OVERHEAD * len(content))
        for block, share in zip(content, share_out(total, [block_size(b) for b in content]), strict=True):
            if block["type"] == "tool_result":
                shared[index, block["tool_use_id"]] = share
    return [(i, shared[i, rid] if tokens < 0 else max(0, tokens), rid) for i, tokens, rid in results]

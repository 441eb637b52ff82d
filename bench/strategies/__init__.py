"""Ways to fit a growing agent history into a token budget, for ``bench.fitting`` and ``bench.cost_frontier`` to
compare.

Each strategy is one small object with one method, in the style of SWE-agent's history processors: ``request``
gets the whole stored history (with the estimate of each message, as the worker stores them) and the seconds since
the job's previous request, and returns the request to send. Strategies never change the history they are given;
some keep state from one request to the next (``bench.frontier_policies``'s planners: the outlines made so far,
what the previous request cleared).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from plimsoll import apply_plan, estimate_message, fit, outline
from plimsoll.fitting import Batching
from plimsoll.messages import Message
from plimsoll.notices import CLEARED_RESULT_NOTE
from worker.legacy import legacy_plan

PROFILE = "claude"


@dataclass(frozen=True)
class Request:
    messages: Sequence[Message]
    # Indices of request messages that carry a cache breakpoint (the last always gets one as well); None: the
    # caller places them by its own rule.
    breakpoints: list[int] | None = field(default=None)


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    def request(self, history: Sequence[Message], estimates: Sequence[int], idle_seconds: float = 0.0) -> Request:
        """The request for ``history`` (``estimates``: one per message, by the claude profile; ``idle_seconds``:
        since the job's previous request)."""
        ...


def results_of(history: Sequence[Message]) -> list[tuple[int, str]]:
    """(message index, tool_use_id) of every tool result, oldest first."""
    return [
        (index, block["tool_use_id"])
        for index, message in enumerate(history)
        if not isinstance(message["content"], str)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


def with_results_cleared(message: Message, cleared: Collection[str]) -> dict[str, Any]:
    """A copy of ``message`` whose results in ``cleared`` carry the note instead of their content."""

    def block(original: Any) -> Any:
        if original["type"] != "tool_result" or original["tool_use_id"] not in cleared:
            return original
        return {**original, "content": CLEARED_RESULT_NOTE}

    return {**message, "content": [block(b) for b in message["content"]]}


@dataclass(frozen=True)
class PlimsollFit:
    """``plimsoll.fit`` on the stored estimates (the worker's path)."""

    budget: int
    batching: Batching = "four"

    @property
    def name(self) -> str:
        kind = {"four": "batches of four", "adaptive": "adaptive batches"}.get(self.batching, self.batching)
        return f"Plimsoll ({kind})"

    def request(self, history: Sequence[Message], estimates: Sequence[int], idle_seconds: float = 0.0) -> Request:
        return Request(fit(history, self.budget, estimates=estimates, profile=PROFILE, batching=self.batching).messages)


@dataclass(frozen=True)
class ClearOneAtATime:
    """Clear the oldest results one by one, exactly as many as the request needs to fit; the newest stays whole."""

    budget: int
    name: str = "clear one result at a time"

    def request(self, history: Sequence[Message], estimates: Sequence[int], idle_seconds: float = 0.0) -> Request:
        sent = list(history)
        total = sum(estimates)
        cleared: set[str] = set()
        for index, tool_use_id in results_of(history)[:-1]:
            if total <= self.budget:
                break
            before = estimates[index] if sent[index] is history[index] else estimate_message(sent[index], PROFILE)
            cleared.add(tool_use_id)
            sent[index] = with_results_cleared(history[index], cleared)
            total += estimate_message(sent[index], PROFILE) - before
        return Request(sent)


@dataclass(frozen=True)
class KeepNewestResults:
    """The original system's earlier version: once the history is over budget, keep the ``keep`` newest results
    whole (counted, whatever their size) and clear every older one."""

    budget: int
    keep: int = 6

    @property
    def name(self) -> str:
        return f"keep the newest {self.keep} results"

    def request(self, history: Sequence[Message], estimates: Sequence[int], idle_seconds: float = 0.0) -> Request:
        if sum(estimates) <= self.budget:
            return Request(history)
        older = results_of(history)[: -self.keep or None]
        cleared = {tool_use_id for _, tool_use_id in older}
        holders = {index for index, _ in older}
        return Request([with_results_cleared(m, cleared) if i in holders else m for i, m in enumerate(history)])


@dataclass(frozen=True)
class LegacyCutAtUserTurns:
    """The truncation before Plimsoll (``worker.legacy.legacy_plan``): cut only before user turns, clear
    nothing. A subagent has one user turn, so it never cuts and sends requests over the budget."""

    budget: int
    name: str = "legacy: cut at user turns only"

    def request(self, history: Sequence[Message], estimates: Sequence[int], idle_seconds: float = 0.0) -> Request:
        outlines = [outline(m, PROFILE, e) for m, e in zip(history, estimates, strict=True)]
        return Request(apply_plan(history, legacy_plan(outlines, self.budget, profile=PROFILE)))

"""What every model provider adapter offers: one call from a canonical request to a canonical reply."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from worker.errors import TooLong
from worker.rate_limits import Budget

# Newer Anthropic models stop with this reason when the conversation fills the context window mid-reply.
CONTEXT_WINDOW_EXCEEDED = "model_context_window_exceeded"


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    """Input tokens billed at the full rate: neither written to nor read from the prompt cache."""
    output_tokens: int
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    @property
    def total_input(self) -> int:
        """Every input token of the request, cached or not."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens


@dataclass(frozen=True)
class Timeouts:
    """How long a model call may take: ``connect`` to reach the provider, ``idle`` seconds without a byte, and in
    all its deadline, the idle time plus its output allowance at ``output_tokens_per_second``."""

    idle: float = 120.0
    connect: float = 10.0
    output_tokens_per_second: float = 20.0

    def deadline(self, max_tokens: int) -> float:
        return self.connect + self.idle + max_tokens / self.output_tokens_per_second


@dataclass(frozen=True)
class Reply:
    content: list[dict[str, Any]]
    """Canonical (Anthropic-shaped) blocks: text and tool_use."""
    stop_reason: str
    """Canonical stop reason: end_turn, tool_use, max_tokens, stop_sequence, refusal, ..."""
    usage: Usage
    model: str
    limits: Mapping[str, Budget] = field(default_factory=dict)
    """The provider's rate limits as this answer's headers state them (empty: it states none)."""
    request_id: str | None = None
    """The provider's id of the request (its request-id header), which its billing names it by."""


class Provider(Protocol):
    def send(
        self,
        *,
        model: str,
        system: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        max_tokens: int,
        breakpoints: Sequence[int] = (),
    ) -> Reply:
        """Send one request; raise a ``worker.errors.ProviderError`` subclass when it fails. ``breakpoints``
        are the request messages that end a prefix the next requests keep (where a provider that caches on
        marks, as Anthropic does, puts its marks); empty: the adapter decides."""
        ...


@runtime_checkable
class KnowsLimits(Protocol):
    def model_limits(self, model: str) -> tuple[int, int] | None:
        """(context window, output limit) of ``model`` from the provider's models endpoint, if it says."""
        ...


def checked_reply(reply: Reply, provider: str) -> Reply:
    """The reply, unless its stop reason says the context window was exceeded: that is a TooLong."""
    if reply.stop_reason == CONTEXT_WINDOW_EXCEEDED:
        raise TooLong(
            f"the model stopped with {CONTEXT_WINDOW_EXCEEDED} after {reply.usage.total_input} input tokens",
            provider=provider,
        )
    return reply

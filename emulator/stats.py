"""What the emulator has served, for tests and benchmarks (``GET /v1/emulator/stats``)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MESSAGES_ROUTE = "messages"
COUNT_TOKENS_ROUTE = "count_tokens"
CHAT_COMPLETIONS_ROUTE = "chat_completions"

# Rejection kinds, as counted in ``rejections`` and written in each log record.
TOO_LONG = "too_long"
TOO_LONG_WITH_MAX_TOKENS = "too_long_with_max_tokens"
RATE_LIMIT = "rate_limit"  # an injected 429
RATE_LIMITED = "rate_limited"  # a 429 of the rate limits (emulator/rate_limits.py)
OVERLOADED = "overloaded"
API_ERROR = "api_error"
DROPPED = "dropped"
AUTHENTICATION = "authentication"
INVALID_REQUEST = "invalid_request"

HUNG = "hung"

FAULT_REJECTIONS = {"429": RATE_LIMIT, "529": OVERLOADED, "500": API_ERROR, "drop": DROPPED, "hang": HUNG}


@dataclass(frozen=True)
class RequestRecord:
    route: str
    status: int
    input_tokens: int = 0
    """All input tokens of the request, cached or not (0 when it was rejected before counting)."""
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None
    fault: str | None = None
    rejection: str | None = None
    at: float = 0.0
    """When the request was answered, on the emulator's clock (model routes only)."""
    model: str | None = None
    request_id: str | None = None
    """The request-id header it was answered with (a model's answer only), as a provider's bill names it."""


@dataclass
class Stats:
    records: list[RequestRecord] = field(default_factory=list)

    def record(self, record: RequestRecord) -> None:
        self.records.append(record)

    def clear(self) -> None:
        self.records.clear()

    def as_dict(self) -> dict[str, Any]:
        """Token totals and the maximum cover the requests that were answered by the model (not
        ``count_tokens``, not rejections); the log shows every request."""
        served = [record for record in self.records if record.rejection is None and record.route != COUNT_TOKENS_ROUTE]
        return {
            "requests": len(self.records),
            "requests_by_route": dict(Counter(record.route for record in self.records)),
            "rejections": dict(Counter(record.rejection for record in self.records if record.rejection)),
            "input_tokens_total": sum(record.input_tokens for record in served),
            "input_tokens_max": max((record.input_tokens for record in served), default=0),
            "output_tokens_total": sum(record.output_tokens for record in served),
            "cache_read_tokens_total": sum(record.cache_read for record in served),
            "cache_write_tokens_total": sum(record.cache_write for record in served),
            "log": [dataclasses.asdict(record) for record in self.records],
        }

    def billing(self) -> list[dict[str, Any]]:
        """Every request a provider would bill (answered by the model), with its usage split as a bill splits it."""
        return [
            {
                "request_id": record.request_id,
                "model": record.model,
                "route": record.route,
                "uncached_tokens": record.input_tokens - record.cache_read - record.cache_write,
                "cache_write_tokens": record.cache_write,
                "cache_read_tokens": record.cache_read,
                "output_tokens": record.output_tokens,
            }
            for record in self.records
            if record.status == 200 and record.route != COUNT_TOKENS_ROUTE
        ]

"""Rate limits as the providers apply them: per API key and model class, requests, input tokens and output tokens
per minute, each a token bucket that holds one minute's worth and refills continuously (Anthropic's published
algorithm; OpenAI's limits behave the same way).

- Input tokens count what the request sends uncached: cache reads are left out (Anthropic's current models)
  unless ``count_cache_reads`` says otherwise (other providers); cache writes count.
- Output tokens are taken as ``max_tokens`` when the request is admitted and the unused part is given back when
  the reply is written, as Anthropic estimates them.
- A request is admitted when every bucket holds what it costs, or when a bucket is full (so that a request larger
  than a minute's worth is not refused for ever; the bucket then owes the difference).
- ``second_client_share``: another client of the same key takes this share of every bucket's refill, so that the
  requests seen here get only the rest.

Every response of a limited key carries ``anthropic-ratelimit-{requests,input-tokens,output-tokens}-{limit,
remaining,reset}`` (reset: an RFC 3339 time when the bucket is full again) and OpenAI's ``x-ratelimit-{limit,
remaining,reset}-{requests,tokens}`` (reset: a duration, ``1.5s``); a refused one is a 429 with ``retry-after``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from emulator.config import RateLimitConfig

REQUESTS, INPUT_TOKENS, OUTPUT_TOKENS = "requests", "input-tokens", "output-tokens"
KINDS = (REQUESTS, INPUT_TOKENS, OUTPUT_TOKENS)


def model_class(model: str) -> str:
    """The group of models that share a limit: the name up to its first version number
    (``claude-sonnet-4-5-20250929`` and ``claude-sonnet-4-6`` are both ``claude-sonnet``)."""
    parts = model.split("-")
    for index, part in enumerate(parts):
        if index > 0 and part[:1].isdigit():
            return "-".join(parts[:index])
    return model


@dataclass
class _Bucket:
    capacity: float
    level: float
    updated: float

    def refill(self, now: float, per_second: float) -> None:
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * per_second)
        self.updated = max(self.updated, now)

    def seconds_until(self, amount: float, per_second: float) -> float:
        """How long until the bucket admits ``amount`` (a full bucket admits anything)."""
        target = min(amount, self.capacity)
        return 0.0 if self.level >= target else (target - self.level) / per_second


@dataclass(frozen=True)
class Admission:
    """What one request was charged, or why it was refused."""

    admitted: bool
    retry_after: float = 0.0
    refused_by: str | None = None
    charged: dict[str, float] = field(default_factory=dict)


class RateLimiter:
    def __init__(self, config: RateLimitConfig) -> None:
        self.configure(config)

    def configure(self, config: RateLimitConfig) -> None:
        """Start over with these limits: every bucket full."""
        self.config = config
        self._buckets: dict[tuple[str, str, str], _Bucket] = {}

    @property
    def active(self) -> bool:
        return any(self._per_minute(kind) for kind in KINDS)

    def admit(
        self, *, key: str, model: str, input_tokens: int, cache_read: int, max_tokens: int, now: float
    ) -> Admission:
        """Charge one request to the buckets of ``key`` and ``model``'s class, or refuse it untouched."""
        counted = input_tokens if self.config.count_cache_reads else input_tokens - cache_read
        costs = {REQUESTS: 1.0, INPUT_TOKENS: float(counted), OUTPUT_TOKENS: float(max_tokens)}
        waits = {
            kind: self._bucket(key, model, kind, now).seconds_until(cost, self._rate(kind))
            for kind, cost in costs.items()
            if self._per_minute(kind)
        }
        refused = max(waits, key=lambda kind: waits[kind], default=None)
        if refused is not None and waits[refused] > 0:
            return Admission(admitted=False, retry_after=waits[refused], refused_by=refused)
        for kind in waits:
            self._bucket(key, model, kind, now).level -= costs[kind]
        return Admission(admitted=True, charged={kind: costs[kind] for kind in waits})

    def settle(self, admission: Admission, *, key: str, model: str, output_tokens: int, now: float) -> None:
        """Give back the output tokens a reply did not use of its ``max_tokens``."""
        if OUTPUT_TOKENS in admission.charged:
            bucket = self._bucket(key, model, OUTPUT_TOKENS, now)
            unused = admission.charged[OUTPUT_TOKENS] - output_tokens
            bucket.level = min(bucket.capacity, bucket.level + max(0.0, unused))

    def headers(self, *, key: str, model: str, now: float, retry_after: float | None = None) -> dict[str, str]:
        """Both providers' rate-limit headers for ``key`` and ``model``; ``retry-after`` on a refusal."""
        headers: dict[str, str] = {}
        wall = time.time()
        for kind in KINDS:
            limit = self._per_minute(kind)
            if not limit:
                continue
            bucket = self._bucket(key, model, kind, now)
            remaining = max(0, math.floor(bucket.level))
            full_in = (bucket.capacity - bucket.level) / self._rate(kind)
            reset = datetime.fromtimestamp(wall + full_in, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            headers[f"anthropic-ratelimit-{kind}-limit"] = str(limit)
            headers[f"anthropic-ratelimit-{kind}-remaining"] = str(remaining)
            headers[f"anthropic-ratelimit-{kind}-reset"] = reset
            if kind != OUTPUT_TOKENS:  # OpenAI names the input-token limit "tokens"
                name = "requests" if kind == REQUESTS else "tokens"
                headers[f"x-ratelimit-limit-{name}"] = str(limit)
                headers[f"x-ratelimit-remaining-{name}"] = str(remaining)
                headers[f"x-ratelimit-reset-{name}"] = f"{full_in:.3f}s"
        if retry_after is not None:
            headers["retry-after"] = str(max(1, math.ceil(retry_after)))  # whole seconds, as Anthropic sends
        return headers

    def refusal_message(self, admission: Admission) -> str:
        kind = admission.refused_by or REQUESTS
        return (
            f"This request would exceed the rate limit for your organization of {self._per_minute(kind):,} "
            f"{kind.replace('-', ' ')} per minute (emulated). Please reduce the prompt length or the maximum "
            "tokens requested, or try again later."
        )

    def _per_minute(self, kind: str) -> int:
        return {
            REQUESTS: self.config.requests_per_minute,
            INPUT_TOKENS: self.config.input_tokens_per_minute,
            OUTPUT_TOKENS: self.config.output_tokens_per_minute,
        }[kind]

    def _rate(self, kind: str) -> float:
        """What the bucket refills per second for the requests seen here (the second client takes its share)."""
        return self._per_minute(kind) / 60.0 * (1.0 - self.config.second_client_share)

    def _bucket(self, key: str, model: str, kind: str, now: float) -> _Bucket:
        name = (key, model_class(model), kind)
        bucket = self._buckets.get(name)
        if bucket is None:
            capacity = float(self._per_minute(kind))
            bucket = self._buckets[name] = _Bucket(capacity=capacity, level=capacity, updated=now)
        bucket.refill(now, self._rate(kind))
        return bucket

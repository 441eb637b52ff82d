"""Requests per minute per API key, counted in the Redis the whole service shares, so that every API process and
machine counts the same requests. Over the limit, a 429 with Retry-After; with no Redis (the embedded service),
no limit.

The counting is the ``limits`` library's (the one behind Flask-Limiter and SlowAPI): a moving window kept by one
Lua script per hit, atomic in Redis, so two API processes cannot both take the last request of a minute, and
exact (a fixed window would let twice the limit through around the turn of a minute)."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from functools import cache

from fastapi import HTTPException, status
from limits import RateLimitItemPerMinute
from limits.errors import StorageError
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter

from models.settings import Settings

logger = logging.getLogger(__name__)

KEY_PREFIX = "plimsoll:api-requests"


@dataclass(frozen=True)
class KeyRateLimit:
    per_minute: int
    limiter: MovingWindowRateLimiter

    def hit(self, key_hash: str) -> None:
        """Count a request of the key (by its hash: the key itself never leaves the API); HTTPException 429 if the
        key has made ``per_minute`` requests in the last minute. A Redis that does not answer lets it through."""
        item = RateLimitItemPerMinute(self.per_minute)
        try:
            if self.limiter.hit(item, key_hash):
                return
            reset_at = self.limiter.get_window_stats(item, key_hash).reset_time
        except StorageError as error:
            logger.warning(
                "requests per key not counted: Redis did not answer (%s)", type(error.storage_error).__name__
            )
            return
        wait = max(1, math.ceil(reset_at - time.time()))
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"this API key has made {self.per_minute:,} requests in the last minute, its limit (the operator's "
            f"setting PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY): try again in {wait} s",
            headers={"Retry-After": str(wait)},
        )


def rate_limit_of(settings: Settings) -> KeyRateLimit | None:
    """The limit the settings give: None when it is 0, or there is no shared Redis (the in-process queue without
    PLIMSOLL_LIMITER_URL)."""
    url = settings.shared_redis_url() if settings.queue == "celery" else settings.limiter_url
    if not url or settings.requests_per_minute_per_key == 0:
        return None
    return _rate_limit(url, settings.requests_per_minute_per_key)


_making = threading.Lock()


@cache
def _rate_limit(url: str, per_minute: int) -> KeyRateLimit:
    # Made once per address: its connection pool is shared by the API's threads. One thread at a time: limits
    # imports redis lazily, and a second thread reading the half-imported module finds no version ("0.0.0") and
    # fails the first requests of a fresh API process that arrive together.
    with _making:
        storage = RedisStorage(
            url, key_prefix=KEY_PREFIX, wrap_exceptions=True, socket_timeout=2.0, socket_connect_timeout=2.0
        )
        return KeyRateLimit(per_minute, MovingWindowRateLimiter(storage))

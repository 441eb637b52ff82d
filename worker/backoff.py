"""How long a retry waits: exponential backoff with full jitter, and the wait of a step a rate limit refused.

Apart from the routing of failures (worker/routing.py) so that what needs only the waits (the API's outage
handling) does not load the model SDKs that the failures are told apart by.
"""

from __future__ import annotations

import random

BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0

# Drawn from os.urandom, so every process (each forked pool child too) jitters differently.
JITTER: random.Random = random.SystemRandom()


def backoff_delay(attempt: int, retry_after: float | None, rng: random.Random) -> float:
    """Exponential backoff with full jitter (a uniform draw up to base * 2^(attempt-1), capped), but never
    sooner than the provider's retry-after."""
    doublings = min(attempt - 1, 32)  # the cap is reached long before; this keeps the power a float
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2.0**doublings)
    jittered = rng.uniform(0.0, ceiling)
    return max(jittered, retry_after) if retry_after is not None else jittered


def rate_limit_delay(retry_after: float | None, waited_seconds: float, rng: random.Random) -> float:
    """How long a step refused by a rate limit waits: at least ``retry-after`` (without one, about as long as
    it has waited so far, between 1 s and the backoff cap), plus up to as much again drawn in this process, so
    that steps refused together do not all come back together."""
    if retry_after is not None:
        base = retry_after
    else:
        base = min(BACKOFF_CAP_SECONDS, max(BACKOFF_BASE_SECONDS, waited_seconds))
    return base + rng.uniform(0.0, max(BACKOFF_BASE_SECONDS, base))

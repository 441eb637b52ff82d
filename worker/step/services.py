"""What a step needs from the outside world (worker/services.py builds it from the settings)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
import sentry_sdk
from sqlalchemy.orm import Session

from models.budgets import Budgets
from models.db import Database
from models.settings import Settings
from models.tables import Job
from worker.admission import Limiter
from worker.outages import surviving_outages
from worker.providers.base import Provider
from worker.stored_history import HistoryCache

T = TypeVar("T")
Enqueue = Callable[[int, int | None, float | None], None]  # (job id, step or None for the current one, delay)


@dataclass
class Services:
    """What a step needs from the outside world."""

    database: Database
    settings: Settings
    provider_for: Callable[[Job], Provider]
    enqueue: Enqueue
    report: Callable[[BaseException], Any] = sentry_sdk.capture_exception
    limiter: Limiter | None = None  # admission under the provider's rate limits (None: send at once)
    budgets: Budgets | None = None  # the shared money budgets (None: no shared Redis, budgets not enforced)
    histories: HistoryCache = field(default_factory=HistoryCache)  # what this process read of the jobs' histories
    redis: redis.Redis | None = None  # the Redis every worker shares (None: none), which keeps charges through outages


def store_surviving_outages(services: Services, work: Callable[[Session], T]) -> T:
    """Run ``work`` in a transaction, waiting out a database outage for ``store_retry_seconds``."""
    return surviving_outages(services.database, work, seconds=services.settings.store_retry_seconds)

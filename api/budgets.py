"""The tenants' budgets in money as the API sees them: a new job of a tenant whose day's or month's budget is spent
is refused (429 with Retry-After: when the budget resets), reading the budgets the workers share."""

from __future__ import annotations

from functools import cache, partial

import redis
from sqlalchemy.orm import Session

from models.budgets import Budgets, namespace_of, refuse_when_spent, spent_in_ledger
from models.settings import get_settings
from models.tables import Job


def check_budgets(session: Session, job: Job) -> None:
    settings = get_settings()
    url = settings.shared_redis_url() if settings.queue == "celery" else settings.limiter_url
    shared = None
    if url:
        shared = Budgets(_client(url), namespace_of(session), partial(spent_in_ledger, session))
    refuse_when_spent(session, job, settings, shared)


@cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)

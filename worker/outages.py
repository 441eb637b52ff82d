"""Database outages: told apart from bugs, and survived where a paid-for reply is at stake.

A step meets the database three times (claim, store, hand-off). An outage at the claim costs nothing: the
delivery is retried with backoff (worker/tasks.py) and the reconciler takes over if that runs out. An outage
while storing a reply is different: the reply was paid for, so the step keeps it in memory and tries to store it
again until the database is back or ``store_retry_seconds`` have passed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TypeVar

import redis
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_before_delay

from models.db import Database
from models.settings import Settings
from worker.backoff import JITTER, backoff_delay
from worker.names import OUTAGE_KEY

logger = logging.getLogger(__name__)
T = TypeVar("T")


class DatabaseUnavailable(Exception):
    """The database could not be reached. Carries only the driver error's class name: its text may hold the
    statement's parameters, i.e. user text, which must not reach logs or Sentry."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"the database is unavailable ({type(error).__name__})")


OUTAGE_KEY_SECONDS = 24 * 3600  # an outage nobody saw end is taken as over after this long


def gives_up_on_outage(tries: int, seconds_since_first: float, settings: Settings) -> bool:
    """Whether a delivery stops retrying through a database outage: only once it has tried
    ``max_transient_retries`` times and the outage has lasted ``store_retry_seconds`` since it first met it. A
    short outage (a restart, a failover) is waited out and reported to nobody, however the backoff's jitter falls."""
    return tries > settings.max_transient_retries and seconds_since_first >= settings.store_retry_seconds


def first_report_of_outage(client: redis.Redis | None) -> bool:
    """Whether this is the first delivery to give up on the current database outage (the one that reports it to
    Sentry). Without a shared Redis, every delivery reports."""
    if client is None:
        return True
    try:
        return bool(client.set(OUTAGE_KEY, "1", nx=True, ex=OUTAGE_KEY_SECONDS))
    except redis.RedisError:
        return True


def outage_over(client: redis.Redis | None) -> None:
    """The database answered again: the next outage is a new one, reported again."""
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            client.delete(OUTAGE_KEY)


def is_outage(error: BaseException) -> bool:
    """Whether ``error`` says the database could not be reached (rather than that a statement was wrong)."""
    if isinstance(error, OperationalError | InterfaceError):
        return True
    return isinstance(error, DBAPIError) and bool(error.connection_invalidated)


def in_transaction(database: Database, work: Callable[..., T]) -> T:
    """``work(session)`` in one transaction; an outage becomes ``DatabaseUnavailable`` (without the cause)."""
    try:
        with database.session() as session:
            return work(session)
    except Exception as error:
        if is_outage(error):
            raise DatabaseUnavailable(error) from None
        raise


def backoff_wait(retry_state: RetryCallState) -> float:
    """tenacity's wait after a failed try: the worker's one backoff (``worker.backoff.backoff_delay``), the same
    as Celery's countdown between deliveries."""
    return backoff_delay(retry_state.attempt_number, None, JITTER)


def surviving_outages(database: Database, work: Callable[..., T], *, seconds: float) -> T:
    """``work(session)`` in one transaction, tried again with backoff through an outage of up to ``seconds``: a
    wait that would end past them is not begun, and the outage is raised instead."""
    retrying = Retrying(
        retry=retry_if_exception_type(DatabaseUnavailable),
        wait=backoff_wait,
        stop=stop_before_delay(seconds),
        before_sleep=_log_store_wait,
        reraise=True,
    )
    result: T = retrying(in_transaction, database, work)
    return result


def _log_store_wait(retry_state: RetryCallState) -> None:
    delay = retry_state.upcoming_sleep
    logger.warning("storing a step waits %.1f s for the database (try %d)", delay, retry_state.attempt_number)

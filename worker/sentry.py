"""Sentry for the worker, with a second guard against reporting too-long rejections.

The routing table already keeps TooLong away from Sentry; ``before_send`` drops any event that carries one
anyway (raised as TooLong, or as a raw provider error that classifies as too long), because a too-long
request is a limit of the model, not a bug anyone on call can fix.
"""

from __future__ import annotations

from typing import Any

import sentry_sdk
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.transport import Transport
from sentry_sdk.types import Event, Hint

from worker.errors import TooLong, classify


def init_sentry(dsn: str | None, *, environment: str | None = None, transport: object | None = None) -> bool:
    """Start Sentry reporting. Without a DSN and without a transport it stays off and returns False.
    ``transport`` (a ``sentry_sdk.transport.Transport`` instance) replaces the network, e.g. in tests."""
    if not dsn and transport is None:
        return False
    if transport is not None and not isinstance(transport, Transport):
        raise TypeError(f"transport must be a sentry_sdk.transport.Transport, not {type(transport).__name__}")
    options: dict[str, Any] = {}
    if transport is not None:
        options["transport"] = transport
    sentry_sdk.init(
        dsn=dsn or None,
        environment=environment,
        integrations=[CeleryIntegration()],
        before_send=drop_too_long,
        **options,
    )
    return True


def drop_too_long(event: Event, hint: Hint) -> Event | None:
    """The ``before_send`` hook: None (drop) for an event about a too-long rejection, else the event."""
    exc_info = hint.get("exc_info")
    if exc_info is None:
        return event
    exception = exc_info[1]
    if isinstance(exception, BaseException) and is_too_long(exception):
        return None
    return event


def is_too_long(exception: BaseException) -> bool:
    if isinstance(exception, TooLong):
        return True
    if not isinstance(exception, Exception):
        return False
    return isinstance(classify(exception, provider="unknown"), TooLong)

"""Sentry for the service (the Celery worker, the API, the embedded worker): our bugs and the failures the worker
decides to report, never the user's text.

What an event may carry, and why:

- The exception types and a stack trace of file, function and line. No local variables (they hold system
  prompts, instructions and documents), no source lines, no request bodies, no personal data.
- The message of the worker's own provider errors (``worker.errors``): the provider's words for what was wrong
  with a request, which on-call needs. Any other exception's message is removed: a database error quotes the
  values it was given (message contents), a ``KeyError`` its key (a document name); and so is any quote of it in
  one of our messages (``classify`` names an unexpected error as ``"KeyError: 'chapter-01.txt'"``).
- Log lines are breadcrumbs only, as their format string without arguments; they never become events.
- No ``extra`` (the Celery integration puts task arguments there), ``request`` or ``user``.

The SDK's auto-enabling integrations are off: the Anthropic and OpenAI ones report every failed call, including
the transient faults the worker retries, and the HTTP and database ones add breadcrumbs carrying URLs and SQL.
Only Celery's is added back, in the Celery worker, so that a task that dies outside ``run_step`` is still reported.
The API reports what its handler of unexpected errors catches (``api/errors.py``), the embedded worker a step
that raised (``worker/inprocess.py``); both start Sentry with ``start_sentry``.

``before_send`` also drops any event that carries a too-long rejection (raised as TooLong, or as a raw provider
error that classifies as too long): a too-long request is a limit of the model, not a bug anyone on call can fix.
And it drops ``JobFailed``, which the step task raises only so that Flower shows a failed job's last step as a
FAILURE: the step itself has already reported the job's failure if it deserved a report.
"""

from __future__ import annotations

import logging
from typing import Any

import sentry_sdk
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.integrations.logging import LoggingIntegration
from sentry_sdk.transport import Transport
from sentry_sdk.types import Breadcrumb, BreadcrumbHint, Event, Hint

from models.settings import get_settings
from worker.errors import JobFailed, TooLong, classify

OWN_ERRORS_MODULE = "worker.errors"
MAX_MESSAGE_CHARS = 500
REMOVED = "(message removed: it may quote user text)"
FRAME_TEXT = ("vars", "pre_context", "context_line", "post_context")


def start_sentry() -> bool:
    """Sentry as the settings say (``PLIMSOLL_SENTRY_DSN``, ``PLIMSOLL_SENTRY_ENVIRONMENT``), for the API and the
    embedded worker; off without a DSN. A process already reporting to that DSN keeps its client."""
    settings = get_settings()
    if not settings.sentry_dsn:
        return False
    client = sentry_sdk.get_client()
    if client.is_active() and client.dsn == settings.sentry_dsn:
        return True
    return init_sentry(settings.sentry_dsn, environment=settings.sentry_environment, celery=False)


def init_sentry(
    dsn: str | None, *, environment: str | None = None, transport: object | None = None, celery: bool = True
) -> bool:
    """Start Sentry reporting. Without a DSN and without a transport it stays off and returns False.
    ``transport`` (a ``sentry_sdk.transport.Transport`` instance) replaces the network, e.g. in tests; ``celery``
    adds the Celery integration (a Celery worker's process)."""
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
        auto_enabling_integrations=False,
        integrations=[
            *([CeleryIntegration()] if celery else []),
            LoggingIntegration(level=logging.INFO, event_level=None, sentry_logs_level=None),
        ],
        # send_default_pii is left unset, which is off: sentry-sdk 2.75 warns that it is deprecated, and derives
        # its data_collection settings from it (unset: no personal data) and from the two options below.
        include_local_variables=False,
        include_source_context=False,
        max_request_body_size="never",
        before_send=before_send,
        before_breadcrumb=before_breadcrumb,
        **options,
    )
    return True


def before_send(event: Event, hint: Hint) -> Event | None:
    """The ``before_send`` hook: None (drop) for a too-long rejection or a JobFailed, else the event without user
    text."""
    exc_info = hint.get("exc_info")
    if exc_info is not None and isinstance(exc_info[1], JobFailed):
        return None
    if drop_too_long(event, hint) is None:
        return None
    return scrub(event)


def drop_too_long(event: Event, hint: Hint) -> Event | None:
    """None (drop) for an event about a too-long rejection, else the event."""
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


def scrub(event: Event) -> Event:
    """``event`` with everything removed that could carry a prompt, an instruction or a document."""
    for key in ("extra", "request", "user", "message"):
        event.pop(key, None)  # type: ignore[misc]
    logentry = event.get("logentry")
    if isinstance(logentry, dict):
        event["logentry"] = {"message": str(logentry.get("message", ""))}
    values = event.get("exception", {}).get("values", [])
    # An own error may quote the error it was made from ("KeyError: 'chapter-01.txt'"): that part goes too.
    foreign = [v["value"] for v in values if v.get("module") != OWN_ERRORS_MODULE and v.get("value")]
    for value in values:
        if value.get("module") != OWN_ERRORS_MODULE:
            value["value"] = REMOVED
        elif isinstance(value.get("value"), str):
            for text in foreign:
                value["value"] = value["value"].replace(text, REMOVED)
            value["value"] = value["value"][:MAX_MESSAGE_CHARS]
        for frame in value.get("stacktrace", {}).get("frames", []):
            for key in FRAME_TEXT:
                frame.pop(key, None)
    for thread in event.get("threads", {}).get("values", []):
        for frame in thread.get("stacktrace", {}).get("frames", []):
            for key in FRAME_TEXT:
                frame.pop(key, None)
    breadcrumbs = event.get("breadcrumbs", {})
    for crumb in breadcrumbs.get("values", []) if isinstance(breadcrumbs, dict) else []:
        crumb.pop("data", None)
    return event


def before_breadcrumb(crumb: Breadcrumb, hint: BreadcrumbHint) -> Breadcrumb | None:
    """A log line's breadcrumb keeps its format string, not the arguments formatted into it."""
    record = hint.get("log_record")
    if isinstance(record, logging.LogRecord):
        crumb["message"] = str(record.msg)
    crumb.pop("data", None)
    return crumb

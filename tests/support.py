"""What tests share for waiting: one polling helper, so that a test waits for the event it needs, never for a
fixed time."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
POLL_SECONDS = 0.05
# The environment of the default routing (models/endpoints.py): what the suite's fixtures set to run every model on
# the session's emulator (tests/fixtures_emulator.py, tests/fixtures_worker.py), taken away.
DEFAULT_ROUTING: dict[str, str | None] = {
    "PLIMSOLL_REAL_MODELS_ON_EMULATOR": None,
    **{f"{prefix}{provider}_{what}": None for prefix in ("PLIMSOLL_", "") for provider in ("ANTHROPIC", "OPENAI")
       for what in ("API_KEY", "BASE_URL")},
}  # fmt: skip


def wait_until(
    condition: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    ignoring: tuple[type[Exception], ...] = (),
    every: float = POLL_SECONDS,
) -> T:
    """Call ``condition`` until it returns a true value, and return that value; fail saying ``what`` did not
    happen if ``timeout`` seconds pass first. Exceptions of the types ``ignoring`` count as "not yet" (a server
    that does not answer while it starts)."""
    deadline = time.monotonic() + timeout
    while True:
        value: T | None = None
        with contextlib.suppress(*ignoring):
            value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(every)  # the poll interval: the one sleep that stands between checks of a condition


def sentry_off() -> None:
    """A Sentry client that sends nothing and hooks nothing: a plain ``sentry_sdk.init()`` enables every
    integration it can, and Starlette's then reports, process-wide, the connections the emulator drops on purpose
    for other tests."""
    import sentry_sdk

    sentry_sdk.init(default_integrations=False, auto_enabling_integrations=False)

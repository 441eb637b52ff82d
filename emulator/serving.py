"""What both model routes do before the model speaks: read the body, wait, pick a fault, drop a connection."""

from __future__ import annotations

import asyncio
import json
import logging
import math

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from emulator.state import EmulatorState

LATENCY_HEADER = "x-emulator-latency"
ANXIOUS_HEADER = "x-emulator-anxious"


class InvalidBody(ValueError):
    """The body is not JSON."""


class ConnectionDropped(Exception):
    """Raised on purpose after the response has started, so the server closes the connection mid-reply."""


class DroppedConnectionResponse(Response):
    """Starts a 200 reply, sends part of it, then breaks off: the client sees the connection drop."""

    def __init__(self) -> None:
        super().__init__(status_code=200)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"id":"', "more_body": True})
        raise ConnectionDropped("the emulator dropped this connection on purpose")


class _HideDroppedConnections(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ConnectionDropped))


def hide_dropped_connections_from_server_log() -> None:
    """The server logs an exception that ends a response; a drop we made on purpose is not worth a traceback."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(existing, _HideDroppedConnections) for existing in logger.filters):
        logger.addFilter(_HideDroppedConnections())


async def read_json(request: Request) -> object:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidBody(str(exc)) from exc


async def pause(request: Request, state: EmulatorState) -> None:
    """The configured latency plus any asked for in the request header."""
    delay = state.config.latency_seconds
    header = request.headers.get(LATENCY_HEADER)
    if header is not None:
        try:
            extra = float(header)
        except ValueError:
            extra = 0.0
        if math.isfinite(extra) and extra > 0:
            delay += extra
    if delay > 0:
        await asyncio.sleep(delay)


async def hang(state: EmulatorState) -> Response:
    """A request the server takes and never answers: nothing is sent for the fault's ``hang_seconds``, then the
    connection is dropped (a client with a read timeout has given up long before)."""
    await asyncio.sleep(state.config.faults.hang_seconds)
    return DroppedConnectionResponse()


def is_anxious(request: Request, state: EmulatorState) -> bool:
    header = request.headers.get(ANXIOUS_HEADER)
    if header is not None:
        return header.strip().lower() in ("1", "true", "yes")
    return state.config.anxious


def bearer_token(request: Request) -> str | None:
    authorization = request.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def api_key_of(request: Request) -> str:
    """The key a model request was sent with (rate limits are per key)."""
    return request.headers.get("x-api-key") or bearer_token(request) or "anonymous"


def retry_after_value(seconds: float) -> str:
    return f"{seconds:g}"

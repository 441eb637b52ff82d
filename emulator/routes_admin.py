"""The admin API, so one running emulator can serve many tests and benchmark runs.

- ``GET /v1/emulator/stats``: requests, rejections by kind, token totals, and a log of every request.
- ``GET /v1/emulator/billing``: the billing log, every request the model answered (what a provider bills): its
  request id, model and usage.
- ``GET /v1/emulator/config``: the settings in force.
- ``POST /v1/emulator/config``: change settings, e.g. ``{"limit": 5000, "anxious": true,
  "faults": {"script": ["429", "429"]}, "rate_limits": {"input_tokens_per_minute": 1800000}}``.
- ``POST /v1/emulator/reset``: forget stats, cache and clock offset, and go back to the starting settings
  (``{"keep_config": true}`` keeps the current ones).
- ``POST /v1/emulator/clock``: ``{"advance_seconds": 301}`` moves the cache clock, to test expiry.

When the emulator has an ``api_key``, every admin route wants it too, in either header the model routes accept
(``x-api-key`` or ``Authorization: Bearer``): otherwise anyone who can reach the port could change the key.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from functools import wraps

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from emulator.config import ConfigError
from emulator.serving import InvalidBody, bearer_token, read_json
from emulator.state import EmulatorState

Handler = Callable[[Request], Awaitable[Response]]


def admin(handler: Handler) -> Handler:
    """``handler``, answering 401 first when the emulator has a key and the request does not carry it."""

    @wraps(handler)
    async def checked(request: Request) -> Response:
        expected = _state(request).config.api_key
        if expected is not None and expected not in (request.headers.get("x-api-key"), bearer_token(request)):
            body = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
            return JSONResponse(body, status_code=401)
        return await handler(request)

    return checked


@admin
async def get_stats(request: Request) -> Response:
    return JSONResponse(_state(request).stats.as_dict())


@admin
async def get_billing(request: Request) -> Response:
    return JSONResponse({"requests": _state(request).stats.billing()})


@admin
async def get_config(request: Request) -> Response:
    return JSONResponse(_state(request).config.as_dict())


@admin
async def post_config(request: Request) -> Response:
    try:
        changes = await read_json(request)
        if not isinstance(changes, dict):
            raise ConfigError("the body must be a JSON object of settings")
        config = _state(request).configure(changes)
    except (InvalidBody, ConfigError) as exc:
        return _bad_request(str(exc))
    return JSONResponse(config.as_dict())


@admin
async def post_reset(request: Request) -> Response:
    try:
        options = await read_json(request) if await request.body() else {}
    except InvalidBody as exc:
        return _bad_request(str(exc))
    if not isinstance(options, dict) or not isinstance(options.get("keep_config", False), bool):
        return _bad_request('the body must be empty or {"keep_config": true|false}')
    _state(request).reset(keep_config=options.get("keep_config", False))
    return JSONResponse({"reset": True})


@admin
async def post_clock(request: Request) -> Response:
    try:
        body = await read_json(request)
    except InvalidBody as exc:
        return _bad_request(str(exc))
    seconds = body.get("advance_seconds") if isinstance(body, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0:
        return _bad_request('the body must be {"advance_seconds": <number >= 0>}')
    state = _state(request)
    state.advance_clock(float(seconds))
    return JSONResponse({"clock_offset_seconds": state.clock_offset})


def _state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


def _bad_request(message: str) -> Response:
    return JSONResponse({"error": {"type": "invalid_request_error", "message": message}}, status_code=400)

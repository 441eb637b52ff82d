"""Every error answers ``{"detail": "..."}``: the data functions' errors, malformed requests, and the unexpected."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sentry_sdk
from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException

from api.schemas import ErrorBody, problem_text
from models.budgets import OverBudget
from models.errors import HistoryPurged, InvalidInput, NotFound
from models.limits import OverQuota
from worker.outages import is_outage
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)

BUSY_RETRY_SECONDS = 2
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status.HTTP_401_UNAUTHORIZED: {"model": ErrorBody, "description": "no API key, or an unknown or revoked one"},
    status.HTTP_404_NOT_FOUND: {"model": ErrorBody, "description": "no such object for this tenant"},
    status.HTTP_413_CONTENT_TOO_LARGE: {
        "model": ErrorBody,
        "description": "the body is larger than the upload limit (room for one document of the largest size)",
    },
    status.HTTP_422_UNPROCESSABLE_CONTENT: {"model": ErrorBody, "description": "the input is not acceptable"},
    status.HTTP_503_SERVICE_UNAVAILABLE: {
        "model": ErrorBody,
        "description": "the database is busy or unreachable: try again after Retry-After",
    },
    status.HTTP_429_TOO_MANY_REQUESTS: {
        "model": ErrorBody,
        "description": "over the key's requests per minute (Retry-After says when to try again), or over one of the "
        "tenant's quotas (queued jobs, stored document bytes: the detail says which and what to do)",
    },
}


class ErrorResponse(JSONResponse):
    """JSON in ASCII: a malformed request's errors quote its input, which may hold a lone surrogate (JSON's
    ``"\\ud800"``) that UTF-8 cannot encode; escaped, it goes back as it came."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error(status_code: int, detail: str, errors: list[dict[str, Any]] | None = None) -> JSONResponse:
    return ErrorResponse(ErrorBody(detail=detail, errors=errors).model_dump(exclude_none=True), status_code)


async def invalid_input(_request: Request, exc: Exception) -> JSONResponse:
    return error(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc))


async def over_quota(_request: Request, exc: Exception) -> JSONResponse:
    answer = error(status.HTTP_429_TOO_MANY_REQUESTS, str(exc))
    if isinstance(exc, OverBudget):  # when the spent budget resets
        answer.headers["Retry-After"] = str(max(1, math.ceil((exc.resets_at - datetime.now(UTC)).total_seconds())))
    return answer


async def not_found(_request: Request, exc: Exception) -> JSONResponse:
    return error(status.HTTP_404_NOT_FOUND, str(exc))


async def history_purged(_request: Request, exc: Exception) -> JSONResponse:
    return error(status.HTTP_410_GONE, str(exc))


async def malformed_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = exc.errors()
    if any(p.get("loc", ("",))[0] == "path" for p in problems) and (named := _literal_methods(request)):
        # GET /v1/jobs/check is not job "check": the path names a route of its own, for other methods.
        return not_allowed(request, named)
    broken = next((p for p in problems if p.get("type") == "json_invalid"), None)
    if broken is not None:
        return error(status.HTTP_422_UNPROCESSABLE_CONTENT, not_json(exc.body, broken))
    if any(tuple(p.get("loc", ())) == ("body",) and p.get("type") == "model_attributes_type" for p in problems):
        return error(status.HTTP_422_UNPROCESSABLE_CONTENT, not_an_object(request, exc.body))
    problems = [{**p, "msg": problem_text(p)} for p in problems]
    detail = "; ".join(f"{_where(p.get('loc', ()))}: {p['msg']}" for p in problems)
    return error(
        status.HTTP_422_UNPROCESSABLE_CONTENT, detail or "invalid request", _finite(jsonable_encoder(problems))
    )


def not_an_object(request: Request, body: object) -> str:
    """A body that is not a JSON object where one is expected: most often a form (curl's ``-d`` without
    ``-H 'Content-Type: application/json'``), which FastAPI does not read as JSON at all."""
    sent = request.headers.get("content-type", "")
    if not _is_json(sent):
        came = f"it came as {sent.split(';')[0]}" if sent else "it came without a Content-Type"
        return f"the body must be a JSON object, sent with Content-Type: application/json; {came}"
    return f"the body must be a JSON object; it is a JSON {JSON_TYPES.get(type(body), 'value')}"


JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _is_json(content_type: str) -> bool:
    """The media types FastAPI parses as JSON: application/json and application/*+json."""
    kind = content_type.split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _finite(value: Any) -> Any:
    """The problems as JSON can carry them: a number JSON cannot write (NaN, Infinity, or 1e999999, which
    Python reads as infinity) quoted as it was read, instead of failing the answer."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_finite(each) for each in value]
    if isinstance(value, dict):
        return {key: _finite(each) for key, each in value.items()}
    return value


def unreadable_body(exc: BaseException) -> str | None:
    """Why a body could not be read as JSON although its syntax was never looked at, or None: bytes that are
    not UTF-8, or nesting deeper than the parser goes."""
    if isinstance(exc, UnicodeDecodeError):
        return f"the body is not UTF-8: byte 0x{exc.object[exc.start]:02x} at offset {exc.start:,} ({exc.reason})"
    if isinstance(exc, RecursionError):
        return "the body is not acceptable JSON: it is nested too deeply"
    return None


async def http_error(request: Request, exc: Exception) -> Any:
    """FastAPI's and Starlette's own refusals, said plainly: a body FastAPI could not parse is a 422 naming why
    (not a bare 400); a 405 lists in ``Allow`` every method of the path, not only those of one route."""
    assert isinstance(exc, HTTPException)
    reason = unreadable_body(exc.__cause__) if exc.__cause__ is not None else None
    if exc.status_code == status.HTTP_400_BAD_REQUEST and reason is not None:
        return error(status.HTTP_422_UNPROCESSABLE_CONTENT, reason)
    if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
        return not_allowed(request, _literal_methods(request) or _methods(request, literal=False))
    return await http_exception_handler(request, exc)


def not_allowed(request: Request, allowed: set[str]) -> JSONResponse:
    methods = ", ".join(sorted(allowed))
    answer = error(status.HTTP_405_METHOD_NOT_ALLOWED, f"{request.method} is not allowed here; allowed: {methods}")
    answer.headers["Allow"] = methods
    return answer


def _literal_methods(request: Request) -> set[str]:
    return _methods(request, literal=True)


def _methods(request: Request, *, literal: bool) -> set[str]:
    """The methods the API's OpenAPI document gives the request's path (only paths without parameters, if
    ``literal``)."""
    methods: set[str] = set()
    for template, operations in request.app.openapi()["paths"].items():
        if literal and "{" in template:
            continue
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), request.url.path):
            methods |= {method.upper() for method in operations}
    return methods


def not_json(body: object, error: json.JSONDecodeError | dict[str, Any]) -> str:
    """One message for a body that is not JSON, on every route: what is wrong and where (line and column).
    ``error`` is the parser's exception, or FastAPI's ``json_invalid`` problem (its reason and character)."""
    if isinstance(error, json.JSONDecodeError):
        reason, text, position = error.msg, error.doc, error.pos
    else:
        reason = str((error.get("ctx") or {}).get("error") or "invalid JSON")
        location = error.get("loc") or ()
        position = location[-1] if location and isinstance(location[-1], int) else -1
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    if position < 0:
        return f"the body is not valid JSON: {reason.lower()}"
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return f"the body is not valid JSON: {reason.lower()} at line {line} column {column}"


async def unexpected(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, PoolTimeout) or is_outage(exc):
        return busy(request, exc)
    # Where it was raised, not what it said nor the source lines: a database error quotes the values it was given
    # (a document, an instruction), and log lines carry no user text.
    logger.error("unhandled error in %s %s: %s", request.method, request.url.path, scrubbed_traceback(exc))
    sentry_sdk.capture_exception(exc)  # scrubbed by worker.sentry's before_send; nothing without a DSN
    return error(status.HTTP_500_INTERNAL_SERVER_ERROR, "internal error; it has been logged")


async def database_busy(request: Request, exc: Exception) -> JSONResponse:
    return busy(request, exc)


def busy(request: Request, exc: Exception) -> JSONResponse:
    """No database connection came free in time (more requests at once than the pool serves), or the database
    cannot be reached: a 503 the client tries again after ``Retry-After``, not a 500. A database out of reach is a
    failure Sentry hears of (it groups them); a busy pool is load, and is only logged."""
    if not isinstance(exc, PoolTimeout):
        sentry_sdk.capture_exception(exc)  # scrubbed by worker.sentry's before_send; nothing without a DSN
    logger.warning(
        "%s %s: the database is busy or unreachable (%s)", request.method, request.url.path, type(exc).__name__
    )
    answer = error(status.HTTP_503_SERVICE_UNAVAILABLE, "the service is busy or its database is unreachable; try again")
    answer.headers["Retry-After"] = str(BUSY_RETRY_SECONDS)
    return answer


def _where(location: Sequence[Any]) -> str:
    """``("body", "budget")`` as ``budget``; ``("query", "limit")`` as ``limit (query)``."""
    source, *path = location or ("request",)
    if not path:
        return str(source)
    field = ".".join(str(part) for part in path)
    return field if source == "body" else f"{field} ({source})"


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(InvalidInput, invalid_input)
    app.add_exception_handler(NotFound, not_found)
    app.add_exception_handler(HistoryPurged, history_purged)
    app.add_exception_handler(OverQuota, over_quota)
    app.add_exception_handler(RequestValidationError, malformed_request)
    app.add_exception_handler(HTTPException, http_error)
    # Handled inside the app, so that the server does not log the error again as unhandled (an outage is expected).
    for database_gone in (PoolTimeout, OperationalError, InterfaceError):
        app.add_exception_handler(database_gone, database_busy)
    app.add_exception_handler(Exception, unexpected)

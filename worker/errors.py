"""Every way a model provider can fail, sorted into the four kinds the worker acts on.

- ``TooLong``: the request does not fit the model's context. Retrying sends the same request and gets the
  same answer, so it never is; the person gets a notice instead.
- ``Transient``: rate limits, overload, server errors, timeouts, dropped connections. Worth a retry.
  ``RateLimited``, the provider's rate limit (a 429), is the kind of Transient that is a wait, not a fault;
  ``Unreachable`` (the host's name does not resolve, the connection is refused or times out, TLS or a proxy
  fails) is the kind the person can act on, so it names the host.
- ``InvalidRequest``: the provider refused something we sent. Our bug.
- ``AuthFailure``: the key is wrong or lacks permission. A configuration problem, also not retried.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any

import httpx
import httpx2

from worker.rate_limits import Budget, stated_limits


class JobFailed(Exception):
    """Raised by the step task after a step that failed its job has committed, so that the task is a FAILURE in
    Flower. Nothing is left to do: Celery does not retry it, Sentry does not report it (the job's one event, if it
    deserves one, was sent by the step), and its message names the job, the step, the stage and why the job
    failed (the job's error, Plimsoll's own words or the provider's: never the person's text)."""

    def __init__(self, job_id: int, step: int, stage: str | None, reason: str | None = None) -> None:
        where = f"job {job_id} failed at step {step}" + (f" (stage {stage})" if stage else "")
        super().__init__(f"{where}: {reason}" if reason else where)
        self.job_id, self.step, self.stage, self.reason = job_id, step, stage, reason

    def __reduce__(self) -> tuple[type[JobFailed], tuple[int, int, str | None, str | None]]:
        # Celery pickles a task's exception (from a pool process to the worker, and for its events)
        return (JobFailed, (self.job_id, self.step, self.stage, self.reason))


class ProviderError(Exception):
    def __init__(self, message: str, *, status: int | None = None, provider: str) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.provider = provider

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r}, provider={self.provider!r})"


class TooLong(ProviderError):
    """The model rejected the request as longer than its context window. Most providers say how long it was
    (``tokens``, the request's real input size) and what the window is (``limit``): a measurement."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        provider: str,
        tokens: int | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(message, status=status, provider=provider)
        self.tokens, self.limit = tokens, limit


class Transient(ProviderError):
    def __init__(
        self, message: str, *, status: int | None = None, provider: str, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status, provider=provider)
        self.retry_after = retry_after


class RateLimited(Transient):
    """The provider's rate limit refused the request (HTTP 429): nothing is wrong, the step waits its turn.
    ``limits``: what the answer's headers said of the limits (worker/rate_limits.py)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        provider: str,
        retry_after: float | None = None,
        limits: Mapping[str, Budget] | None = None,
    ) -> None:
        super().__init__(message, status=status, provider=provider, retry_after=retry_after)
        self.limits: Mapping[str, Budget] = limits or {}


class Unreachable(Transient):
    """The provider's host could not be reached: no request got to it. ``host``: the host (and port, if the URL
    names one) of the failed request's URL, which the person can check against their settings."""

    def __init__(self, message: str, *, provider: str, host: str) -> None:
        super().__init__(message, provider=provider)
        self.host = host


class InvalidRequest(ProviderError):
    """The provider refused the request for a reason other than its length."""


class AuthFailure(ProviderError):
    """The provider did not accept our credentials or permissions."""


# How providers word "too long". Each pattern is matched case-insensitively against the error's message.
_TOO_LONG_MESSAGES = [
    # Anthropic: "prompt is too long: 208656 tokens > 200000 maximum" (also inside Bedrock's wrapper)
    r"prompt is too long",
    # Anthropic: "input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648, ..."
    r"input length and `?max_tokens`? exceed context limit",
    # OpenAI chat and vLLM: "This model's maximum context length is 128000 tokens. However, ..."
    r"maximum context length is \d+ tokens",
    # OpenAI Responses: "Your input exceeds the context window of this model. ..."
    r"exceeds the context window",
    # Gemini: "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."
    r"input token count \(?\d+\)? exceeds the maximum number of tokens",
    # Bedrock: "Input is too long for requested model."
    r"input is too long for requested model",
]
# What the rejection says of the request's real size: (pattern, group of the input tokens, group of the limit).
_TOO_LONG_SIZES = [
    # Anthropic: "prompt is too long: 208656 tokens > 200000 maximum"
    (r"prompt is too long: (\d+) tokens > (\d+) maximum", 1, 2),
    # Anthropic: "input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648"
    (r"exceed context limit: (\d+) \+ \d+ > (\d+)", 1, 2),
    # OpenAI: "maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens"
    (r"maximum context length is (\d+) tokens\. However, your messages resulted in (\d+) tokens", 2, 1),
    # vLLM and older OpenAI: "... is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, ..."
    (r"maximum context length is (\d+) tokens\. However, you requested \d+ tokens \((\d+) in the messages", 2, 1),
    # Gemini: "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."
    (r"input token count \(?(\d+)\)? exceeds the maximum number of tokens allowed \(?(\d+)\)?", 1, 2),
]


def too_long_size(message: str) -> tuple[int | None, int | None]:
    """(the request's input tokens, the model's limit) as a too-long rejection states them, or Nones."""
    for pattern, tokens, limit in _TOO_LONG_SIZES:
        found = re.search(pattern, message, re.IGNORECASE)
        if found:
            return int(found[tokens]), int(found[limit])
    return None, None


_TOO_LONG_PATTERN = re.compile("|".join(f"(?:{pattern})" for pattern in _TOO_LONG_MESSAGES), re.IGNORECASE)
_TOO_LONG_CODES = {"context_length_exceeded", "request_too_large"}

_TRANSIENT_STATUSES = {408, 409, 425, 429}
_RATE_LIMIT_KINDS = {"rate_limit_error", "rate_limit_exceeded", "resource_exhausted", "throttlingexception"}
_TRANSIENT_KINDS = {
    # Anthropic error types (also sent without a status inside a stream)
    "overloaded_error",
    "rate_limit_error",
    "api_error",
    "timeout_error",
    # OpenAI
    "server_error",
    "rate_limit_exceeded",
    "requests",
    "tokens",
    # Gemini statuses
    "resource_exhausted",
    "unavailable",
    "internal",
    "deadline_exceeded",
    # Bedrock exceptions
    "throttlingexception",
    "serviceunavailableexception",
    "internalserverexception",
    "modelnotreadyexception",
    "modeltimeoutexception",
}
_AUTH_STATUSES = {401, 403}
_AUTH_KINDS = {
    "authentication_error",
    "permission_error",
    "invalid_api_key",
    "unauthenticated",
    "permission_denied",
    "accessdeniedexception",
    "unrecognizedclientexception",
}


def classify(exc: BaseException, provider: str) -> ProviderError:
    """The kind of failure ``exc`` is. SDK and httpx errors are mapped by status, payload and headers;
    an exception that is none of these (a bug on our side of the call) counts as an InvalidRequest."""
    # Imported here, not with the module: what only names these errors (the API, through Sentry's hook) should
    # not load both SDKs, a second of every process's start.
    import anthropic
    import openai

    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, anthropic.APIStatusError | openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict | str) else str(exc)
        return classify_payload(exc.status_code, body, provider, exc.response.headers)
    unreachable = _unreachable(exc, provider)
    if unreachable is not None:
        return unreachable
    if isinstance(exc, anthropic.APIConnectionError | openai.APIConnectionError):
        timed_out = isinstance(exc, anthropic.APITimeoutError | openai.APITimeoutError)
        return Transient(f"{'timeout' if timed_out else 'connection error'}: {exc}", provider=provider)
    if isinstance(exc, httpx.HTTPStatusError | httpx2.HTTPStatusError):
        response = exc.response
        return classify_payload(response.status_code, _response_body(response.text), provider, response.headers)
    if isinstance(exc, httpx.TransportError | httpx2.TransportError | TimeoutError | ConnectionError):
        return Transient(f"{type(exc).__name__}: {exc}", provider=provider)
    return InvalidRequest(f"{type(exc).__name__}: {exc}", provider=provider)


# Why a connection could not be made, by the error at its root, most telling first: (error types, the reason).
_CANNOT_CONNECT: list[tuple[tuple[type[BaseException], ...], str]] = [
    ((socket.gaierror,), "its name does not resolve (DNS)"),
    ((ConnectionRefusedError,), "the connection was refused"),
    ((ssl.SSLError, ssl.CertificateError), "the TLS handshake failed"),
    ((httpx.ProxyError, httpx2.ProxyError), "the proxy failed"),
    ((httpx.ConnectTimeout, httpx2.ConnectTimeout), "the connection timed out"),
    ((httpx.ConnectError, httpx2.ConnectError), "the connection failed"),
]


def _unreachable(exc: BaseException, provider: str) -> Unreachable | None:
    """An Unreachable if ``exc`` (or what caused it: the SDKs wrap the transport's error, which wraps the
    socket's) says no connection to the host could be made; None for every other failure."""
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    why = next((reason for kinds, reason in _CANNOT_CONNECT if any(isinstance(e, kinds) for e in chain)), None)
    if why is None:
        return None
    host = next((found for e in chain if (found := _host_of(e))), "the provider's host")
    return Unreachable(f"cannot reach {host}: {why}", provider=provider, host=host)


def _host_of(exc: BaseException) -> str | None:
    """The host (with its port, where the URL names one) of the request ``exc`` failed on, if it says."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]  # the SDKs' and httpx's errors carry their request
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError for an error made without a request
        return None
    host, port = getattr(url, "host", None), getattr(url, "port", None)
    if not host:
        return None
    return f"{host}:{port}" if port is not None else str(host)


def classify_payload(
    status: int | None,
    body: dict[str, Any] | str,
    provider: str,
    headers: Mapping[str, str] | None = None,
) -> ProviderError:
    """The kind of failure an error response is, from its status (None inside a stream), its body (a
    decoded JSON payload of any provider, or text) and its headers (for retry-after)."""
    message, kinds = _message_and_kinds(body)
    if _is_too_long(status, message, kinds):
        tokens, limit = too_long_size(message)
        return TooLong(message, status=status, provider=provider, tokens=tokens, limit=limit)
    if status in _AUTH_STATUSES or (status is None and kinds & _AUTH_KINDS):
        return AuthFailure(message, status=status, provider=provider)
    transient_status = status is not None and (status in _TRANSIENT_STATUSES or status >= 500)
    if status == 429 or (status is None and kinds & _RATE_LIMIT_KINDS):
        return RateLimited(
            message,
            status=status,
            provider=provider,
            retry_after=retry_after_seconds(headers),
            limits=stated_limits(headers),
        )
    if transient_status or (status is None and kinds & _TRANSIENT_KINDS):
        return Transient(message, status=status, provider=provider, retry_after=retry_after_seconds(headers))
    return InvalidRequest(message, status=status, provider=provider)


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or else ``retry-after`` (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {name.lower(): value for name, value in headers.items()}
    milliseconds = _number(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, email.utils.mktime_tz(parsed) - time.time())


def _is_too_long(status: int | None, message: str, kinds: set[str]) -> bool:
    if status == 413 or kinds & _TOO_LONG_CODES:
        return True
    return (status is None or 400 <= status < 500) and _TOO_LONG_PATTERN.search(message) is not None


def _message_and_kinds(body: dict[str, Any] | str) -> tuple[str, set[str]]:
    """The human message of an error payload and the lower-cased type/code/status names it carries.

    Handles Anthropic ``{"type": "error", "error": {"type", "message"}}``, OpenAI ``{"error": {"message",
    "type", "code"}}`` (or just the inner object, as the openai SDK keeps it), Gemini ``{"error": {"code",
    "message", "status"}}``, Bedrock ``{"message"}`` with ``__type`` or ``{"Error": {"Code", "Message"}}``,
    vLLM ``{"object": "error", "message", "type", "code"}``, and the OpenAI Responses ``response.failed``
    event, whose ``response`` holds the error.
    """
    if isinstance(body, str):
        return body, set()
    response = body.get("response")  # an OpenAI Responses ``response.failed`` event holds the error here
    payload: dict[str, Any] = response if isinstance(response, dict) else body
    inner = payload.get("error") if isinstance(payload.get("error"), dict) else payload.get("Error")
    error: dict[str, Any] = inner if isinstance(inner, dict) else payload
    message = next(
        (value for key in ("message", "Message") if isinstance(value := error.get(key), str)),
        str(payload.get("message", payload)),
    )
    names = [error.get(key) for key in ("type", "code", "status", "Code", "__type")] + [payload.get("__type")]
    kinds = {_exception_name(name) for name in names if isinstance(name, str)}
    return message, kinds


def _exception_name(name: str) -> str:
    # Bedrock sends "com.amazonaws...#ValidationException:http://..." as well as the bare name.
    return name.split("#")[-1].split(":")[0].lower()


def _response_body(text: str) -> dict[str, Any] | str:
    try:
        decoded = json.loads(text)
    except ValueError:
        return text
    return decoded if isinstance(decoded, dict) else text


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None

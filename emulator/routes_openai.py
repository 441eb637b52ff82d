"""``POST /v1/chat/completions``, answering as the OpenAI API does."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from emulator import openai_wire, stats
from emulator.agent import decide
from emulator.conversation import RequestError
from emulator.counting import compact_json
from emulator.faults import FAULT_HEADER
from emulator.ids import openai_call_id, openai_completion_id, request_digest, request_id
from emulator.openai_request import UNPARSABLE
from emulator.reply import written_reply
from emulator.serving import (
    DroppedConnectionResponse,
    InvalidBody,
    api_key_of,
    bearer_token,
    hang,
    is_anxious,
    pause,
    read_json,
    retry_after_value,
)
from emulator.state import EmulatorState

_FINISH_REASONS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}

# Anthropic's 529 has no OpenAI twin; an overloaded OpenAI server answers 503.
_FAULTS: dict[str, tuple[int, str, str | None, str]] = {
    "429": (429, "requests", "rate_limit_exceeded", "Rate limit reached for requests (emulated). Please try again."),
    "529": (503, "server_error", None, "The server is overloaded or not ready yet."),
    "500": (500, "server_error", None, "The server had an error while processing your request. Sorry about that!"),
}


async def create_chat_completion(request: Request) -> Response:
    state: EmulatorState = request.app.state.emulator
    route = stats.CHAT_COMPLETIONS_ROUTE
    req_id = request_id(state.next_serial())
    headers = {"x-request-id": req_id}

    expected = state.config.api_key
    if expected is not None and bearer_token(request) != expected:
        message = (
            "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."
        )
        body = openai_wire.error_body(message, kind="invalid_request_error", code="invalid_api_key")
        return _rejected(state, 401, body, stats.AUTHENTICATION, headers)
    await pause(request, state)
    try:
        fault = state.faults.next_fault(request.headers.get(FAULT_HEADER))
    except ValueError as exc:
        return _invalid(state, RequestError(str(exc)), headers)
    if fault is not None:
        return await _fault_response(state, fault, headers)
    try:
        raw = await read_json(request)
        conversation = openai_wire.parse_request(raw)
    except InvalidBody:
        return _invalid(state, RequestError(UNPARSABLE), headers)
    except RequestError as exc:
        return _invalid(state, exc, headers)

    counted = state.counter.count(conversation)
    total = counted.total
    limit = state.config.limit
    max_tokens = conversation.max_tokens
    if total > limit or (max_tokens is not None and total + max_tokens > limit):
        message = openai_wire.context_length_message(limit=limit, tokens=total, max_tokens=max_tokens)
        body = openai_wire.error_body(
            message, kind="invalid_request_error", param="messages", code="context_length_exceeded"
        )
        rejection = stats.TOO_LONG if total > limit else stats.TOO_LONG_WITH_MAX_TOKENS
        return _rejected(state, 400, body, rejection, headers, input_tokens=total)

    key, model = api_key_of(request), conversation.model
    limiter, at = state.rate_limiter, state.now()
    admission = None
    if limiter.active:  # OpenAI counts every prompt token, cached or not, and max_tokens as output
        admission = limiter.admit(
            key=key, model=model, input_tokens=total, cache_read=0, max_tokens=max_tokens or 0, now=at
        )
        if not admission.admitted:
            limited = {**headers, **limiter.headers(key=key, model=model, now=at, retry_after=admission.retry_after)}
            body = openai_wire.error_body(limiter.refusal_message(admission), kind="tokens", code="rate_limit_exceeded")
            return _rejected(state, 429, body, stats.RATE_LIMITED, limited, input_tokens=total)
    cached = state.openai_cache.apply(
        model=conversation.model,
        units=counted.units,
        now=state.now(),
        ttl_seconds=state.config.cache_ttl_seconds,
        minimum=state.config.min_cacheable_tokens,
    )
    turn = decide(
        conversation,
        input_tokens=total,
        anxious=is_anxious(request, state),
        delegate_group=state.config.delegate_group,
        count=state.counter.count_text,
    )
    reply = written_reply(turn, max_tokens, state.counter)
    digest = request_digest(raw)
    tool_calls = [
        {
            "id": openai_call_id(digest, index),
            "type": "function",
            "function": {"name": call.name, "arguments": compact_json(call.input)},
        }
        for index, call in enumerate(reply.tool_calls)
    ]
    completion = openai_wire.completion_body(
        completion_id=openai_completion_id(digest),
        created=int(time.time()),
        model=conversation.model,
        text=reply.text,
        tool_calls=tool_calls,
        finish_reason=_FINISH_REASONS[reply.stop_reason],
        prompt_tokens=total,
        cached_tokens=cached,
        completion_tokens=reply.output_tokens,
    )
    state.stats.record(
        stats.RequestRecord(
            route=route,
            status=200,
            input_tokens=total,
            cache_read=cached,
            output_tokens=reply.output_tokens,
            stop_reason=reply.stop_reason,
            at=at,
            model=conversation.model,
            request_id=req_id,
        )
    )
    if admission is not None:
        limiter.settle(admission, key=key, model=model, output_tokens=reply.output_tokens, now=at)
        headers.update(limiter.headers(key=key, model=model, now=at))
    return JSONResponse(completion, headers=headers)


async def _fault_response(state: EmulatorState, fault: str, headers: dict[str, str]) -> Response:
    route, rejection = stats.CHAT_COMPLETIONS_ROUTE, stats.FAULT_REJECTIONS[fault]
    if fault == "hang":
        state.stats.record(stats.RequestRecord(route=route, status=0, fault=fault, rejection=rejection))
        return await hang(state)
    if fault == "drop":
        state.stats.record(stats.RequestRecord(route=route, status=0, fault=fault, rejection=rejection))
        return DroppedConnectionResponse()
    status, kind, code, message = _FAULTS[fault]
    state.stats.record(stats.RequestRecord(route=route, status=status, fault=fault, rejection=rejection))
    if fault == "429":
        seconds = state.config.faults.retry_after_seconds
        headers = {**headers, "retry-after": retry_after_value(seconds), "retry-after-ms": f"{seconds * 1000:g}"}
    body = openai_wire.error_body(message, kind=kind, code=code)
    return JSONResponse(body, status_code=status, headers={**headers, "x-should-retry": "true"})


def _invalid(state: EmulatorState, error: RequestError, headers: dict[str, str]) -> Response:
    body = openai_wire.error_body(error.message, kind="invalid_request_error", param=error.param)
    return _rejected(state, 400, body, stats.INVALID_REQUEST, headers)


def _rejected(
    state: EmulatorState,
    status: int,
    body: dict[str, Any],
    rejection: str,
    headers: dict[str, str],
    *,
    input_tokens: int = 0,
) -> Response:
    state.stats.record(
        stats.RequestRecord(
            route=stats.CHAT_COMPLETIONS_ROUTE, status=status, input_tokens=input_tokens, rejection=rejection
        )
    )
    return JSONResponse(body, status_code=status, headers=headers)

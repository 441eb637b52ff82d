"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``, answering as the Anthropic API does."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from emulator import anthropic_wire, stats
from emulator.agent import decide
from emulator.conversation import Block, Conversation, RequestError
from emulator.faults import FAULT_HEADER
from emulator.ids import anthropic_message_id, anthropic_tool_use_id, request_digest, request_id
from emulator.reply import Reply, written_reply
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

_FAULTS = {
    "429": (429, "rate_limit_error", "This request would exceed the rate limit for your organization (emulated)."),
    "529": (529, "overloaded_error", "Overloaded"),
    "500": (500, "api_error", "Internal server error"),
}


async def create_message(request: Request) -> Response:
    state: EmulatorState = request.app.state.emulator
    route = stats.MESSAGES_ROUTE
    req_id = request_id(state.next_serial())
    body, early = await _admitted(request, state, route, req_id, faults_apply=True)
    if early is not None:
        return early
    # Streamed or not, the same request gets the same ids.
    digest = request_digest({**body, "stream": None} if isinstance(body, dict) else body)
    try:
        conversation = anthropic_wire.parse_request(body)
    except RequestError as exc:
        return _invalid(state, route, exc.message, req_id)
    assert conversation.max_tokens is not None
    counted = state.counter.count(conversation)
    total = counted.total
    limit = state.config.limit
    if total > limit:
        message = anthropic_wire.prompt_too_long_message(total, limit)
        return _rejected(state, route, 400, "invalid_request_error", message, req_id, stats.TOO_LONG, total)
    if total + conversation.max_tokens > limit and not state.config.stop_at_context_window:
        message = anthropic_wire.context_exceeded_message(total, conversation.max_tokens, limit)
        rejection = stats.TOO_LONG_WITH_MAX_TOKENS
        return _rejected(state, route, 400, "invalid_request_error", message, req_id, rejection, total)

    key, model = api_key_of(request), conversation.model
    limiter, at = state.rate_limiter, state.now()
    admission = None
    if limiter.active:
        read = state.anthropic_cache.readable(
            model=model, units=counted.units, now=at, lookback=state.config.cache_lookback_blocks
        )
        admission = limiter.admit(
            key=key, model=model, input_tokens=total, cache_read=read, max_tokens=conversation.max_tokens, now=at
        )
        if not admission.admitted:
            headers = {
                "request-id": req_id,
                **limiter.headers(key=key, model=model, now=at, retry_after=admission.retry_after),
            }
            state.stats.record(
                stats.RequestRecord(route=route, status=429, input_tokens=total, rejection=stats.RATE_LIMITED, at=at)
            )
            body = anthropic_wire.error_body("rate_limit_error", limiter.refusal_message(admission), req_id)
            return JSONResponse(body, status_code=429, headers=headers)
    cached = state.anthropic_cache.apply(
        model=conversation.model,
        units=counted.units,
        now=state.now(),
        ttl_seconds=state.config.cache_ttl_seconds,
        min_tokens=state.config.min_cacheable_tokens,
        lookback=state.config.cache_lookback_blocks,
    )
    reply = _reply(conversation, total, request, state, room=limit - total)
    usage = anthropic_wire.usage_body(
        uncached=total - cached.read - cached.written,
        output=reply.output_tokens,
        read=cached.read,
        written_5m=cached.written_5m,
        written_1h=cached.written_1h,
    )
    message_body = anthropic_wire.message_body(
        message_id=anthropic_message_id(digest),
        model=conversation.model,
        content=_content(reply, digest),
        stop_reason=reply.stop_reason,
        usage=usage,
    )
    state.stats.record(
        stats.RequestRecord(
            route=route,
            status=200,
            input_tokens=total,
            cache_read=cached.read,
            cache_write=cached.written,
            output_tokens=reply.output_tokens,
            stop_reason=reply.stop_reason,
            at=at,
            model=conversation.model,
            request_id=req_id,
        )
    )
    headers = {"request-id": req_id}
    if admission is not None:
        limiter.settle(admission, key=key, model=model, output_tokens=reply.output_tokens, now=at)
        headers.update(limiter.headers(key=key, model=model, now=at))
    if isinstance(body, dict) and body.get("stream") is True:
        return StreamingResponse(_events(message_body), media_type="text/event-stream", headers=headers)
    return JSONResponse(message_body, headers=headers)


async def count_tokens(request: Request) -> Response:
    state: EmulatorState = request.app.state.emulator
    route = stats.COUNT_TOKENS_ROUTE
    req_id = request_id(state.next_serial())
    body, early = await _admitted(request, state, route, req_id, faults_apply=False)
    if early is not None:
        return early
    try:
        conversation = anthropic_wire.parse_request(body, count_only=True)
    except RequestError as exc:
        return _invalid(state, route, exc.message, req_id)
    total = state.counter.count(conversation).total
    state.stats.record(stats.RequestRecord(route=route, status=200, input_tokens=total))
    return JSONResponse({"input_tokens": total}, headers={"request-id": req_id})


async def _admitted(
    request: Request, state: EmulatorState, route: str, req_id: str, *, faults_apply: bool
) -> tuple[object, Response | None]:
    """The request body, or the response that ends the request first: a wrong key, a missing version
    header, an injected fault, a body that is not JSON."""
    expected = state.config.api_key
    if expected is not None and expected not in (request.headers.get("x-api-key"), bearer_token(request)):
        return None, _rejected(
            state, route, 401, "authentication_error", "invalid x-api-key", req_id, stats.AUTHENTICATION
        )
    if request.headers.get("anthropic-version") is None:
        return None, _invalid(state, route, "anthropic-version: header is required", req_id)
    await pause(request, state)
    if faults_apply:
        try:
            fault = state.faults.next_fault(request.headers.get(FAULT_HEADER))
        except ValueError as exc:
            return None, _invalid(state, route, str(exc), req_id)
        if fault is not None:
            return None, await _fault_response(state, route, fault, req_id)
    try:
        return await read_json(request), None
    except InvalidBody as exc:
        return None, _invalid(state, route, f"There was an issue with the request body: invalid JSON ({exc})", req_id)


async def _fault_response(state: EmulatorState, route: str, fault: str, req_id: str) -> Response:
    rejection = stats.FAULT_REJECTIONS[fault]
    if fault == "hang":
        state.stats.record(stats.RequestRecord(route=route, status=0, fault=fault, rejection=rejection))
        return await hang(state)
    if fault == "drop":
        state.stats.record(stats.RequestRecord(route=route, status=0, fault=fault, rejection=rejection))
        return DroppedConnectionResponse()
    status, kind, message = _FAULTS[fault]
    state.stats.record(stats.RequestRecord(route=route, status=status, fault=fault, rejection=rejection))
    headers = {"request-id": req_id, "x-should-retry": "true"}
    if fault == "429":
        headers["retry-after"] = retry_after_value(state.config.faults.retry_after_seconds)
    return JSONResponse(anthropic_wire.error_body(kind, message, req_id), status_code=status, headers=headers)


def _invalid(state: EmulatorState, route: str, message: str, req_id: str) -> Response:
    return _rejected(state, route, 400, "invalid_request_error", message, req_id, stats.INVALID_REQUEST)


def _rejected(
    state: EmulatorState,
    route: str,
    status: int,
    kind: str,
    message: str,
    req_id: str,
    rejection: str,
    input_tokens: int = 0,
) -> Response:
    state.stats.record(stats.RequestRecord(route=route, status=status, input_tokens=input_tokens, rejection=rejection))
    return JSONResponse(
        anthropic_wire.error_body(kind, message, req_id), status_code=status, headers={"request-id": req_id}
    )


def _reply(conversation: Conversation, total: int, request: Request, state: EmulatorState, *, room: int) -> Reply:
    """The agent's turn, cut at max_tokens or, when less is left, at the end of the context window."""
    turn = decide(
        conversation,
        input_tokens=total,
        anxious=is_anxious(request, state),
        delegate_group=state.config.delegate_group,
        count=state.counter.count_text,
    )
    assert conversation.max_tokens is not None
    reply = written_reply(turn, min(conversation.max_tokens, room), state.counter)
    if reply.stop_reason == "max_tokens" and room < conversation.max_tokens:
        return dataclasses.replace(reply, stop_reason="model_context_window_exceeded")
    return reply


def _content(reply: Reply, digest: bytes) -> list[Block]:
    content: list[Block] = [{"type": "text", "text": reply.text}] if reply.text else []
    for index, call in enumerate(reply.tool_calls):
        tool_use_id = anthropic_tool_use_id(digest, index)
        content.append({"type": "tool_use", "id": tool_use_id, "name": call.name, "input": call.input})
    return content


def _events(message: dict[str, Any]) -> Iterator[str]:
    """The message as the server-sent events of a streamed reply."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _event("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening: Block = {"type": "text", "text": ""}
            delta: Block = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield _event("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
        yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    end = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _event(
        "message_delta", {"type": "message_delta", "delta": end, "usage": {"output_tokens": usage["output_tokens"]}}
    )
    yield _event("message_stop", {"type": "message_stop"})


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"

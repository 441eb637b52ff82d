"""The shape of an Anthropic Messages request, as pydantic models: what the real API checks field by field (types,
required fields, the block kinds, ``cache_control``), with pydantic's own wording in the error, as the real API
words it. The rules that span fields (which blocks a role may send, tool_use / tool_result pairing, at most four
breakpoints) are checked in ``emulator.anthropic_wire``.

Strict: a number given as a string, or ``true`` as a number, is refused, as the real API refuses it. Fields the
emulator does not use (``temperature``, ``metadata``...) are ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,128}$"
OTHER_BLOCKS = " (the emulator supports no other blocks here)"
QUOTE = "'"


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True)


class CacheControl(_Strict):
    model_config = ConfigDict(strict=True, extra="allow")  # kept as sent, for the cache's key

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"


class _Cacheable(_Strict):
    cache_control: CacheControl | None = None


class TextBlock(_Cacheable):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Cacheable):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Cacheable):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None


def _as_blocks(content: object) -> object:
    """A message's string content is one text block."""
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


AnyBlock = Annotated[TextBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")]


class MessageIn(_Strict):
    role: Literal["user", "assistant"]
    content: Annotated[list[AnyBlock], BeforeValidator(_as_blocks)]


class Tool(_Cacheable):
    type: Literal["custom"] = "custom"
    name: Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]
    description: str | None = None
    input_schema: dict[str, Any]


class CountTokensRequest(_Strict):
    """A ``/v1/messages/count_tokens`` body (and what a ``/v1/messages`` body has besides ``max_tokens``)."""

    model: str
    messages: list[MessageIn]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None


class MessagesRequest(CountTokensRequest):
    """A ``/v1/messages`` body."""

    max_tokens: Annotated[int, Field(ge=1)]


def first_problem(error: ValidationError) -> str:
    """The first thing wrong with the request, as the real API says it: ``messages.0.role: Input should be ...``."""
    problem = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in problem["loc"]) or "request body"
    return f"{where}{_message(problem)}"


def _message(problem: ErrorDetails) -> str:
    context = problem.get("ctx") or {}
    if problem["type"] == "union_tag_not_found":  # a block without a type
        return f".{str(context['discriminator']).strip(QUOTE)}: Field required"
    if problem["type"] == "union_tag_invalid":  # a block of a kind the emulator does not know
        *others, last = str(context["expected_tags"]).split(", ")
        expected = f"{', '.join(others)} or {last}" if others else last
        return f".{str(context['discriminator']).strip(QUOTE)}: Input should be {expected}{OTHER_BLOCKS}"
    if problem["type"] == "model_type":  # not "... or instance of MessageIn": the API's shapes are JSON objects
        return ": Input should be a valid dictionary"
    return f": {problem['msg']}"

"""The shape of an OpenAI Chat Completions request, as pydantic models: what the real API checks field by field
(types, required fields, the message roles, text-only content parts, function tools, the token caps), with the
error told as the real API tells it (``Invalid type for 'messages[0].content': ...``) and the parameter named. The
rules that span fields (tool calls answered by tool messages, an assistant message with something in it, no
streaming here) are checked in ``emulator.openai_wire``.

Strict: a number given as a string, or ``true`` as a number, is refused, as the real API refuses it. Fields the
emulator does not use (``temperature``, ``user``...) are ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Json, Tag, ValidationError
from pydantic_core import ErrorDetails

from emulator.conversation import RequestError

UNPARSABLE = "We could not parse the JSON body of your request."

_CONTENT_KINDS = {"string": "a string", "array": "an array"}
_TYPE_NAMES = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}
_JSON_KINDS = (
    (bool, "a boolean"), (int, "an integer"), (float, "a decimal"), (str, "a string"), (list, "an array"),
    (dict, "an object"),
)  # fmt: skip


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True)


class TextPart(_Strict):
    type: Literal["text"]
    text: str


def _content_kind(content: object) -> str:
    return "string" if isinstance(content, str) else "array"


Content = Annotated[
    Annotated[str, Tag("string")] | Annotated[list[TextPart], Tag("array")], Discriminator(_content_kind)
]
"""A string, or text parts (the emulator accepts no other parts)."""


class FunctionCall(_Strict):
    name: str
    arguments: Json[dict[str, Any]]


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Strict):
    role: Literal["system", "developer"]
    content: Content


class UserMessage(_Strict):
    role: Literal["user"]
    content: Content


class AssistantMessage(_Strict):
    role: Literal["assistant"]
    content: Content | None = None
    tool_calls: list[ToolCall] | None = None


class ToolMessage(_Strict):
    role: Literal["tool"]
    tool_call_id: str
    content: Content


AnyMessage = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]
_ROLES = ("system", "developer", "user", "assistant", "tool")


class FunctionDefinition(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class FunctionTool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class ChatCompletionRequest(_Strict):
    """A ``/v1/chat/completions`` body."""

    model: Annotated[str, Field(min_length=1)]
    messages: Annotated[list[AnyMessage], Field(min_length=1)]
    stream: bool | None = None
    tools: list[FunctionTool] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None


def checked_request(body: object) -> ChatCompletionRequest:
    """The request in ``body``, or the first thing wrong with it raised as the real API says it."""
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        param = _param(problem["loc"])
        if problem["type"] in ("union_tag_not_found", "union_tag_invalid"):  # a message without a role we know
            param += ".role"
        raise RequestError(_message(problem, param), param=param or None) from None


def _param(loc: tuple[int | str, ...]) -> str:
    """``messages[0].content``: the location as OpenAI writes it, without the tags pydantic adds for a union."""
    param = ""
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        elif part not in _ROLES and part not in _CONTENT_KINDS:
            param += f".{part}" if param else part
    return param


def _message(problem: ErrorDetails, param: str) -> str:
    kind, value, context = problem["type"], problem["input"], problem.get("ctx") or {}
    if not param:
        return UNPARSABLE
    if param == "model":
        return "you must provide a model parameter"
    if kind in ("missing", "union_tag_not_found"):
        return f"Missing required parameter: '{param}'."
    if kind == "too_short":
        return f"{value!r} is too short - '{param}'"
    if kind == "greater_than_equal":
        return (
            f"Invalid '{param}': integer below minimum value. Expected a value >= {context['ge']}, "
            f"but got {value!r} instead."
        )
    if kind == "union_tag_invalid":
        return f"Invalid value: {context['tag']!r}. Supported values are: {context['expected_tags']}."
    if kind == "literal_error":
        return f"Invalid value: {value!r}. Supported values are: {context['expected']}."
    if kind in ("json_invalid", "json_type"):
        return f"Invalid '{param}': expected a JSON object."
    expected = _TYPE_NAMES.get(kind)
    if param.endswith("content") and kind == "list_type":
        expected = "a string or an array"
    if expected is None:
        return f"Invalid '{param}'."
    return f"Invalid type for '{param}': expected {expected}, but got {_json_kind(value)} instead."


def _json_kind(value: object) -> str:
    """What a JSON value is, as OpenAI names it (a boolean before an integer: ``True`` is an ``int`` too)."""
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_KINDS if isinstance(value, kind)), "a value")

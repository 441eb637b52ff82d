"""The agent's turn as the model writes it: counted in output tokens and cut at ``max_tokens``."""

from __future__ import annotations

from dataclasses import dataclass

from emulator.agent import AgentTurn, ToolCall
from emulator.counting import TokenCounter, compact_json


@dataclass(frozen=True)
class Reply:
    text: str
    tool_calls: list[ToolCall]
    stop_reason: str
    output_tokens: int


def written_reply(turn: AgentTurn, max_tokens: int | None, counter: TokenCounter) -> Reply:
    """Output tokens are the tokens of the text plus, for each tool call, its name and its input as compact
    JSON. A turn longer than ``max_tokens`` stops there, as a real model does: the text is cut at the limit,
    tool calls that do not fit completely are not made, and the stop reason is ``max_tokens``."""
    text_tokens = counter.encode(turn.text)
    call_tokens = [
        counter.count_text(call.name) + counter.count_text(compact_json(call.input)) for call in turn.tool_calls
    ]
    total = len(text_tokens) + sum(call_tokens)
    if max_tokens is None or total <= max_tokens:
        return Reply(turn.text, list(turn.tool_calls), turn.stop_reason, total)
    if len(text_tokens) >= max_tokens:
        text = counter.encoding.decode(list(text_tokens[:max_tokens]))
        return Reply(text, [], "max_tokens", max_tokens)
    used = len(text_tokens)
    calls = []
    for call, tokens in zip(turn.tool_calls, call_tokens, strict=True):
        if used + tokens > max_tokens:
            break
        calls.append(call)
        used += tokens
    return Reply(turn.text, calls, "max_tokens", used)

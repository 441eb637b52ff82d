"""What a provider says of its rate limits: the ``*-ratelimit-*`` headers of every answer, read into one shape.

Anthropic sends ``anthropic-ratelimit-{requests,input-tokens,output-tokens}-{limit,remaining,reset}``; OpenAI
sends ``x-ratelimit-{limit,remaining}-{requests,tokens}`` (its tokens limit is read as the input-token one).
Limits are per API key and model class: ``claude-sonnet-4-5`` and ``claude-sonnet-4-6`` share one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

REQUESTS, INPUT_TOKENS, OUTPUT_TOKENS = "requests", "input_tokens", "output_tokens"
KINDS = (REQUESTS, INPUT_TOKENS, OUTPUT_TOKENS)

_ANTHROPIC = {REQUESTS: "requests", INPUT_TOKENS: "input-tokens", OUTPUT_TOKENS: "output-tokens"}
_OPENAI = {REQUESTS: "requests", INPUT_TOKENS: "tokens"}


@dataclass(frozen=True)
class Budget:
    """One limit as an answer stated it: per minute, and what was left of it."""

    limit: int
    remaining: int


def model_class(model: str) -> str:
    """The group of models that share a limit: the name up to its first version number."""
    parts = model.split("-")
    for index, part in enumerate(parts):
        if index > 0 and part[:1].isdigit():
            return "-".join(parts[:index])
    return model


def stated_limits(headers: Mapping[str, str] | None) -> dict[str, Budget]:
    """The limits an answer's headers state, by kind (``requests``, ``input_tokens``, ``output_tokens``)."""
    if not headers:
        return {}
    lowered = {name.lower(): value for name, value in headers.items()}
    found: dict[str, Budget] = {}
    for kind in KINDS:
        names = [(f"anthropic-ratelimit-{_ANTHROPIC[kind]}-limit", f"anthropic-ratelimit-{_ANTHROPIC[kind]}-remaining")]
        if kind in _OPENAI:
            names.append((f"x-ratelimit-limit-{_OPENAI[kind]}", f"x-ratelimit-remaining-{_OPENAI[kind]}"))
        for limit_name, remaining_name in names:
            limit, remaining = _whole(lowered.get(limit_name)), _whole(lowered.get(remaining_name))
            if limit is not None and limit > 0 and remaining is not None:
                found[kind] = Budget(limit=limit, remaining=remaining)
                break
    return found


def _whole(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None

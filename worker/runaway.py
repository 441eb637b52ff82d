"""Runaway protection: an agent that repeats the same tool call with the same input is told once, then stopped.

Re-running a tool whose result was cleared is what the safety net asks for, so one repeat is normal; the same
call again and again (the same four pages read 125 times each) is a loop that only burns money.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plimsoll.notices import REPEATED_CALL_WARNING


def fingerprint(call: Mapping[str, Any]) -> str:
    """The same for two calls of one tool with equal input, whatever the order of the input's keys."""
    text = json.dumps([call.get("name"), call.get("input") or {}], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Repeats:
    counts: dict[str, int]  # the job's counts with these calls added
    warn: frozenset[str]  # tool_use ids of calls made exactly ``limit`` times: the agent is told
    over: tuple[Mapping[str, Any], ...]  # calls made more than ``limit`` times: the job stops


def count_calls(counts: Mapping[str, int], calls: Sequence[Mapping[str, Any]], *, limit: int) -> Repeats:
    updated = dict(counts)
    warn, over = set(), []
    for call in calls:
        key = fingerprint(call)
        updated[key] = updated.get(key, 0) + 1
        if updated[key] == limit:
            warn.add(call["id"])
        elif updated[key] > limit:
            over.append(call)
    return Repeats(updated, frozenset(warn), tuple(over))


def with_warning(block: dict[str, Any], *, tool: str, times: int) -> dict[str, Any]:
    """A tool_result block with the repeated-call warning appended to its content."""
    warning = REPEATED_CALL_WARNING.format(tool=tool, times=times)
    content = block.get("content")
    if isinstance(content, list):
        content = [*content, {"type": "text", "text": warning}]
    else:
        content = f"{content or ''}\n\n{warning}"
    return {**block, "content": content}

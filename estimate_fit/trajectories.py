"""Real agent trajectories from public repositories: ``estimate_fit/data/trajectories`` (``SOURCES.md`` there names each
file's repository, path, commit and licence).

Each file holds the messages of one agent run as the agent's model saw them: the task, the assistant's turns
(text, tool calls), and what the tools returned (search results, file contexts, diffs, test runs). Every file is
in one split: ``fit`` (``estimate_fit.fit_ascii`` fits the ASCII weights on it beside ``estimate_fit.tool_output``) or
``held_out`` (never fitted to; ``bench.estimator`` reports both). :func:`trajectory_results` gives the tool output
of a split as samples, :func:`trajectory_conversations` each run as a conversation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from estimate_fit.tool_output import Conversation, Sample

DATA = Path(__file__).resolve().parent / "data" / "trajectories"
SPLITS = ("fit", "held_out")
REAL = "real agent run: "  # the kinds of their results start with this
# The kinds the tables group results by (those of the independent check in issue 19), from the words of each
# result's own description, first match wins.
CATEGORIES = (
    ("directory listings", ("listing", "directory", "tree")),
    ("numbered source views", ("numbered", "cat -n")),
    ("source code and diffs", ("source", "code", "skeleton", "diff")),
    ("JSON", ("json",)),
)
OTHER = "other (logs, test output, prose)"


@dataclass(frozen=True)
class Message:
    role: str  # "user", "assistant" or "tool"
    text: str
    kind: str = ""  # what a tool result (or a file context sent as a user message) is


@dataclass(frozen=True)
class Trajectory:
    name: str
    split: str
    messages: tuple[Message, ...]


@cache
def trajectories(held_out: bool = False) -> tuple[Trajectory, ...]:
    """The trajectories of one split, in the order of their file names."""
    split = SPLITS[held_out]
    made = []
    for path in sorted(DATA.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["split"] not in SPLITS:
            raise ValueError(f"{path.name}: unknown split {data['split']!r}")
        if data["split"] == split:
            messages = tuple(Message(m["role"], m["text"], m.get("kind", "")) for m in data["messages"])
            made.append(Trajectory(data["name"], data["split"], messages))
    return tuple(made)


def category(kind: str) -> str:
    """The kind of result a description names: a directory listing, a numbered source view, ..., or other."""
    words = kind.lower()
    return next((name for name, marks in CATEGORIES if any(mark in words for mark in marks)), OTHER)


def trajectory_results(held_out: bool = False) -> tuple[Sample, ...]:
    """What the tools returned in the runs of one split (and the file contexts the agents were sent), each of the
    kind :func:`category` gives it."""
    return tuple(
        Sample(REAL + category(m.kind), t.name, m.text) for t in trajectories(held_out) for m in t.messages if m.kind
    )


def trajectory_conversations(held_out: bool = False) -> list[Conversation]:
    """Every run of one split as a conversation: each message's text."""
    return [Conversation(t.name, tuple(m.text for m in t.messages)) for t in trajectories(held_out)]

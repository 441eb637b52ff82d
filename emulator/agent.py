"""The deterministic agent: what the emulated model answers. Stateless like a real model, it decides only
from the request it is sent.

- Its instruction is the first user message. The documents to read are the names in backticks there, in order;
  with none, it calls ``list_documents`` first and reads every document listed.
- It calls ``read_document`` once per turn, in order, and in the same message writes a NOTE line for every
  document whose result it can see and has not noted yet (notes in earlier assistant messages count). A NOTE
  carries facts only a real read gives: length, a sha256 prefix and the first 30 characters.
- A result under 500 characters containing the word "cleared" has been cleared. A document it still needs a
  note for whose result is cleared or gone is read again.
- A document handed out in pages (see ``emulator.pages``) is noted page by page as each page arrives (a PAGE
  line in its own text, which is never cleared) and read on from the last page noted, so no noted page is read
  twice; after the last page it writes the document's NOTE from its PAGE notes.
- With every document noted it answers ``REPORT: <n> documents`` and the NOTE lines, in order.
- Given a ``delegate`` tool and more than ``delegate_group`` documents, it hands out groups in parallel calls
  instead and, once every group has answered, reports their notes together.
- Asked for a written summary of each document (``WRITTEN_SUMMARY_PHRASE`` in its instruction), it quotes the
  opening of each document it notes under a SUMMARY line in its own message: long messages nothing can clear.
- The person's later turns (user messages with text) may name more documents in backticks; it reads those too.
- A summary request (Plimsoll's compaction: the last block asks for a summary of the conversation but its last
  ``keep`` messages) is answered with the summary alone: the earlier summary's lines, then for each message of
  the range its NOTE and PAGE lines, a CALLED line per tool call and a PERSON line per text of the person, word
  for word; nothing invented. A summary block in the first message (``SUMMARY_BLOCK``) counts as notes written.
- Told its budget is nearly spent (``WIND_DOWN_PHRASE`` in the last user message), it answers at once from what it
  has: ``REPORT: <k> of <n> documents`` and the NOTE lines it has (those of results it can see now included).
- Space-anxious: if its instructions lack the safety net ("cleared automatically") and the request already
  passes a quarter of the context budget the system prompt states, it stops early to save space.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emulator.conversation import Conversation, Message, message_text, tool_result_texts
from emulator.counting import compact_json
from emulator.pages import Progress, ReadResult, opening_of, reading

LIST_DOCUMENTS = "list_documents"
READ_DOCUMENT = "read_document"
DELEGATE = "delegate"

SAFETY_NET_PHRASE = "cleared automatically"
WIND_DOWN_PHRASE = "write your answer now"
CLEARED_MAX_CHARS = 500
WRITTEN_SUMMARY_PHRASE = "summary of each document"
WRITTEN_SUMMARY_CHARS = 1_500
SUMMARY_BLOCK = "[Summary of earlier work"
PERSON = "PERSON: "

_DOCUMENT_NAME = re.compile(r"`([^`\n]+)`")
_NOTE_LINE = re.compile(r'^NOTE (?P<name>.+?): (?:\d+ chars, sha256 [0-9a-f]{12}, starts ".*"|unreadable, error ".*")$')
_CLEARED_WORD = re.compile(r"\bcleared\b", re.IGNORECASE)
_SUMMARY_REQUEST = re.compile(r"^\[Compaction\] .*? up to, but not including, its last (\d+) messages", re.DOTALL)
_SUMMARY_LIMIT = re.compile(r"within (\d+) tokens")
_BUDGET = re.compile(r"context budget[^0-9]{0,20}([0-9][0-9,_]*) tokens", re.IGNORECASE)


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class AgentTurn:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tool_calls else "end_turn"


@dataclass(frozen=True)
class _Result:
    call: ToolCall
    text: str
    is_error: bool


def delegate_task(names: list[str]) -> str:
    listed = ", ".join(f"`{name}`" for name in names)
    return f"Read these documents and report a NOTE line for each: {listed}."


def decide(
    conversation: Conversation,
    *,
    input_tokens: int,
    anxious: bool,
    delegate_group: int,
    count: Callable[[str], int] | None = None,
) -> AgentTurn:
    """The agent's next message for this request (``count``: how many tokens a text is, for a summary's limit)."""
    asked = _summary_request(conversation.messages)
    if asked is not None:
        keep, limit = asked
        return AgentTurn(summarize(conversation.messages, keep, limit=limit, count=count))
    instruction = _instruction(conversation.messages)
    tools = conversation.tool_names
    if READ_DOCUMENT not in tools and DELEGATE not in tools:
        return AgentTurn(f"I have no tool to read documents. Your message has {len(instruction)} characters.")
    seen = _Seen.of(conversation.messages)
    stop_early = anxious and _space_anxious(conversation.system_text, instruction, input_tokens)

    names = _unique(_DOCUMENT_NAME.findall("\n".join([instruction, *_person_texts(conversation.messages)])))
    if not names and LIST_DOCUMENTS in tools:
        listing = seen.latest_result(LIST_DOCUMENTS)
        if listing is None:
            if stop_early:
                return _stopping(0, 0, [])
            return AgentTurn("", [ToolCall(LIST_DOCUMENTS, {})])
        try:
            names = _listed_names(listing)
        except ValueError as exc:
            return AgentTurn(f"I could not read the list of documents: {exc}")

    winding_down = _told_to_wind_down(conversation.messages)
    if DELEGATE in tools and (len(names) > delegate_group or READ_DOCUMENT not in tools):
        return _delegating(names, seen, delegate_group, stop_early, winding_down=winding_down)
    written = WRITTEN_SUMMARY_PHRASE in instruction.lower()
    return _reading(names, seen, stop_early, written=written, winding_down=winding_down)


def _told_to_wind_down(messages: list[Message]) -> bool:
    last = messages[-1] if messages else None
    return last is not None and last["role"] == "user" and WIND_DOWN_PHRASE in "\n".join(_texts(last)).lower()


def _reading(
    names: list[str], seen: _Seen, stop_early: bool, *, written: bool = False, winding_down: bool = False
) -> AgentTurn:
    notes = dict(seen.notes)
    new_lines = []
    read_on: dict[str, int] = {}
    for name in names:
        if name in notes:
            continue
        shown = reading(name, seen.progress.get(name), seen.reads_of(name))
        if shown.note is not None:
            notes[name] = shown.note
            new_lines.append(shown.note)
            reads = seen.reads_of(name)
            if written and reads:
                new_lines.append(f"SUMMARY {name}: {reads[-1].text[:WRITTEN_SUMMARY_CHARS]}")
            continue
        if shown.moved_on and shown.progress is not None:
            new_lines.append(shown.progress.line())
        read_on[name] = shown.next_offset
    unread = [name for name in names if name not in notes]
    if not unread:
        return AgentTurn("\n".join([f"REPORT: {len(names)} documents", *(notes[name] for name in names)]))
    if winding_down:
        done = [notes[name] for name in names if name in notes]
        return AgentTurn("\n".join([f"REPORT: {len(done)} of {len(names)} documents", *done]))
    if stop_early:
        return _stopping(len(names) - len(unread), len(names), new_lines)
    offset = read_on.get(unread[0], 0)
    arguments: dict[str, Any] = {"name": unread[0], "offset": offset} if offset else {"name": unread[0]}
    return AgentTurn("\n".join(new_lines), [ToolCall(READ_DOCUMENT, arguments)])


def _delegating(
    names: list[str], seen: _Seen, group_size: int, stop_early: bool, *, winding_down: bool = False
) -> AgentTurn:
    tasks = [delegate_task(names[start : start + group_size]) for start in range(0, len(names), group_size)]
    answers = {
        result.call.input.get("task"): result.text
        for result in seen.results
        if result.call.name == DELEGATE and result.call.input.get("task") in tasks
    }
    waiting = [task for task in tasks if task not in answers]
    if not waiting or winding_down:
        lines = [
            line for task in tasks for line in answers.get(task, "").splitlines() if not line.startswith("REPORT:")
        ]
        noted = sum(1 for line in lines if _NOTE_LINE.match(line))
        head = f"REPORT: {len(names)} documents" if not waiting else f"REPORT: {noted} of {len(names)} documents"
        return AgentTurn("\n".join([head, *lines]))
    if stop_early:
        return _stopping(0, len(names), [])
    text = f"Delegating {len(waiting)} groups of up to {group_size} documents."
    return AgentTurn(text, [ToolCall(DELEGATE, {"task": task}) for task in waiting])


def _stopping(done: int, total: int, new_notes: list[str]) -> AgentTurn:
    text = f"I have read {done} of {total} documents and I am stopping here to save space in the context."
    return AgentTurn("\n".join([text, *new_notes]))


def _space_anxious(system: str, instruction: str, input_tokens: int) -> bool:
    if SAFETY_NET_PHRASE in f"{system}\n{instruction}".lower():
        return False
    budget = _BUDGET.search(system)
    if budget is None:
        return False
    return input_tokens > int(re.sub(r"[,_]", "", budget.group(1))) / 4


@dataclass(frozen=True)
class _Seen:
    """What the request shows: the results still whole, the notes already written, and for each document read
    in pages, the furthest PAGE note."""

    results: list[_Result]
    notes: dict[str, str]
    progress: dict[str, Progress]

    @classmethod
    def of(cls, messages: list[Message]) -> _Seen:
        calls: dict[str, ToolCall] = {}
        results: list[_Result] = []
        notes: dict[str, str] = {}
        progress: dict[str, Progress] = {}
        for message in messages:
            written = message_text(message) if message["role"] == "assistant" else _summary_texts(message)
            for line in written.splitlines():
                match = _NOTE_LINE.match(line)
                if match:
                    notes.setdefault(match["name"], line)
                page_note = Progress.parse(line)
                known = progress.get(page_note.name) if page_note else None
                if page_note and (known is None or page_note.end > known.end):
                    progress[page_note.name] = page_note
            if message["role"] == "assistant":
                for block in message["content"]:
                    if block["type"] == "tool_use":
                        calls[block["id"]] = ToolCall(block["name"], block["input"])
                continue
            for block in message["content"]:
                if block["type"] != "tool_result" or block["tool_use_id"] not in calls:
                    continue
                text = "".join(tool_result_texts(block))
                if not _is_cleared(text):
                    results.append(_Result(calls[block["tool_use_id"]], text, bool(block.get("is_error"))))
        return cls(results=results, notes=notes, progress=progress)

    def reads_of(self, name: str) -> list[ReadResult]:
        """The visible results of reading document ``name``, oldest first."""
        return [
            ReadResult(result.text, result.is_error)
            for result in self.results
            if result.call.name == READ_DOCUMENT and result.call.input.get("name") == name
        ]

    def latest_result(self, tool: str) -> _Result | None:
        matching = [result for result in self.results if result.call.name == tool]
        return matching[-1] if matching else None


def _instruction(messages: list[Message]) -> str:
    """The first user message's own text (a summary appended to it aside)."""
    for message in messages:
        if message["role"] == "user":
            return "\n".join(t for t in _texts(message) if not t.startswith(SUMMARY_BLOCK))
    return ""


def _texts(message: Message) -> list[str]:
    return [block["text"] for block in message["content"] if block["type"] == "text"]


def _summary_texts(message: Message) -> str:
    return "\n".join(t for t in _texts(message) if t.startswith(SUMMARY_BLOCK))


def _person_texts(messages: list[Message]) -> list[str]:
    """The person's words after the first message: texts of later user messages (not summary requests), and
    the PERSON lines of a summary."""
    texts = [line for line in _summary_texts(messages[0]).splitlines() if line.startswith(PERSON)] if messages else []
    for message in messages[1:]:
        if message["role"] == "user":
            texts.extend(t for t in _texts(message) if not _SUMMARY_REQUEST.match(t))
    return texts


def _summary_request(messages: list[Message]) -> tuple[int, int | None] | None:
    """How many messages at the end a summary request leaves out of the summary, and the summary's stated limit
    in tokens; None: not a summary request."""
    if not messages or messages[-1]["role"] != "user" or not messages[-1]["content"]:
        return None
    last = messages[-1]["content"][-1]
    match = _SUMMARY_REQUEST.match(last["text"]) if last["type"] == "text" else None
    if match is None:
        return None
    limit = _SUMMARY_LIMIT.search(last["text"])
    return int(match[1]), int(limit[1]) if limit else None


def summarize(
    messages: list[Message], keep: int, *, limit: int | None = None, count: Callable[[str], int] | None = None
) -> str:
    """The summary of ``messages`` but the last ``keep``: the earlier summary's lines, then the NOTE and PAGE
    lines, tool calls and the person's words of each message, in order. Over ``limit`` tokens (counted with
    ``count``), lines are left out as the instruction asks: the oldest tool calls first, then the oldest notes,
    the person's words last; the newest notes stay."""
    lines = _summary_texts(messages[0]).splitlines()[1:]
    for message in messages[1 : len(messages) - keep]:
        if message["role"] == "assistant":
            lines.extend(
                line for line in message_text(message).splitlines() if _NOTE_LINE.match(line) or Progress.parse(line)
            )
            lines.extend(
                f"CALLED {b['name']} {compact_json(b['input'])}" for b in message["content"] if b["type"] == "tool_use"
            )
        else:
            lines.extend(f"{PERSON}{t}" for t in _texts(message) if not _SUMMARY_REQUEST.match(t))
    if limit is None or count is None:
        return "\n".join(lines)
    return "\n".join(_within(lines, limit, count))


def _within(lines: list[str], limit: int, count: Callable[[str], int]) -> list[str]:
    """``lines`` without the fewest, least needed ones that bring them within ``limit`` tokens."""
    kept = list(range(len(lines)))
    for kind in (_is_call, _is_note, _is_person):
        if count("\n".join(lines[i] for i in kept)) <= limit:
            break
        droppable = [i for i in kept if kind(lines[i])]
        while droppable and count("\n".join(lines[i] for i in kept)) > limit:
            kept.remove(droppable.pop(0))
    return [lines[i] for i in kept]


def _is_call(line: str) -> bool:
    return line.startswith("CALLED ")


def _is_note(line: str) -> bool:
    return not _is_call(line) and not _is_person(line)


def _is_person(line: str) -> bool:
    return line.startswith(PERSON)


def _is_cleared(text: str) -> bool:
    return len(text) < CLEARED_MAX_CHARS and _CLEARED_WORD.search(text) is not None


def _listed_names(listing: _Result) -> list[str]:
    if listing.is_error:
        raise ValueError(opening_of(listing.text))
    try:
        entries = json.loads(listing.text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"it is not JSON ({exc.msg})") from exc
    if not isinstance(entries, list) or not all(
        isinstance(entry, dict) and isinstance(entry.get("name"), str) for entry in entries
    ):
        raise ValueError('it is not a JSON array of objects with a "name"')
    return _unique([entry["name"] for entry in entries])


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))

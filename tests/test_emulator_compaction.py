"""The emulated agent under compaction: it answers a summary request with what the range holds and nothing
else, reads the summary back as its own notes, writes long summaries when asked, and takes documents named in
the person's later turns."""

from __future__ import annotations

from typing import Any

from emulator.agent import READ_DOCUMENT, decide
from emulator.conversation import Conversation
from plimsoll.compaction import instruction, summary_text
from tests.support_emulator import expected_note

TOOLS = [{"name": READ_DOCUMENT, "input_schema": {"type": "object"}}]
DOCS = {"a.txt": "Alpha text. " * 20, "b.txt": "Beta text. " * 20, "c.txt": "Gamma text. " * 20}


def blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def read_round(index: int, name: str, text: str = "") -> list[dict[str, Any]]:
    call = {"type": "tool_use", "id": f"t{index}", "name": READ_DOCUMENT, "input": {"name": name}}
    said = blocks(text) if text else []
    return [
        {"role": "assistant", "content": [*said, call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{index}", "content": DOCS[name]}]},
    ]


def turn(messages: list[dict[str, Any]]) -> Any:
    conversation = Conversation(model="m", system=[], tools=TOOLS, messages=messages, max_tokens=4_000)
    return decide(conversation, input_tokens=1_000, anxious=False, delegate_group=8)


def test_a_summary_request_is_answered_with_the_notes_calls_and_the_persons_words_of_the_range() -> None:
    first: dict[str, Any] = {"role": "user", "content": blocks("Read `a.txt`, then write a summary of each document.")}
    earlier = summary_text('NOTE z.txt: 3 chars, sha256 000000000000, starts "zzz"\nPERSON: Also `z.txt`.', 5)
    first["content"].append({"type": "text", "text": earlier})
    messages = [
        first,
        *read_round(1, "a.txt"),
        {"role": "assistant", "content": blocks(f"{expected_note('a.txt', DOCS['a.txt'])}\nSUMMARY a.txt: Alpha")},
        {"role": "user", "content": blocks("Please read `b.txt` as well, word for word.")},
        *read_round(2, "b.txt", "Reading on."),
    ]
    messages[-1] = {**messages[-1], "content": [*messages[-1]["content"], *blocks(instruction(2, 4_000))]}
    reply = turn(messages)
    assert reply.tool_calls == []
    assert reply.text.splitlines() == [
        'NOTE z.txt: 3 chars, sha256 000000000000, starts "zzz"',  # the earlier summary, carried over
        "PERSON: Also `z.txt`.",
        'CALLED read_document {"name":"a.txt"}',
        expected_note("a.txt", DOCS["a.txt"]),  # the SUMMARY paragraph is the agent's prose: left out
        "PERSON: Please read `b.txt` as well, word for word.",
    ]  # the last two messages (the read of b.txt and its result) are kept, not summarized


def test_the_summary_in_the_first_message_counts_as_notes_and_names_the_persons_documents() -> None:
    notes = "\n".join([expected_note("a.txt", DOCS["a.txt"]), "PERSON: Please read `c.txt` too."])
    first = {"role": "user", "content": [*blocks("Read `a.txt`."), *blocks(summary_text(notes, 3))]}
    messages = [first, *read_round(1, "b.txt")]  # b.txt was named in a turn the summary does not quote: unknown
    assert turn(messages).tool_calls[0].input == {"name": "c.txt"}  # a.txt is noted; c.txt comes from the person


def test_names_in_later_turns_are_read_and_a_written_summary_quotes_the_document() -> None:
    messages = [
        {"role": "user", "content": blocks("Read what I name and write a summary of each document.")},
        {"role": "assistant", "content": blocks("Which ones?")},
        {"role": "user", "content": blocks("Please read `a.txt`, then `b.txt`.")},
    ]
    assert turn(messages).tool_calls[0].input == {"name": "a.txt"}
    messages.extend(read_round(1, "a.txt"))
    written = turn(messages)
    assert written.text.splitlines() == [expected_note("a.txt", DOCS["a.txt"]), f"SUMMARY a.txt: {DOCS['a.txt']}"]
    assert written.tool_calls[0].input == {"name": "b.txt"}


def test_a_summary_over_its_stated_limit_leaves_out_the_calls_then_the_oldest_notes() -> None:
    """A summary that cannot hold everything keeps the newest notes: the model is told its limit and leaves out
    the oldest lines, rather than being cut at max_tokens, which would lose the end, where the newest notes are."""
    note_a, note_b = expected_note("a.txt", DOCS["a.txt"]), expected_note("b.txt", DOCS["b.txt"])
    messages = [
        {"role": "user", "content": blocks("Read `a.txt`, `b.txt` and `c.txt`.")},
        *read_round(1, "a.txt"),
        *read_round(2, "b.txt", note_a),
        *read_round(3, "c.txt", note_b),
    ]

    def summary(limit: int) -> list[str]:
        asked = {**messages[-1], "content": [*messages[-1]["content"], *blocks(instruction(0, limit))]}
        conversation = Conversation(
            model="m", system=[], tools=TOOLS, messages=[*messages[:-1], asked], max_tokens=limit
        )
        return decide(conversation, input_tokens=1_000, anxious=False, delegate_group=8, count=words).text.splitlines()

    everything = summary(1_000)
    assert everything == [
        'CALLED read_document {"name":"a.txt"}',
        note_a,
        'CALLED read_document {"name":"b.txt"}',
        note_b,
        'CALLED read_document {"name":"c.txt"}',
    ]
    assert summary(words(f"{note_a}\n{note_b}")) == [note_a, note_b]  # the calls left out first
    assert summary(words(note_b)) == [note_b]  # then the oldest note: the newest stays


def words(text: str) -> int:
    return len(text.split())

"""Building canonical conversations for the context-engine tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Words in several scripts, so that results of the same length cost different numbers of tokens.
WORDS = {
    "en": ["the", "river", "runs", "past", "the", "old", "mill", "where", "children", "play", "and", "the"],
    "ru": ["река", "течёт", "мимо", "старой", "мельницы", "где", "играют", "дети", "а", "мельник", "мешки"],
    "zh": list("河水流过老磨坊孩子们在那里玩耍磨坊主数着他的袋子"),
    "json": ['{"id":', "1024,", '"tags":', '["a",', '"b"],', '"ok":', "true},"],
}


def text_of(script: str, words: int, seed: int = 0) -> str:
    vocabulary = WORDS[script]
    joiner = "" if script == "zh" else " "
    return joiner.join(vocabulary[(seed + i * 7) % len(vocabulary)] for i in range(words))


def call(tool_id: str, name: str = "read_document", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def result(tool_id: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, **extra}


def tool_round(index: int, content: str, *, text: str | None = None) -> list[dict[str, Any]]:
    tool_id = f"toolu_{index:05d}"
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return [
        {"role": "assistant", "content": [*blocks, call(tool_id, name=f"doc{index}.txt")]},
        {"role": "user", "content": [result(tool_id, content)]},
    ]


@st.composite
def conversations(draw: st.DrawFn, max_rounds: int = 24, max_words: int = 600) -> list[dict[str, Any]]:
    """Well-formed conversations: an instruction, then tool rounds (one to three parallel calls, results of
    varied sizes and scripts, some errors, some with a remark beside the results) and new user turns."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": draw(st.sampled_from(["Read.", "Check every file."]))}
    ]
    scripts = st.sampled_from(sorted(WORDS))
    next_id = 0
    for _ in range(draw(st.integers(0, max_rounds))):
        if draw(st.integers(0, 5)) == 0:
            messages.append({"role": "assistant", "content": "Done with that part."})
            messages.append({"role": "user", "content": [{"type": "text", "text": "Now the next part."}]})
            continue
        ids = [f"toolu_{next_id + k:05d}" for k in range(draw(st.integers(1, 3)))]
        next_id += len(ids)
        intro = [{"type": "text", "text": "Reading."}] if draw(st.booleans()) else []
        messages.append({"role": "assistant", "content": [*intro, *(call(i) for i in ids)]})
        results = []
        for tool_id in ids:
            body = text_of(draw(scripts), draw(st.integers(0, max_words)), seed=next_id)
            extra = {"is_error": True} if draw(st.integers(0, 9)) == 0 else {}
            as_blocks = draw(st.booleans())
            results.append(result(tool_id, [{"type": "text", "text": body}] if as_blocks else body, **extra))
        remark = [{"type": "text", "text": "Keep going."}] if draw(st.integers(0, 7)) == 0 else []
        messages.append({"role": "user", "content": [*results, *remark]})
    return messages

"""The model emulator for tests: one server for the whole session, reset before each test that asks for it.

- ``emulator``: the session's ``EmulatorServer`` (default settings: 1,000,000-token limit, cl100k). Point the
  Anthropic SDK at ``emulator.base_url`` and the OpenAI SDK at ``emulator.openai_base_url``.
- ``emulator_answers_every_model`` (for every test): the settings route every model to that emulator.
- ``emulator_reset``: the same server after ``reset()``: no stats, no cache entries, no faults, and the
  starting settings back. Use it in any test that changes settings or reads stats.
- ``anthropic_provider`` / ``openai_provider``: the adapters pointed at the reset emulator.
- ``play_documents``: plays the tool side of a job (``list_documents``, ``read_document``, ``delegate``)
  against a provider, for tests that drive the emulator's agent to the end of a task.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from emulator import EmulatorConfig, EmulatorServer
from testbed.stack import environment
from worker.providers import AnthropicProvider, OpenAIProvider
from worker.providers.base import Provider, Reply

TEST_API_KEY = "test-key"

DOCUMENT_TOOLS: list[dict[str, Any]] = [
    {
        "name": "list_documents",
        "description": "List the documents of this job.",
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": "read_document",
        "description": "Read one document in full.",
        "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
]
DELEGATE_TOOL: dict[str, Any] = {
    "name": "delegate",
    "description": "Hand a task to a subagent and get its final answer.",
    "input_schema": {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]},
}


@pytest.fixture(scope="session")
def emulator() -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig()) as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def emulator_answers_every_model(emulator: EmulatorServer) -> Iterator[None]:
    """The suite's jobs run on the session's emulator, real model names too, as an operator may choose with
    PLIMSOLL_REAL_MODELS_ON_EMULATOR. The default routing (a real model needs its provider's key, and goes to
    the provider's address) is tested on its own, with these settings taken away (tests/test_endpoints.py)."""
    with environment({"PLIMSOLL_EMULATOR_URL": emulator.base_url, "PLIMSOLL_REAL_MODELS_ON_EMULATOR": "true"}):
        yield


@pytest.fixture
def emulator_reset(emulator: EmulatorServer) -> EmulatorServer:
    emulator.reset()
    return emulator


@pytest.fixture
def anthropic_provider(emulator_reset: EmulatorServer) -> AnthropicProvider:
    return AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url, timeout=30.0)


@pytest.fixture
def openai_provider(emulator_reset: EmulatorServer) -> OpenAIProvider:
    return OpenAIProvider(api_key=TEST_API_KEY, base_url=emulator_reset.openai_base_url, timeout=30.0)


@dataclass
class DocumentJob:
    """The transcript of one played job."""

    messages: list[dict[str, Any]]
    replies: list[Reply] = field(default_factory=list)

    @property
    def final_text(self) -> str:
        return "\n".join(block["text"] for block in self.replies[-1].content if block["type"] == "text")


# Shapes the conversation before each request: gets the messages, returns what to send.
Shaper = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def play_documents(
    provider: Provider,
    documents: dict[str, str],
    instruction: str,
    *,
    system: str = "",
    tools: list[dict[str, Any]] | None = None,
    shape: Shaper | None = None,
    max_steps: int = 200,
    max_tokens: int = 1024,
    model: str = "emulated-model",
    page_chars: int | None = None,
) -> DocumentJob:
    """Run a job to its end (a reply that calls no tool) and return the transcript. ``shape`` sees the full
    conversation before every request and returns the messages to send (e.g. with old results cleared).
    With ``page_chars``, ``read_document`` hands out longer documents in pages, as Plimsoll's tool does."""
    job = DocumentJob(messages=[{"role": "user", "content": instruction}])
    tool_list = DOCUMENT_TOOLS if tools is None else tools
    for _ in range(max_steps):
        to_send = shape(job.messages) if shape else job.messages
        reply = provider.send(model=model, system=system, messages=to_send, tools=tool_list, max_tokens=max_tokens)
        job.replies.append(reply)
        job.messages.append({"role": "assistant", "content": reply.content})
        calls = [block for block in reply.content if block["type"] == "tool_use"]
        if not calls:
            return job
        results = [
            _run_tool(provider, documents, call, system, tool_list, shape, max_tokens, model, page_chars)
            for call in calls
        ]
        job.messages.append({"role": "user", "content": results})
    raise AssertionError(f"the job did not finish in {max_steps} steps")


def _run_tool(
    provider: Provider,
    documents: dict[str, str],
    call: dict[str, Any],
    system: str,
    tools: list[dict[str, Any]],
    shape: Shaper | None,
    max_tokens: int,
    model: str,
    page_chars: int | None,
) -> dict[str, Any]:
    name, arguments = call["name"], call["input"]
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call["id"]}
    if name == "list_documents":
        result["content"] = json.dumps([{"name": document} for document in documents])
    elif name == "read_document" and arguments.get("name") in documents:
        result["content"] = _page(
            arguments["name"], documents[arguments["name"]], arguments.get("offset", 0), page_chars
        )
    elif name == "delegate":
        subtools = [tool for tool in tools if tool["name"] != "delegate"]
        subjob = play_documents(
            provider,
            documents,
            arguments["task"],
            system=system,
            tools=subtools,
            shape=shape,
            max_tokens=max_tokens,
            model=model,
            page_chars=page_chars,
        )
        result["content"] = subjob.final_text
    else:
        result["content"] = f"no such document: {arguments.get('name')!r}"
        result["is_error"] = True
    return result


def _page(name: str, text: str, offset: int, page_chars: int | None) -> str:
    """The document whole, or the page at ``offset`` with the line Plimsoll's read_document ends a page with."""
    if page_chars is None or (offset == 0 and len(text) <= page_chars):
        return text
    end = min(len(text), offset + page_chars)
    read_on = f" Call read_document with offset={end} to read on." if end < len(text) else ""
    return f"{text[offset:end]}\n\n[{name}: characters {offset:,} to {end:,} of {len(text):,}.{read_on}]"

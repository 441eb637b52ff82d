"""The emulator's billing log (``GET /v1/emulator/billing``): every request the model answered, named by the
request id the SDKs hand the adapters, with its model and usage; refusals are not billed."""

from __future__ import annotations

import pytest

from emulator import EmulatorServer
from worker.errors import TooLong
from worker.providers.anthropic import AnthropicProvider
from worker.providers.base import Provider, Reply
from worker.providers.openai import OpenAIProvider

MODEL = "emulator-small"


def ask(provider: Provider, text: str) -> Reply:
    return provider.send(model=MODEL, system="", messages=[{"role": "user", "content": text}], tools=[], max_tokens=64)


@pytest.mark.parametrize("wire", ["anthropic", "openai"])
def test_each_answered_request_is_billed_once_under_the_id_the_adapter_reads(
    emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider, openai_provider: OpenAIProvider, wire: str
) -> None:
    provider: Provider = anthropic_provider if wire == "anthropic" else openai_provider
    replies = [ask(provider, "Say hello."), ask(provider, "Say hello.")]  # the same request twice: billed twice
    emulator_reset.configure(limit=50)
    with pytest.raises(TooLong):
        ask(provider, "word " * 200)
    billed = emulator_reset.billing()
    assert [entry["request_id"] for entry in billed] == [reply.request_id for reply in replies]
    assert len({reply.request_id for reply in replies}) == 2
    for entry, reply in zip(billed, replies, strict=True):
        usage = reply.usage
        assert entry["model"] == MODEL
        assert (entry["uncached_tokens"], entry["cache_write_tokens"], entry["cache_read_tokens"]) == (
            usage.input_tokens,
            usage.cache_write_tokens,
            usage.cache_read_tokens,
        )
        assert entry["output_tokens"] == usage.output_tokens > 0
    assert len(emulator_reset.stats()["log"]) == 3  # the rejection is in the log, not on the bill

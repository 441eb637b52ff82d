"""Rate limits in the emulator, as the providers apply them: token buckets per key and model class, the
rate-limit headers on every answer, 429 with retry-after, cache reads left out, a second client's share."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anthropic
import openai
import pytest

from emulator import EmulatorServer
from emulator.config import ConfigError, EmulatorConfig, RateLimitConfig
from emulator.rate_limits import INPUT_TOKENS, OUTPUT_TOKENS, REQUESTS, RateLimiter, model_class

HELLO: list[Any] = [{"role": "user", "content": "Hello."}]


def admit(limiter: RateLimiter, now: float, *, tokens: int = 0, read: int = 0, max_tokens: int = 0, key: str = "k",
          model: str = "claude-sonnet-4-5") -> bool:  # fmt: skip
    admission = limiter.admit(
        key=key, model=model, input_tokens=tokens, cache_read=read, max_tokens=max_tokens, now=now
    )
    return admission.admitted


def test_a_bucket_holds_a_minute_and_refills_continuously() -> None:
    limiter = RateLimiter(RateLimitConfig(input_tokens_per_minute=60_000))
    assert admit(limiter, 0.0, tokens=60_000)  # a full minute's worth at once
    refused = limiter.admit(key="k", model="claude-sonnet-4-5", input_tokens=1_000, cache_read=0, max_tokens=0, now=0.5)
    assert not refused.admitted and refused.refused_by == INPUT_TOKENS
    assert refused.retry_after == pytest.approx(0.5)  # 1,000 tokens refill in 1 s at 1,000 tokens/s; 0.5 s have
    assert admit(limiter, 1.0, tokens=1_000)
    assert not admit(limiter, 1.0, tokens=1)  # nothing left, and nothing was taken by the refusal


def test_limits_are_per_key_and_model_class() -> None:
    limiter = RateLimiter(RateLimitConfig(requests_per_minute=1))
    assert admit(limiter, 0.0, model="claude-sonnet-4-5")
    assert not admit(limiter, 0.0, model="claude-sonnet-4-6")  # the same class
    assert admit(limiter, 0.0, model="claude-haiku-4-5")
    assert admit(limiter, 0.0, key="another key")
    assert (model_class("claude-sonnet-4-5-20250929"), model_class("plimsoll-emulator")) == (
        "claude-sonnet",
        "plimsoll-emulator",
    )


def test_cache_reads_are_left_out_unless_counted() -> None:
    excluded = RateLimiter(RateLimitConfig(input_tokens_per_minute=10_000))
    assert admit(excluded, 0.0, tokens=50_000, read=45_000)  # 5,000 uncached
    assert admit(excluded, 0.0, tokens=50_000, read=45_000)
    assert not admit(excluded, 0.0, tokens=50_000, read=45_000)
    counted = RateLimiter(RateLimitConfig(input_tokens_per_minute=60_000, count_cache_reads=True))
    assert admit(counted, 0.0, tokens=50_000, read=45_000)
    assert not admit(counted, 0.0, tokens=50_000, read=45_000)


def test_output_is_taken_as_max_tokens_then_the_unused_part_given_back() -> None:
    limiter = RateLimiter(RateLimitConfig(output_tokens_per_minute=20_000))
    first = limiter.admit(key="k", model="m", input_tokens=10, cache_read=0, max_tokens=16_000, now=0.0)
    assert first.admitted
    assert not admit(limiter, 0.0, max_tokens=16_000, model="m")
    limiter.settle(first, key="k", model="m", output_tokens=1_000, now=0.0)
    assert admit(limiter, 0.0, max_tokens=16_000, model="m")


def test_a_full_bucket_admits_a_request_larger_than_a_minute() -> None:
    limiter = RateLimiter(RateLimitConfig(input_tokens_per_minute=6_000))
    assert admit(limiter, 0.0, tokens=9_000)
    refused = limiter.admit(key="k", model="claude-sonnet-4-5", input_tokens=9_000, cache_read=0, max_tokens=0, now=0.0)
    assert refused.retry_after == pytest.approx(90.0)  # 3,000 owed plus 6,000 to be full again, at 100/s


def test_a_second_client_takes_its_share_of_the_refill() -> None:
    alone, shared = (
        RateLimiter(RateLimitConfig(input_tokens_per_minute=60_000, second_client_share=s)) for s in (0, 0.2)
    )
    for limiter in (alone, shared):
        assert admit(limiter, 0.0, tokens=60_000)
    assert admit(alone, 10.0, tokens=10_000)
    assert not admit(shared, 10.0, tokens=10_000)
    assert admit(shared, 10.0, tokens=8_000)  # 80 % of the refill is left for us


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="second_client_share"):
        RateLimitConfig(second_client_share=1.0)
    with pytest.raises(ConfigError, match="input_tokens_per_minute"):
        EmulatorConfig().updated({"rate_limits": {"input_tokens_per_minute": -1}})
    with pytest.raises(ConfigError, match="unknown rate_limits setting"):
        EmulatorConfig().updated({"rate_limits": {"tokens": 5}})


@pytest.fixture
def client(emulator_reset: EmulatorServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0, timeout=30)


def test_without_limits_no_rate_limit_headers(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(model="m", max_tokens=20, messages=HELLO)
    assert not [name for name in raw.headers if "ratelimit" in name]


def test_every_answer_carries_the_headers_and_a_refusal_is_a_429(
    emulator_reset: EmulatorServer, client: anthropic.Anthropic
) -> None:
    config = emulator_reset.configure(
        rate_limits={"requests_per_minute": 2, "input_tokens_per_minute": 10_000, "output_tokens_per_minute": 5_000}
    )
    assert config["rate_limits"]["requests_per_minute"] == 2
    raw = client.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=1_000, messages=HELLO)
    reply = raw.parse()
    headers = raw.headers
    for kind, limit in ((REQUESTS, 2), (INPUT_TOKENS, 10_000), (OUTPUT_TOKENS, 5_000)):
        assert headers[f"anthropic-ratelimit-{kind}-limit"] == str(limit)
        datetime.fromisoformat(headers[f"anthropic-ratelimit-{kind}-reset"]).astimezone(UTC)
    assert headers["anthropic-ratelimit-requests-remaining"] == "1"
    remaining = int(headers["anthropic-ratelimit-input-tokens-remaining"])
    assert 10_000 - reply.usage.input_tokens <= remaining < 10_000
    output_left = int(headers["anthropic-ratelimit-output-tokens-remaining"])
    assert 5_000 - reply.usage.output_tokens <= output_left < 5_000  # max_tokens taken, the unused part back
    assert headers["x-ratelimit-limit-requests"] == "2" and headers["x-ratelimit-limit-tokens"] == "10000"
    client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=HELLO)
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=HELLO)
    assert refused.value.response.headers["retry-after"] == "30"  # one request per 30 s
    assert refused.value.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert "2 requests per minute" in refused.value.message
    emulator_reset.advance_clock(30)
    client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=HELLO)
    stats = emulator_reset.stats()
    assert stats["rejections"] == {"rate_limited": 1}
    assert [record["status"] for record in stats["log"]] == [200, 200, 429, 200]


def test_the_input_limit_leaves_cache_reads_out(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    emulator_reset.configure(rate_limits={"input_tokens_per_minute": 3_000})
    long_text = "The same long prefix of a document, read again and again. " * 200  # ~2,400 tokens
    messages: Any = [
        {"role": "user", "content": [{"type": "text", "text": long_text, "cache_control": {"type": "ephemeral"}}]}
    ]
    first = client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=messages)
    assert first.usage.cache_creation_input_tokens
    second = client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=messages)  # read: not counted
    assert second.usage.cache_read_input_tokens
    emulator_reset.configure(rate_limits={"count_cache_reads": True})  # fresh buckets, cache reads counted
    client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=messages)
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=messages)


def test_the_openai_route_has_its_headers_and_429(emulator_reset: EmulatorServer) -> None:
    emulator_reset.configure(rate_limits={"requests_per_minute": 1})
    client = openai.OpenAI(api_key="k", base_url=emulator_reset.openai_base_url, max_retries=0, timeout=30)
    hello: Any = [{"role": "user", "content": "Hello."}]
    raw = client.chat.completions.with_raw_response.create(model="gpt-5", messages=hello)
    assert (raw.headers["x-ratelimit-limit-requests"], raw.headers["x-ratelimit-remaining-requests"]) == ("1", "0")
    assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="gpt-5", messages=hello)
    assert refused.value.response.headers["retry-after"] == "60"

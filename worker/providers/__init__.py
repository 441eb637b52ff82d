"""Model provider adapters: canonical messages in, a canonical ``Reply`` out, typed errors on failure."""

from __future__ import annotations

from models.settings import Settings
from worker.providers.anthropic import AnthropicProvider
from worker.providers.base import Provider, Reply, Timeouts, Usage
from worker.providers.openai import OpenAIProvider

PROVIDERS = ("anthropic", "openai")


def timeouts(settings: Settings) -> Timeouts:
    """A model call's timeouts, as the settings give them."""
    return Timeouts(
        idle=settings.request_timeout_seconds,
        connect=settings.connect_timeout_seconds,
        output_tokens_per_second=settings.min_output_tokens_per_second,
    )


def make_provider(
    name: str, *, api_key: str, base_url: str | None = None, timeouts: Timeouts | None = None
) -> Provider:
    """The adapter for ``name`` ("anthropic" or "openai"), pointed at ``base_url`` (None: the provider's own)."""
    if name == "anthropic":
        return AnthropicProvider(api_key=api_key, base_url=base_url, timeouts=timeouts)
    if name == "openai":
        return OpenAIProvider(api_key=api_key, base_url=base_url, timeouts=timeouts)
    raise ValueError(f"unknown provider {name!r}; expected one of {', '.join(PROVIDERS)}")


__all__ = ["PROVIDERS", "AnthropicProvider", "OpenAIProvider", "Provider", "Reply", "Usage", "make_provider"]

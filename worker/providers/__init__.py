"""Model provider adapters: canonical messages in, a canonical ``Reply`` out, typed errors on failure."""

from __future__ import annotations

from worker.providers.anthropic import AnthropicProvider
from worker.providers.base import Provider, Reply, Usage
from worker.providers.openai import OpenAIProvider

PROVIDERS = ("anthropic", "openai")


def make_provider(name: str, *, api_key: str, base_url: str | None = None, timeout: float = 600.0) -> Provider:
    """The adapter for ``name`` ("anthropic" or "openai"), pointed at ``base_url`` (None: the provider's own)."""
    if name == "anthropic":
        return AnthropicProvider(api_key=api_key, base_url=base_url, timeout=timeout)
    if name == "openai":
        return OpenAIProvider(api_key=api_key, base_url=base_url, timeout=timeout)
    raise ValueError(f"unknown provider {name!r}; expected one of {', '.join(PROVIDERS)}")


__all__ = ["PROVIDERS", "AnthropicProvider", "OpenAIProvider", "Provider", "Reply", "Usage", "make_provider"]

"""The emulator's settings, fixed at start and changeable at run time through the admin API."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

# What a fault can be: an HTTP 429 with retry-after, Anthropic's 529 overloaded_error (503 on the OpenAI
# route), a 500 api_error, a connection dropped in the middle of the response, or a hang (nothing is sent for
# ``hang_seconds``, then the connection is dropped).
FAULT_KINDS = ("429", "529", "500", "drop", "hang")
# A scripted fault list may also say "none": that request is served normally.
NO_FAULT = "none"


class ConfigError(ValueError):
    """A setting has the wrong type or is out of range."""


@dataclass(frozen=True)
class FaultConfig:
    """Which model requests fail, and how.

    ``script`` is served first, one entry per request ("the next 2 requests get 429" is ``("429", "429")``);
    after it runs out, each request fails with probability ``rate``, its kind drawn from ``kinds``. The draws
    come from a generator seeded with ``seed``, so the same requests see the same faults.
    """

    rate: float = 0.0
    kinds: tuple[str, ...] = ("429",)
    script: tuple[str, ...] = ()
    retry_after_seconds: float = 1.0
    seed: int = 0
    hang_seconds: float = 3600.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ConfigError(f"faults.rate must be between 0 and 1, not {self.rate}")
        if not self.kinds or any(kind not in FAULT_KINDS for kind in self.kinds):
            raise ConfigError(f"faults.kinds must be a non-empty list drawn from {list(FAULT_KINDS)}")
        if any(kind not in (*FAULT_KINDS, NO_FAULT) for kind in self.script):
            raise ConfigError(f"faults.script entries must be one of {[*FAULT_KINDS, NO_FAULT]}")
        if not (math.isfinite(self.retry_after_seconds) and self.retry_after_seconds >= 0):
            raise ConfigError("faults.retry_after_seconds must be a number >= 0")
        if not (math.isfinite(self.hang_seconds) and self.hang_seconds >= 0):
            raise ConfigError("faults.hang_seconds must be a number >= 0")


@dataclass(frozen=True)
class RateLimitConfig:
    """Per API key and model class, what may be sent per minute (0: no limit); see emulator/rate_limits.py."""

    requests_per_minute: int = 0
    input_tokens_per_minute: int = 0
    output_tokens_per_minute: int = 0
    count_cache_reads: bool = False
    """Whether cache reads count as input tokens (Anthropic's current models: no; other providers: yes)."""
    second_client_share: float = 0.0
    """The share of every limit another client of the same key takes in the background."""

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "input_tokens_per_minute", "output_tokens_per_minute"):
            if getattr(self, name) < 0:
                raise ConfigError(f"rate_limits.{name} must be >= 0 (0: no limit)")
        if not (math.isfinite(self.second_client_share) and 0.0 <= self.second_client_share < 1.0):
            raise ConfigError("rate_limits.second_client_share must be a number from 0 up to (not including) 1")


@dataclass(frozen=True)
class EmulatorConfig:
    """Everything the emulator can be told. ``api_key=None`` accepts any key."""

    limit: int = 1_000_000
    tokenizer: str = "cl100k"
    count_scale: float = 1.0
    """Input tokens counted per tokenizer token: above 1, a model whose tokenizer counts more than the
    estimate profile expects (newer Claude tokenizers count up to 1.35x more for the same text)."""
    max_output_tokens: int = 16_000
    """What the models endpoint reports as the model's ``max_tokens``."""
    min_cacheable_tokens: int = 1024
    cache_ttl_seconds: float = 300.0
    cache_lookback_blocks: int = 20
    faults: FaultConfig = field(default_factory=FaultConfig)
    rate_limits: RateLimitConfig = field(default_factory=RateLimitConfig)
    latency_seconds: float = 0.0
    anxious: bool = False
    delegate_group: int = 10
    api_key: str | None = None
    stop_at_context_window: bool = False
    """When input + max_tokens pass the limit (input alone fitting), answer as newer Anthropic models do:
    write until the window is full and stop with ``model_context_window_exceeded``, instead of a 400."""

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ConfigError(f"limit must be at least 1, not {self.limit}")
        if not (math.isfinite(self.count_scale) and 0.5 <= self.count_scale <= 4.0):
            raise ConfigError("count_scale must be a number between 0.5 and 4")
        if self.max_output_tokens < 1:
            raise ConfigError("max_output_tokens must be at least 1")
        if self.min_cacheable_tokens < 0:
            raise ConfigError("min_cacheable_tokens must be >= 0")
        if not (math.isfinite(self.cache_ttl_seconds) and self.cache_ttl_seconds > 0):
            raise ConfigError("cache_ttl_seconds must be a number > 0")
        if self.cache_lookback_blocks < 1:
            raise ConfigError("cache_lookback_blocks must be at least 1")
        if not (math.isfinite(self.latency_seconds) and self.latency_seconds >= 0):
            raise ConfigError("latency_seconds must be a number >= 0")
        if self.delegate_group < 1:
            raise ConfigError("delegate_group must be at least 1")

    def updated(self, changes: Mapping[str, Any]) -> EmulatorConfig:
        """A copy with ``changes`` applied, as sent to ``POST /v1/emulator/config``. ``faults`` and
        ``rate_limits`` may be given partially: the fields they leave out keep their values."""
        known = {f.name: f for f in dataclasses.fields(self)}
        values: dict[str, Any] = {}
        for name, value in changes.items():
            if name not in known:
                raise ConfigError(f"unknown setting {name!r}; known: {sorted(known)}")
            if name in _NESTED:
                values[name] = _updated_nested(name, getattr(self, name), value)
            else:
                values[name] = _checked(name, value, known[name].type)
        return dataclasses.replace(self, **values)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_NESTED = ("faults", "rate_limits")
Nested = TypeVar("Nested", FaultConfig, RateLimitConfig)


def _updated_nested(group: str, current: Nested, value: object) -> Nested:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{group} must be an object")
    known = {f.name: f for f in dataclasses.fields(current)}
    values: dict[str, Any] = {}
    for name, item in value.items():
        if name not in known:
            raise ConfigError(f"unknown {group} setting {name!r}; known: {sorted(known)}")
        values[name] = _checked(f"{group}.{name}", item, known[name].type)
    return dataclasses.replace(current, **values)


def _checked(name: str, value: object, annotation: object) -> object:
    """``value`` converted to the field's type, or a ConfigError. Annotations are strings here (postponed
    evaluation), so they are matched by name."""
    expected = str(annotation)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if expected == "bool" and isinstance(value, bool):
        return value
    if expected == "int" and number and isinstance(value, int):
        return value
    if expected == "float" and number and isinstance(value, int | float):
        return float(value)
    if expected == "str" and isinstance(value, str):
        return value
    if expected == "str | None" and (value is None or isinstance(value, str)):
        return value
    if expected == "tuple[str, ...]" and isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"{name} must be of type {expected}, not {type(value).__name__}")

"""Everything one emulator instance holds between requests: settings, counter, caches, faults, stats, clock."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from emulator.config import EmulatorConfig
from emulator.counting import TokenCounter
from emulator.faults import FaultInjector
from emulator.prompt_cache import AnthropicPromptCache, OpenAIPrefixCache
from emulator.rate_limits import RateLimiter
from emulator.stats import Stats
from vocab import load_encoding


class EmulatorState:
    def __init__(self, config: EmulatorConfig) -> None:
        self.initial_config = config
        self.config = config
        self.counter = TokenCounter(load_encoding(config.tokenizer), scale=config.count_scale)
        self.anthropic_cache = AnthropicPromptCache()
        self.openai_cache = OpenAIPrefixCache()
        self.faults = FaultInjector(config.faults)
        self.rate_limiter = RateLimiter(config.rate_limits)
        self.stats = Stats()
        self.clock_offset = 0.0
        self.served = 0

    def now(self) -> float:
        """The cache clock: monotonic time plus whatever ``advance_clock`` added."""
        return time.monotonic() + self.clock_offset

    def advance_clock(self, seconds: float) -> None:
        self.clock_offset += seconds

    def configure(self, changes: Mapping[str, Any]) -> EmulatorConfig:
        """Apply settings at run time. Faults given here restart the fault script and generator; rate limits
        given here start with full buckets."""
        self._use(
            self.config.updated(changes),
            restart_faults="faults" in changes,
            restart_limits="rate_limits" in changes,
        )
        return self.config

    def reset(self, *, keep_config: bool = False) -> None:
        """Forget stats, cache entries, rate-limit buckets and the clock offset; unless ``keep_config``, go
        back to the settings the emulator started with."""
        self.stats.clear()
        self.anthropic_cache.clear()
        self.openai_cache.clear()
        self.clock_offset = 0.0
        self._use(self.config if keep_config else self.initial_config, restart_faults=True, restart_limits=True)

    def next_serial(self) -> int:
        self.served += 1
        return self.served

    def _use(self, config: EmulatorConfig, *, restart_faults: bool, restart_limits: bool) -> None:
        if (config.tokenizer, config.count_scale) != (self.config.tokenizer, self.counter.scale):
            self.counter = TokenCounter(load_encoding(config.tokenizer), scale=config.count_scale)
        self.config = config
        if restart_faults:
            self.faults.configure(config.faults)
        if restart_limits:
            self.rate_limiter.configure(config.rate_limits)

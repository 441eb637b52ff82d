"""Deciding which model requests fail: a per-request header, then the scripted list, then the seeded rate."""

from __future__ import annotations

import random
from collections import deque

from emulator.config import FAULT_KINDS, NO_FAULT, ConfigError, FaultConfig

FAULT_HEADER = "x-emulator-fault"


class FaultInjector:
    def __init__(self, faults: FaultConfig) -> None:
        self.configure(faults)

    def configure(self, faults: FaultConfig) -> None:
        """Start over with these settings: the script is loaded afresh and the generator reseeded."""
        self.faults = faults
        self._script = deque(faults.script)
        self._rng = random.Random(faults.seed)

    def next_fault(self, header: str | None = None) -> str | None:
        """The fault for the next model request, or None. A header value applies to that request only and
        leaves the script and the generator untouched."""
        if header is not None:
            kind = header.strip().lower()
            if kind not in (*FAULT_KINDS, NO_FAULT):
                raise ConfigError(f"{FAULT_HEADER} must be one of {[*FAULT_KINDS, NO_FAULT]}, not {header!r}")
            return None if kind == NO_FAULT else kind
        if self._script:
            kind = self._script.popleft()
            return None if kind == NO_FAULT else kind
        if self.faults.rate > 0 and self._rng.random() < self.faults.rate:
            return self._rng.choice(self.faults.kinds)
        return None

    @property
    def scripted_left(self) -> int:
        return len(self._script)

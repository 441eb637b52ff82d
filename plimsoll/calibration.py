"""Correcting our estimates from the token counts the provider reports back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WINDOW = 8  # the factor follows the largest ratio among this many recent replies
MARGIN = 1.02  # head-room on top of the observed ratio, for the variation between one request and the next


@dataclass
class Calibrator:
    """Fed (our estimate of a request, the input tokens the provider reported for it), it gives the factor to
    multiply the next estimate by: never below 1.0, and after one reply at least the ratio that reply showed.

    Because one job's requests are much alike (the same documents, the same languages), the ratio of one
    reply predicts the next. Taking the largest of the recent ratios keeps the job safe when they vary;
    forgetting old ones lets the factor come down once the mix of the conversation changes.
    """

    recent: list[float] = field(default_factory=list)
    observations: int = 0

    def observe(self, estimated: int, reported: int) -> float:
        if estimated <= 0 or reported < 0:
            raise ValueError(f"need a positive estimate and a non-negative count, got {estimated}, {reported}")
        self.recent = [*self.recent, reported / estimated][-WINDOW:]
        self.observations += 1
        return self.factor

    @property
    def factor(self) -> float:
        if not self.recent:
            return 1.0
        return max(1.0, max(self.recent) * MARGIN)

    def correct(self, budget: int) -> int:
        """The budget to plan with, so that the real size of the request stays within ``budget``."""
        return int(budget / self.factor)

    def to_dict(self) -> dict[str, Any]:
        return {"recent": [round(r, 4) for r in self.recent], "observations": self.observations}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Calibrator:
        if not data:
            return cls()
        return cls(
            recent=[float(r) for r in data.get("recent", [])][-WINDOW:],
            observations=int(data.get("observations", 0)),
        )

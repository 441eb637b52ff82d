"""Correcting our estimates from the token counts the provider reports back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WINDOW = 8  # the factor follows the largest ratio among this many recent replies
MARGIN = 1.02  # head-room on top of the observed ratio, for the variation between one request and the next
FLOOR = 0.8  # the factor never goes below this: a budget is never planned as more than 1.25 times itself
SETTLED = 3  # the factor goes below 1.0 only once this many recent replies all came in under our estimates


@dataclass
class Calibrator:
    """Fed (our estimate of a request, the input tokens the provider reported for it), it gives the factor to
    multiply the next estimate by: after one reply at least the ratio that reply showed (plus a margin). It goes
    below 1.0, giving back what a profile that over-counts would waste, only when the last ``SETTLED`` or more
    replies all came in under our estimates, and never below ``floor``. A ``floor`` of 1.0 gives the one-sided
    calibrator (it only ever raises the factor).

    Because one job's requests are much alike (the same documents, the same languages), the ratio of one
    reply predicts the next. Taking the largest of the recent ratios keeps the job safe when they vary;
    forgetting old ones lets the factor come down once the mix of the conversation changes.
    """

    recent: list[float] = field(default_factory=list)
    observations: int = 0
    floor: float = FLOOR

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
        factor = max(self.recent) * MARGIN
        if factor < 1.0 and len(self.recent) < SETTLED:
            return 1.0
        return max(self.floor, factor)

    @property
    def pacing_factor(self) -> float:
        """The factor for pacing requests against a rate limit rather than fitting them into a budget: the mean of
        the recent ratios, without the margin, the floor or the wait for agreement (1.0 before any reply). A
        reservation is corrected by its reply's real count, but only after the steps behind it in the line were
        told when their turn comes: one that is too large holds them back for tokens that are never counted."""
        return sum(self.recent) / len(self.recent) if self.recent else 1.0

    def correct(self, budget: int) -> int:
        """The budget to plan with, so that the real size of the request stays within ``budget``."""
        return int(budget / self.factor)

    def to_dict(self) -> dict[str, Any]:
        return {"recent": [round(r, 4) for r in self.recent], "observations": self.observations}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, *, floor: float = FLOOR) -> Calibrator:
        if not data:
            return cls(floor=floor)
        return cls(
            recent=[float(r) for r in data.get("recent", [])][-WINDOW:],
            observations=int(data.get("observations", 0)),
            floor=floor,
        )

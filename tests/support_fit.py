"""What the tests of the fits share: a few real runs and results to fit on in seconds."""

from __future__ import annotations

import math

import numpy as np

from estimate_fit.fit_ascii import PATTERN_OF_PROFILE, Item, features, scripts_only
from estimate_fit.trajectories import trajectory_conversations, trajectory_results
from plimsoll import estimate_tokens
from plimsoll.estimate import UNIT, estimated_units
from plimsoll.profiles import PROFILES

PROFILES_FITTED = tuple(PATTERN_OF_PROFILE)


def few_items() -> list[Item]:
    """A few real runs and results, their real counts the shipped estimates ÷ 1.2 (for every profile)."""
    texts = [("real conversation", list(c.parts)) for c in trajectory_conversations()[:3]]
    texts += [("result", [s.text]) for s in trajectory_results()[:6]]

    def item(group: str, parts: list[str]) -> Item:
        pinned = {p: sum(estimated_units(t, scripts_only(PROFILES[p])) for t in parts) / UNIT for p in PROFILES_FITTED}
        real = {p: math.ceil(sum(estimate_tokens(t, p) for t in parts) / 1.2) for p in PROFILES_FITTED}
        return Item(group, "test", np.sum([features(t) for t in parts], axis=0), pinned, real)

    return [item(group, parts) for group, parts in texts]

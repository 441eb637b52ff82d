"""The truncation that came before Plimsoll: the worker's ``legacy`` job strategy, kept to reproduce the failure
it causes (``bench/three_failures.py``).

It cuts only at user turns and clears nothing. A subagent has a single user turn, its instruction, so there is
nowhere to cut: the request is sent as it is, however large, until the model rejects it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from plimsoll.estimate import Profile
from plimsoll.fitting import Plan, note_costs
from plimsoll.history import from_outlines
from plimsoll.messages import Outline
from plimsoll.profiles import get_profile


def legacy_plan(
    outlines: Sequence[Outline], budget: int, *, profile: str | Profile = "chars4", overhead: int = 0
) -> Plan:
    """Keep the first message, a note and the newest whole user turns that fit; if no cut fits, send it all."""
    history = from_outlines(outlines)
    total = overhead + sum(history.tokens)
    if total <= budget:
        return Plan("as_is", total, 1, (), (), "none")
    tail = [*reversed(list(accumulate(reversed(history.tokens)))), 0]
    head = overhead + history.tokens[0] + note_costs(get_profile(profile)).note_message
    for cut in (c for c in history.turn_starts if c > 1):
        if head + tail[cut] <= budget:
            return Plan("user_turns", head + tail[cut], cut, (), (), "message")
    return Plan("as_is", total, 1, (), (), "none")  # the old behaviour: over budget, sent anyway

"""Plimsoll's context engine: script-aware token estimates and fitting requests into a token budget.

Pure Python, standard library only, no I/O.
"""

from plimsoll.calibration import Calibrator
from plimsoll.estimate import Profile
from plimsoll.fitting import DoesNotFit, Fit, Plan, apply_plan, bodies_needed, build_request, fit, plan
from plimsoll.messages import InvalidConversation, Outline, Result, estimate_message, outline
from plimsoll.profiles import PROFILES, estimate_tokens, get_profile

__all__ = [
    "PROFILES",
    "Calibrator",
    "DoesNotFit",
    "Fit",
    "InvalidConversation",
    "Outline",
    "Plan",
    "Profile",
    "Result",
    "apply_plan",
    "bodies_needed",
    "build_request",
    "estimate_message",
    "estimate_tokens",
    "fit",
    "get_profile",
    "outline",
    "plan",
]

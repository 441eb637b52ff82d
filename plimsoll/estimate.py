"""Script-aware token estimates that run at C speed.

A byte-level BPE tokenizer spends tokens very differently by script: English prose costs about one token per
word, Russian about one per two letters, Chinese more than one per character. Characters / 4 therefore
undercounts everything that is not English. We estimate from the UTF-8 bytes instead:

* every byte belongs to a *class*: ASCII letters, digits, spaces, punctuation, ...; a multi-byte character is
  classed by its lead byte, which names its Unicode range (Cyrillic, Arabic, Indic, kana, Han, Hangul, emoji...);
* a profile charges each class a cost per byte, plus a cost per character and per UTF-8 continuation byte, and
  discounts for scripts that share a lead byte with costlier ones (Devanagari beside Tamil, say; the box drawing
  of ``tree`` views and tables beside the dashes and quotes of prose);
* an ASCII punctuation mark may cost more or less than its class (``/`` in paths, ``=`` in separator lines), and
  a byte pattern may cost extra or less each time it occurs: a run of eight spaces is one token or less in
  indented code and aligned columns, though eight spaces apart cost a token each;
* a pair of adjacent *word shapes* (:data:`SHAPES`: a space, a lower-case letter, a capital, anything else) may
  cost extra or less each time it occurs, which a byte's own cost cannot tell: a capital after a space starts a
  word ("Trust", often a token of its own), one after a lower-case letter starts a piece of an identifier
  ("getTrust").

The weights are fitted (``python -m estimate_fit.fit_profiles``) so that the estimate stays at or above the real count
of the profile's tokenizer. Nothing loops in Python over the text: one pass in C (``plimsoll/_scan.c``) sums
the bytes' costs and counts the pairs of shapes; a pattern costs one ``bytes.count``. Where the package was
installed without a C compiler, the same sums come from the standard library, a little more slowly:
``bytes.translate`` maps every byte to its cost, ``zlib.adler32`` (whose low half is one plus the sum of the
bytes, mod 65521) adds the costs up a few hundred bytes at a time, and each priced pair of shapes costs a
``bytes.count`` of a copy of the text translated into shapes.

Where the model's tokenizer itself is at hand, :func:`exact` makes a profile that counts with it instead (this
package does no I/O: the caller loads the tokenizer and hands its counting function in).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace


def _c_pass() -> Callable[[bytes, bytes], tuple[int, tuple[int, ...]]] | None:
    try:
        from plimsoll._scan import scan
    except ImportError:  # installed without a C compiler: the standard library does the same sums
        return None
    return scan


_compiled_scan = _c_pass()
C_PASS = _compiled_scan is not None  # whether the estimate counts with plimsoll/_scan.c here

UNIT = 256  # estimates are summed in 1/256 token
TABLE_UNIT = 4  # a table entry counts in 4/256 = 1/64 token; an entry is a byte, so at most 255/64 tokens
_ADLER_MODULUS = 65521
DENSE = 64  # discounts apply to a lead byte only when this many of its characters occur

# Byte classes. A multi-byte character is classed by its lead byte, which fixes its Unicode range.
CLASS_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "control": ((0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x7F, 0x7F)),
    "tab": ((0x09, 0x09),),
    "newline": ((0x0A, 0x0A), (0x0D, 0x0D)),
    "space": ((0x20, 0x20),),
    "quote": ((0x22, 0x22), (0x27, 0x27), (0x60, 0x60)),
    "bracket": ((0x28, 0x29), (0x3C, 0x3C), (0x3E, 0x3E), (0x5B, 0x5B), (0x5D, 0x5D), (0x7B, 0x7B), (0x7D, 0x7D)),
    "punct": (
        (0x21, 0x21),
        (0x23, 0x26),
        (0x2A, 0x2F),
        (0x3A, 0x3B),
        (0x3D, 0x3D),
        (0x3F, 0x40),
        (0x5C, 0x5C),
        (0x5E, 0x5F),
        (0x7C, 0x7C),
        (0x7E, 0x7E),
    ),
    "digit": ((0x30, 0x39),),
    "upper": ((0x41, 0x5A),),
    "lower": ((0x61, 0x7A),),
    "continuation": ((0x80, 0xBF),),
    "latin1": ((0xC2, 0xC3),),  # U+0080-00FF: accented Latin, NBSP, «»
    "latin_ext": ((0xC4, 0xC9),),  # U+0100-024F: Latin Extended A and B
    "ipa_modifiers": ((0xCA, 0xCB),),  # U+0250-02FF
    "combining": ((0xCC, 0xCD),),  # U+0300-037F: combining marks, the start of Greek
    "greek": ((0xCE, 0xCF),),  # U+0380-03FF
    "cyrillic": ((0xD0, 0xD3),),  # U+0400-04FF
    "cyrillic_ext": ((0xD4, 0xD4),),  # U+0500-053F: Cyrillic Supplement, Armenian capitals
    "armenian": ((0xD5, 0xD6),),  # U+0540-05BF: Armenian, Hebrew points
    "hebrew": ((0xD7, 0xD7),),  # U+05C0-05FF: Hebrew letters
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

# Word shapes, in the order plimsoll/_scan.c numbers them: anything else, a space, a lower-case ASCII letter, a
# capital. A profile prices a pair of two different shapes (" A": a capital after a space) by its two characters.
SHAPES = ". aA"
WORD_SHAPES = bytes(
    ord("a") if 0x61 <= b <= 0x7A else ord("A") if 0x41 <= b <= 0x5A else ord(" ") if b == 0x20 else ord(".")
    for b in range(256)
)  # the translation of every byte to its shape, for the standard library's count of a pair
SHAPE_PAIRS = tuple(first + second for first in SHAPES for second in SHAPES)  # in the C pass's order


@dataclass(frozen=True)
class _Compiled:
    table: bytes  # translation table: byte -> its cost in TABLE_UNITs
    chunk: int  # bytes per adler32 call, so that a chunk's sum stays below the modulus
    char_units: int
    continuation_units: int
    discounts: tuple[tuple[int, dict[bytes, int]], ...]  # (lead byte, {two-byte prefix: units off each char})
    patterns: tuple[tuple[bytes, int], ...]  # (pattern, units per non-overlapping occurrence)
    digrams: tuple[tuple[int, int], ...]  # (index in SHAPE_PAIRS, units per occurrence)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: profiles are made once
class Profile:
    """How one tokenizer family spends tokens.

    ``weights`` give every class of :data:`TABLE_CLASSES` its cost per byte, in whole 1/64 tokens up to 255/64.
    ``per_char`` is charged once per character and ``continuation`` once per UTF-8 continuation byte, both in
    1/256 token (``per_char`` carries most of the cost of the commonest class, lower-case letters, which 1/64
    steps would round badly). ``discounts`` take tokens off every character whose UTF-8 form starts with a
    two-byte prefix: scripts that share a lead byte with costlier ones.

    A discount is counted only where its lead byte starts at least :data:`DENSE` characters of the text, and
    only for the prefixes of those first characters (the scripts the text is written in): counting a prefix
    costs a pass over the text, and a discount left out can only overestimate.

    ``byte_weights`` give single ASCII characters a cost per byte of their own (in 1/64 tokens, like the
    classes); ``patterns`` charge every non-overlapping occurrence of a byte string (in 1/256 token, negative
    for a saving), which costs a pass over the text each. ``digrams`` charge every occurrence of a pair of
    different word shapes (:data:`SHAPES`), in 1/256 token, and cost nothing more where the C pass is built.

    ``counter``, when given, is the tokenizer's own count of a text: :func:`count_tokens` returns it instead of
    the estimate (see :func:`exact`).
    """

    name: str
    description: str
    weights: Mapping[str, float]
    per_char: float = 0.0
    continuation: float = 0.0
    discounts: Mapping[bytes, float] = field(default_factory=dict)
    byte_weights: Mapping[str, float] = field(default_factory=dict)
    patterns: Mapping[bytes, float] = field(default_factory=dict)
    digrams: Mapping[str, float] = field(default_factory=dict)
    counter: Callable[[str], int] | None = field(default=None, repr=False)
    _compiled: _Compiled = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        missing = set(TABLE_CLASSES) - set(self.weights)
        if missing:
            raise ValueError(f"profile {self.name!r} has no weight for {sorted(missing)}")
        costs = [0] * 256
        for cls in TABLE_CLASSES:
            cost = self._table_cost(cls, self.weights[cls])
            for first, last in CLASS_RANGES[cls]:
                for byte in range(first, last + 1):
                    costs[byte] = cost
        for char, weight in self.byte_weights.items():
            if len(char) != 1 or not char.isascii():
                raise ValueError(f"profile {self.name!r}: byte weights are for single ASCII characters, not {char!r}")
            costs[ord(char)] = self._table_cost(char, weight)
        for prefix, discount in self.discounts.items():
            if len(prefix) != 2 or discount > 0:
                raise ValueError(f"profile {self.name!r}: a discount needs a two-byte prefix and a value <= 0")
        for digram in self.digrams:
            if len(digram) != 2 or digram[0] == digram[1] or not set(digram) <= set(SHAPES):
                raise ValueError(
                    f"profile {self.name!r}: a digram is two different word shapes of {SHAPES!r}, not {digram!r}"
                )
        compiled = _Compiled(
            table=bytes(costs),
            chunk=(_ADLER_MODULUS - 2) // max(1, max(costs)),  # 1 + the sum stays below the modulus
            char_units=_units(self.per_char),
            continuation_units=_units(self.continuation),
            discounts=tuple(
                (lead, {p: _units(d) for p, d in self.discounts.items() if p[0] == lead})
                for lead in sorted({p[0] for p in self.discounts})
            ),
            patterns=tuple((p, _units(w)) for p, w in self.patterns.items() if p and w),
            digrams=tuple((SHAPE_PAIRS.index(d), _units(w)) for d, w in self.digrams.items() if w),
        )
        object.__setattr__(self, "_compiled", compiled)

    def _table_cost(self, what: str, weight: float) -> int:
        cost = _units(weight) // TABLE_UNIT
        if cost * TABLE_UNIT != _units(weight) or not 0 <= cost <= 255:
            raise ValueError(
                f"profile {self.name!r}: the weight {weight} of {what!r} must be a whole number of 1/64 tokens "
                "between 0 and 255/64"
            )
        return cost


def _units(tokens: float) -> int:
    return round(tokens * UNIT)


def byte_sum(data: bytes, chunk: int) -> int:
    """The sum of the bytes of ``data``; each chunk of ``chunk`` bytes must sum to less than 65520."""
    view, adler32 = memoryview(data), zlib.adler32
    return sum((adler32(view[i : i + chunk]) & 0xFFFF) - 1 for i in range(0, len(data), chunk))


def estimated_units(text: str, profile: Profile) -> int:
    """The estimate in 1/256 token, before rounding up."""
    if not text:
        return 0
    return units_of_bytes(text.encode("utf-8", "surrogatepass"), len(text), profile)


def units_of_bytes(data: bytes, chars: int, profile: Profile) -> int:
    """The estimate in 1/256 token of a text of ``chars`` characters whose UTF-8 form is ``data``."""
    compiled = profile._compiled
    total, pairs = _sums(data, compiled)
    units = TABLE_UNIT * total + compiled.char_units * chars + compiled.continuation_units * (len(data) - chars)
    for index, digram_units in compiled.digrams:
        units += digram_units * pairs[index]
    for pattern, pattern_units in compiled.patterns:
        units += pattern_units * data.count(pattern)
    for lead, discounts in compiled.discounts:
        for prefix in _scripts(data, lead):
            if prefix in discounts:
                units += discounts[prefix] * data.count(prefix)
    return units


def _sums(data: bytes, compiled: _Compiled) -> tuple[int, Sequence[int]]:
    """The sum of the table's costs of ``data``'s bytes, and the counts of the pairs of word shapes in the order of
    :data:`SHAPE_PAIRS`: all of them where the C pass is built, those the profile prices where it is not."""
    if _compiled_scan is not None:
        return _compiled_scan(data, compiled.table)
    pairs = [0] * len(SHAPE_PAIRS)
    if compiled.digrams:
        shapes = data.translate(WORD_SHAPES)
        for index, _ in compiled.digrams:
            pairs[index] = shapes.count(SHAPE_PAIRS[index].encode("ascii"))
    return byte_sum(data.translate(compiled.table), compiled.chunk), pairs


def _scripts(data: bytes, lead: int) -> set[bytes]:
    """The two-byte prefixes of the first :data:`DENSE` characters with this lead byte, each with its sibling
    (a script's block spans two prefixes); nothing when fewer characters have it."""
    seen: set[bytes] = set()
    position = data.find(lead)
    for _ in range(DENSE):
        if position < 0 or position + 1 >= len(data):
            return set()
        second = data[position + 1]
        seen.update((bytes((lead, second)), bytes((lead, second ^ 1))))
        position = data.find(lead, position + 1)
    return seen


def count_tokens(text: str, profile: Profile) -> int:
    """``profile``'s estimate of ``text``, rounded up to whole tokens (never below zero); the tokenizer's own
    count where the profile has one."""
    if profile.counter is not None:
        return profile.counter(text) if text else 0
    return max(0, -(-estimated_units(text, profile) // UNIT))


def exact(profile: Profile, counter: Callable[[str], int], tokenizer: str) -> Profile:
    """``profile`` counting with ``counter``, the real count of ``tokenizer`` (named in the description)."""
    return replace(profile, description=f"exact counts of {tokenizer}", counter=counter)

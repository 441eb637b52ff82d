"""SHA-256 that can stop and go on later: its state written out as text.

The reading agent is stateless and reads a long document page by page, while the pages it has read are cleared
from the conversation. ``hashlib`` cannot hand out its state, so this is SHA-256 (FIPS 180-4) in plain Python: the
agent writes the state after each page into its notes, and picks it up there to hash the next page. The digest
after the last page is the digest of the whole document, the same ``hashlib.sha256`` gives.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

_MASK = 0xFFFFFFFF
_INITIAL = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_ROUND = (
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
)  # fmt: skip
_BLOCK = 64
_STATE_TEXT = re.compile(r"(?P<words>[0-9a-f]{64})\.(?P<length>\d+)\.(?P<tail>(?:[0-9a-f]{2}){0,63})")


@dataclass(frozen=True)
class RunningSha256:
    """The hash of the bytes seen so far: the chaining words, the length, and the bytes of an unfinished block."""

    words: tuple[int, ...] = _INITIAL
    length: int = 0
    tail: bytes = b""

    def update(self, data: bytes) -> RunningSha256:
        pending = self.tail + data
        whole = len(pending) - len(pending) % _BLOCK
        words = self.words
        for start in range(0, whole, _BLOCK):
            words = _compress(words, pending[start : start + _BLOCK])
        return RunningSha256(words, self.length + len(data), pending[whole:])

    def hexdigest(self) -> str:
        padding = b"\x80" + b"\x00" * ((55 - self.length) % _BLOCK) + struct.pack(">Q", self.length * 8)
        last = self.update(padding)
        return "".join(f"{word:08x}" for word in last.words)

    def dump(self) -> str:
        """The state as ``<64 hex>.<bytes so far>.<hex of the unfinished block>``."""
        return "".join(f"{word:08x}" for word in self.words) + f".{self.length}.{self.tail.hex()}"

    @classmethod
    def load(cls, text: str) -> RunningSha256:
        match = _STATE_TEXT.fullmatch(text)
        if match is None or int(match["length"]) % _BLOCK != len(match["tail"]) // 2:
            raise ValueError("not a SHA-256 state")
        words = tuple(int(match["words"][i : i + 8], 16) for i in range(0, 64, 8))
        return cls(words, int(match["length"]), bytes.fromhex(match["tail"]))


def _rotate(value: int, bits: int) -> int:
    return (value >> bits) | (value << (32 - bits)) & _MASK


def _compress(state: tuple[int, ...], block: bytes) -> tuple[int, ...]:
    schedule = list(struct.unpack(">16I", block))
    for i in range(16, 64):
        early, late = schedule[i - 15], schedule[i - 2]
        sigma0 = _rotate(early, 7) ^ _rotate(early, 18) ^ (early >> 3)
        sigma1 = _rotate(late, 17) ^ _rotate(late, 19) ^ (late >> 10)
        schedule.append((schedule[i - 16] + sigma0 + schedule[i - 7] + sigma1) & _MASK)
    a, b, c, d, e, f, g, h = state
    for constant, word in zip(_ROUND, schedule, strict=True):
        choose = (e & f) ^ (~e & g)
        first = h + (_rotate(e, 6) ^ _rotate(e, 11) ^ _rotate(e, 25)) + choose + constant + word
        majority = (a & b) ^ (a & c) ^ (b & c)
        second = (_rotate(a, 2) ^ _rotate(a, 13) ^ _rotate(a, 22)) + majority
        h, g, f, e, d, c, b, a = g, f, e, (d + first) & _MASK, c, b, a, (first + second) & _MASK
    return tuple((old + new) & _MASK for old, new in zip(state, (a, b, c, d, e, f, g, h), strict=True))

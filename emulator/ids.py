"""Ids that look like the real ones and follow from the request, so the same request gets the same ids."""

from __future__ import annotations

import hashlib
import json

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def request_digest(body: object) -> bytes:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).digest()


def derived_id(prefix: str, digest: bytes, index: int, length: int) -> str:
    """``prefix`` followed by ``length`` base-62 characters drawn from ``digest`` and ``index``."""
    number = int.from_bytes(hashlib.sha256(digest + index.to_bytes(4, "big")).digest(), "big")
    characters = []
    for _ in range(length):
        number, remainder = divmod(number, len(_ALPHABET))
        characters.append(_ALPHABET[remainder])
    return prefix + "".join(characters)


def anthropic_message_id(digest: bytes) -> str:
    return derived_id("msg_01", digest, 0, 22)


def anthropic_tool_use_id(digest: bytes, index: int) -> str:
    return derived_id("toolu_01", digest, index + 1, 22)


def openai_completion_id(digest: bytes) -> str:
    return derived_id("chatcmpl-", digest, 0, 29)


def openai_call_id(digest: bytes, index: int) -> str:
    return derived_id("call_", digest, index + 1, 24)


def request_id(serial: int) -> str:
    """The id of the ``serial``-th request this emulator has answered."""
    return derived_id("req_011", b"request", serial, 21)

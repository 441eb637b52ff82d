"""What tests of the emulator's agent share: the note it must write for a document."""

from __future__ import annotations

import hashlib


def expected_note(name: str, text: str) -> str:
    """Recomputed here from the stored document, so a note the agent guessed would not match."""
    opening = " ".join(text.split())[:30]
    return (
        f'NOTE {name}: {len(text)} chars, sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]}, starts "{opening}"'
    )

"""Tracebacks for log lines that cannot quote user text: where an error was raised, never what it said."""

from __future__ import annotations

import traceback
from pathlib import Path


def scrubbed_traceback(error: BaseException) -> str:
    """``error``'s type and the file, line and function of each frame, for it and the errors it was raised from;
    no message (a database error quotes the values it was given, a ``KeyError`` a document's name) and no source
    line (it may hold a literal)."""
    parts, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = type(current)
        frames = traceback.extract_tb(current.__traceback__)
        where = "".join(f"\n  {Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames)
        parts.append(f"{kind.__module__}.{kind.__qualname__}{where}")
        current = current.__cause__ or current.__context__
    return "\nraised while handling ".join(parts)

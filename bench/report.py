"""Markdown tables for the benchmarks' output."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|")

    numeric = [all(_is_number(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---:" if right else "---" for right in numeric) + "|")
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _is_number(text: str) -> bool:
    stripped = text.replace(",", "").replace("%", "").replace("×", "").rstrip(" ✗").strip()
    try:
        float(stripped)
    except ValueError:
        return False
    return True

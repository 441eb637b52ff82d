"""Markdown tables for the benchmarks' output."""

from __future__ import annotations

import subprocess
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


def code_version(code_dir: Path = ROOT) -> str:
    """The commit a benchmark ran on, and whether tracked files had changed since."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(code_dir), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")

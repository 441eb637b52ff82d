"""Where a figure comes from: the commit a benchmark ran on and whether the tree was clean. Every file a benchmark
writes to ``bench/results/`` starts with ``header`` (a PNG carries it as its ``Description``), and
``tests/test_results_provenance.py`` checks that each names a commit of this history and a clean tree."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CODE_DIR = Path(__file__).resolve().parent.parent
# The results a run writes dirty its own folder before it writes the last of them: that is not a change to the code.
RESULTS_DIR = "bench/results"
HEADER = re.compile(r"Made by `(?P<command>[^`]+)` on commit (?P<commit>[0-9a-f]{40}|unknown) \((?P<tree>[^)]+)\)\.")
CLEAN = "clean tree"
DIRTY = "uncommitted changes"


@dataclass(frozen=True)
class Provenance:
    commit: str  # the full sha of HEAD, or "unknown" outside a git checkout
    clean: bool

    @property
    def short(self) -> str:
        """``4bf97a1`` or ``4bf97a1 + uncommitted changes``."""
        return self.commit[:7] + ("" if self.clean else f" + {DIRTY}")


def provenance(code_dir: Path = CODE_DIR) -> Provenance:
    def git(*args: str) -> str | None:
        done = subprocess.run(["git", "-C", str(code_dir), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return Provenance("unknown", clean=False)
    changes = git("status", "--porcelain", "--", ".", f":(exclude){RESULTS_DIR}")
    return Provenance(commit, clean=changes == "")


def header(command: str, code_dir: Path = CODE_DIR) -> str:
    """The line every results file starts with (after its title): which command made it, on which commit."""
    made = provenance(code_dir)
    return f"Made by `{command}` on commit {made.commit} ({CLEAN if made.clean else DIRTY})."


def png_metadata(command: str) -> dict[str, str]:
    """``savefig(..., metadata=png_metadata(command))``: the header in the PNG's text chunk."""
    return {"Description": header(command)}


def keep(text: str, name: str, code_dir: Path = CODE_DIR) -> bool:
    """Write a report to ``bench/results/<name>``, only from a clean tree: a results file names the commit that
    made it. Otherwise say on stderr that it was not kept. Answers whether it was written."""
    path = code_dir / RESULTS_DIR / name
    if not provenance(code_dir).clean:
        print(f"{RESULTS_DIR}/{name} not written: the tree has {DIRTY}", file=sys.stderr)
        return False
    path.parent.mkdir(exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return True

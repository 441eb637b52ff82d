"""An agent-like run for ``bench.cost_frontier``: tool output made on this machine, in rounds of parallel calls.

Every result is real output of a coding agent's usual tools, made in process from the Python standard library
installed here (sorted file lists and fixed seeds, so the same Python gives the same run):

- ``small``: a directory listing (``ls -l`` style), a ``grep -n`` of one word in one file (at most 40 hits), or a
  ``sed -n`` view of 10 to 60 lines: almost always under 1,000 tokens;
- ``file``: the ``cat -n`` view of the first 80 to 300 lines of a module (about 1,000 to 4,000 tokens);
- ``large``: a whole module of 10,000 to 60,000 tokens as ``cat -n`` prints it (``typing.py``, ``inspect.py``,
  ``tarfile.py`` ...), what an agent gets when it reads a big file or a long trace whole.

The mix (:data:`KINDS`) and the calls per round (:data:`CALLS_PER_ROUND`, 1 to 5) are this benchmark's choice,
following what agent traces show: mostly small results, a file read now and then, a huge one rarely, one call
per round most of the time. :func:`describe` prints the sizes the run ends up with, so the table states them.
"""

from __future__ import annotations

import random
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import median
from typing import Any

from plimsoll import estimate_tokens

STDLIB = Path(sysconfig.get_paths()["stdlib"])
KINDS = {"small": 0.70, "file": 0.24, "large": 0.06}
CALLS_PER_ROUND = {1: 0.50, 2: 0.25, 3: 0.12, 4: 0.08, 5: 0.05}
LARGE_TOKENS = (10_000, 60_000)
SKIPPED = {"__pycache__", "test", "site-packages", "dist-packages", "idlelib", "tkinter"}
WORDS = ("def ", "import ", "return ", "self.", "raise ", "class ", "yield ", "lambda", "None", "assert ")


@cache
def _modules() -> tuple[Path, ...]:
    return tuple(sorted(STDLIB.glob("*.py")))


@cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _numbered(lines: list[str], first: int = 1) -> str:
    return "".join(f"{n:6}\t{line}\n" for n, line in enumerate(lines, start=first))


@cache
def _large_modules() -> tuple[Path, ...]:
    low, high = LARGE_TOKENS
    return tuple(p for p in _modules() if low <= estimate_tokens(_numbered(_text(p).splitlines())) <= high)


@cache
def _folders() -> tuple[Path, ...]:
    return tuple(sorted({p.parent for p in STDLIB.rglob("*.py") if not SKIPPED & set(p.parts)}))


def _listing(rng: random.Random) -> str:
    folder = rng.choice(_folders())
    rows = []
    for entry in sorted(folder.iterdir())[:60]:
        size = entry.stat().st_size if entry.is_file() else 4096
        kind = "d" if entry.is_dir() else "-"
        rows.append(f"{kind}rw-r--r-- 1 root root {size:>8} Nov 30 12:00 {entry.name}\n")
    return f"total {len(rows) * 8}\n" + "".join(rows)


def _grep(rng: random.Random) -> str:
    path, word = rng.choice(_modules()), rng.choice(WORDS)
    hits = [f"{n}:{line}\n" for n, line in enumerate(_text(path).splitlines(), start=1) if word in line]
    return "".join(hits[:40]) or f"grep: no match for {word!r} in {path.name}\n"


def _view(rng: random.Random) -> str:
    lines = _text(rng.choice(_modules())).splitlines()
    start = rng.randrange(max(1, len(lines) - 60))
    return _numbered(lines[start : start + rng.randint(10, 60)], start + 1)


def small(rng: random.Random) -> str:
    maker: Callable[[random.Random], str] = rng.choice((_listing, _grep, _view))
    return maker(rng)


def file_head(rng: random.Random) -> str:
    return _numbered(_text(rng.choice(_modules())).splitlines()[: rng.randint(80, 300)])


def large(rng: random.Random) -> str:
    return _numbered(_text(rng.choice(_large_modules())).splitlines())


MAKERS = {"small": small, "file": file_head, "large": large}


def agent_history(rounds: int, seed: int = 7) -> list[dict[str, Any]]:
    """An instruction, then ``rounds`` rounds: an assistant message with 1-5 calls, a user message of results."""
    rng = random.Random(seed)
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Find why the JSON round trip loses the label, fix it, and run the tests."}
    ]
    kinds, weights = list(KINDS), list(KINDS.values())
    counts, count_weights = list(CALLS_PER_ROUND), list(CALLS_PER_ROUND.values())
    next_id = 0
    for _ in range(rounds):
        calls = rng.choices(counts, count_weights)[0]
        ids = [f"toolu_{next_id + k:05d}" for k in range(calls)]
        next_id += calls
        made = [(kind, MAKERS[kind](rng)) for kind in rng.choices(kinds, weights, k=calls)]
        uses = [
            {"type": "tool_use", "id": i, "name": "bash", "input": {"command": f"{kind} #{i[-5:]}"}}
            for i, (kind, _) in zip(ids, made, strict=True)
        ]
        history.append({"role": "assistant", "content": [{"type": "text", "text": "Next I will look at this."}, *uses]})
        history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": text}
                    for i, (_, text) in zip(ids, made, strict=True)
                ],
            }
        )
    return history


@dataclass(frozen=True)
class Sizes:
    results: int
    under_1k: float
    from_10k_to_60k: float
    median: float
    largest: int
    rounds: int
    calls_per_round: float


def describe(history: list[dict[str, Any]]) -> Sizes:
    sizes = [
        estimate_tokens(b["content"])
        for m in history
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    rounds = sum(1 for m in history if m["role"] == "assistant")
    return Sizes(
        results=len(sizes),
        under_1k=sum(s < 1_000 for s in sizes) / len(sizes),
        from_10k_to_60k=sum(LARGE_TOKENS[0] <= s <= LARGE_TOKENS[1] for s in sizes) / len(sizes),
        median=median(sizes),
        largest=max(sizes),
        rounds=rounds,
        calls_per_round=len(sizes) / rounds,
    )

"""What the two profile fits share (``estimate_fit.fit_profiles`` for the scripts, ``estimate_fit.fit_ascii`` for the
ASCII part): how texts are cut into chunks, the corpus goals both hold, and the data file both write."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from estimate_fit.reference import REFERENCE_OF_PROFILE
from plimsoll.estimate import Profile
from plimsoll.profiles import FITTED_FILE, profile_data

CHUNK_CHARS = {"corpus": 20_000, "other": 6_000}
# The corpus goals: every chunk at or above CORPUS_MARGIN x its real count, every corpus file at most FILE_CEILING x.
CORPUS_MARGIN, FILE_CEILING = 1.01, 1.145
SCRIPT_MARGIN = 1.2  # other texts, mostly non-ASCII (a script): every chunk at or above this x its real count
SOFT_PENALTY = 20.0  # the weight of a soft text's shortfall in the fit's objective, where it is not forbidden

PROFILES_FILE = Path(__file__).resolve().parent.parent / "plimsoll" / FITTED_FILE
GENERATED_BY = (
    "python -m estimate_fit.fit_profiles (the scripts' weights), python -m estimate_fit.fit_profiles --scripts "
    "--write (raised where this machine's message catalogs show them short), then python -m "
    "estimate_fit.fit_profiles --ascii --write (the ASCII part, on agent tool output and real agent runs); o200k's "
    "last: --ascii --profile o200k --write, then --scripts --write; claude's last: --ascii --profile claude --write, "
    "once digrams of word shapes were priced (estimate_fit.fit_ascii.DIGRAMS_OF_PROFILE); see the README's Token "
    "estimates section"
)


@contextmanager
def solver_output_to_stderr() -> Iterator[None]:
    """HiGHS, under scipy's ``milp``, prints stray lines from C to the process's standard output, where a report
    redirected into a results file would take them in: while the solver runs, that output goes to standard error."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # C's buffered lines leave before standard output is put back
        os.dup2(kept, 1)
        os.close(kept)


def chunks_of(text: str, size: int) -> list[str]:
    pieces, start = [], 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            newline = text.rfind("\n", start + size // 2, end)
            end = newline if newline > start else end
        pieces.append(text[start:end])
        start = end
    return [p for p in pieces if p.strip()]


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """``--write`` and ``--output``, the same for both fits."""
    parser.add_argument("--write", action="store_true", help=f"write the weights to {PROFILES_FILE.name}")
    parser.add_argument(
        "--output", type=Path, default=PROFILES_FILE, help="where --write writes (default: %(default)s)"
    )


def add_profile_flag(parser: argparse.ArgumentParser) -> None:
    """``--profile``, for the ASCII fit: refit some profiles and keep the others' weights."""
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        choices=tuple(REFERENCE_OF_PROFILE),
        help="with --ascii: refit only this profile (repeatable); the others are written as they are",
    )


def write(profiles: list[Profile], path: Path = PROFILES_FILE) -> None:
    """Write the fitted profiles as the data file ``plimsoll/profiles.py`` reads."""
    data = {"generated_by": GENERATED_BY, "profiles": {p.name: profile_data(p) for p in profiles}}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)

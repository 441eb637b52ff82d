"""Raise the scripts' weights where more text shows them short: ``python -m estimate_fit.fit_profiles --scripts
[--write]`` (or ``python -m estimate_fit.fit_scripts``).

The scripts' weights (every class beyond ASCII and the discounts) were fitted on texts in 30 languages that we do
not redistribute (``estimate_fit.fit_profiles``), with room above the real count for scripts the corpus lacks
(``SCRIPT_MARGIN``): how densely a script is tokenized varies from text to text. On other texts that room was not
always there (Georgian and Armenian text the fit never saw came out under o200k's count). This step reads every
language's message catalogs that this machine has (``/usr/share/locale/*/LC_MESSAGES/*.mo``: the translated
messages of its programs, sentences rather than word lists; the first ``CATALOG_CHARS`` characters of each
language) and holds every chunk that is mostly in one script the corpus lacks (:func:`in_scope`) at or above
``SCRIPT_MARGIN`` x its real count, as the full fit holds its texts. Latin-script text (mostly ASCII) is left to the
ASCII step, text in the corpus's scripts to the corpus's constraints.

One mixed-integer program per profile raises a class's cost, or takes back part of a discount, by whole steps; it
lowers nothing, so every estimate stays at or above what it was, and every corpus file stays at or below 1.145 x its
real count. Objective: the smallest mean rise (the rise ÷ the real count) over every chunk of every language, held
or not, so that a weight that would raise Latin-script or Cyrillic text is dear; a chunk that no weight can lift
enough is penalised rather than forbidden (``SOFT_PENALTY``), as ``estimate_fit.fit_profiles`` treats such texts.

The ASCII weights are fitted after this step (``--ascii``), with these weights pinned.
"""

from __future__ import annotations

import argparse
import gettext
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from estimate_fit.fit_shared import (
    CHUNK_CHARS,
    FILE_CEILING,
    SCRIPT_MARGIN,
    SOFT_PENALTY,
    add_output_flags,
    chunks_of,
    solver_output_to_stderr,
    write,
)
from estimate_fit.reference import REFERENCE_OF_PROFILE, corpus_files, reference_counters
from plimsoll.estimate import CLASS_RANGES, TABLE_CLASSES, TABLE_UNIT, UNIT, Profile, _scripts, estimated_units
from plimsoll.profiles import PROFILES, profile_data

LOCALES = Path("/usr/share/locale")
CATALOG_CHARS = 60_000  # the first this many characters of each language's messages: ten chunks
MIN_CHARS = 6_000  # a language with fewer characters of messages is left out
ASCII_CLASSES = ("control", "tab", "newline", "space", "quote", "bracket", "punct", "digit", "upper", "lower")
SCRIPT_CLASSES = tuple(c for c in TABLE_CLASSES if c not in ASCII_CLASSES and c != "invalid")
TABLE_STEP, FINE_STEP = TABLE_UNIT / UNIT, 1 / UNIT
TABLE_MAX = 255 * TABLE_STEP


def catalog_texts(folder: Path | None = None) -> dict[str, str]:
    """Every language's translated messages (``msgstr``), one a line, in the order of the catalogs' file names;
    the ISO code lists (``iso_*``: names of countries, languages, currencies) are left out."""
    folder = LOCALES if folder is None else folder
    texts = {}
    for language in sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []:
        lines: list[str] = []
        for catalog in sorted((folder / language / "LC_MESSAGES").glob("*.mo")):
            if catalog.name.startswith("iso_"):
                continue
            try:
                with catalog.open("rb") as handle:
                    translations = gettext.GNUTranslations(handle)
            except (OSError, LookupError, UnicodeDecodeError, ValueError):  # a catalog Python cannot read
                continue
            lines += [text for key, text in translations._catalog.items() if key and text.strip()]  # type: ignore[attr-defined]
        text = "\n".join(lines)[:CATALOG_CHARS]
        if len(text) >= MIN_CHARS:
            texts[language] = text
    return texts


@dataclass(frozen=True)
class Chunk:
    language: str
    text: str
    checked: bool  # held to the margin (see :func:`in_scope`); every chunk counts in the objective


def _columns(profile: Profile) -> list[str]:
    return [*SCRIPT_CLASSES, *(f"discount {p.hex()}" for p in profile.discounts)]


def _features(text: str, profile: Profile) -> np.ndarray:
    """Bytes per script class and occurrences of each discounted prefix that applies to this text (a discount
    counts only where its script is dense, as :func:`plimsoll.estimate.estimated_units` counts it)."""
    data = text.encode("utf-8", "surrogatepass")
    histogram = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    by_class = [sum(int(histogram[a : b + 1].sum()) for a, b in CLASS_RANGES[c]) for c in SCRIPT_CLASSES]
    applied = {prefix for lead in {p[0] for p in profile.discounts} for prefix in _scripts(data, lead)}
    discounts = [data.count(p) if p in applied else 0 for p in profile.discounts]
    return np.array([*by_class, *discounts], dtype=float)


# The corpus's own scripts: the corpus files' ceilings hold their weights down, and the full fit holds other text
# in them to 1.0, not SCRIPT_MARGIN.
CORPUS_CLASSES = ("cyrillic", "cyrillic_ext", "kana", "han", "hangul", "compat")


def in_scope(text: str) -> bool:
    """Whether this step checks ``text``: most of its characters are of one script the corpus lacks. Latin-script
    text (mostly ASCII) is left to the ASCII step, text in the corpus's scripts to the corpus's constraints."""
    data = text.encode("utf-8", "surrogatepass")
    non_ascii = len(text) - sum(ch.isascii() for ch in text)
    if non_ascii < 0.5 * len(text):
        return False
    histogram = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    leads = {c: sum(int(histogram[a : b + 1].sum()) for a, b in CLASS_RANGES[c]) for c in SCRIPT_CLASSES}
    return max(leads, key=lambda c: leads[c]) not in CORPUS_CLASSES


def solve(chunks: list[Chunk], corpus: dict[str, str], name: str) -> Profile:
    """``name``'s profile with its script weights raised as little as meets every chunk's margin."""
    profile, count = PROFILES[name], reference_counters()[REFERENCE_OF_PROFILE[name]]
    columns = _columns(profile)
    every = np.array([_features(c.text, profile) for c in chunks])
    real_of_every = np.array([count(c.text) for c in chunks], dtype=float)
    checked = [c for c in chunks if c.checked]
    mask = np.array([c.checked for c in chunks])
    x, real = every[mask], real_of_every[mask]
    now = np.array([estimated_units(c.text, profile) / UNIT for c in checked])
    slacks = len(checked)
    rows = [np.hstack([-x, -np.diag(real)])]  # now + x . rise + slack x real >= SCRIPT_MARGIN x real
    right = [now - SCRIPT_MARGIN * real]
    for text in corpus.values():  # every corpus file at most FILE_CEILING x its real count, or no further above
        pieces = chunks_of(text, CHUNK_CHARS["corpus"])
        rows.append(np.hstack([np.sum([_features(p, profile) for p in pieces], axis=0), np.zeros(slacks)])[None, :])
        room = FILE_CEILING * count(text) - estimated_units(text, profile) / UNIT
        right.append(np.array([max(room, 0.0)]))  # a file at its ceiling already (ASCII weights fitted since): no rise
    step = np.array([TABLE_STEP if c in SCRIPT_CLASSES else FINE_STEP for c in columns] + [1.0] * slacks)
    current = [profile.weights[c] for c in SCRIPT_CLASSES] + [float(d) for d in profile.discounts.values()]
    high = np.array([TABLE_MAX - w if c in SCRIPT_CLASSES else -w for c, w in zip(columns, current, strict=True)])
    objective = np.concatenate([(every / real_of_every[:, None]).mean(axis=0), np.full(slacks, SOFT_PENALTY)])
    integrality = np.array([1] * len(columns) + [0] * slacks)
    with solver_output_to_stderr():
        solved = milp(
            objective * step,
            constraints=LinearConstraint(np.vstack(rows) * step, -np.inf, np.concatenate(right)),
            integrality=integrality,
            bounds=Bounds(
                np.zeros(len(step)), np.concatenate([np.floor(high / step[: len(columns)] + 1e-9), [np.inf] * slacks])
            ),
            options={"time_limit": 120},
        )
    if solved.x is None:
        raise SystemExit(f"{name}: no weights satisfy the constraints ({solved.message})")
    rise = np.round(solved.x[: len(columns)]) * step[: len(columns)]
    raised = dict(zip(columns, rise, strict=True))
    for column, value in raised.items():
        if value:
            print(f"# {name}: {column} +{value:.4f}", file=sys.stderr)
    slack = solved.x[len(columns) :]
    short = [(c.language, round(float(s), 3)) for c, s in zip(checked, slack, strict=True) if s > 1e-6]
    print(f"# {name}: chunks still short of their margin (language, shortfall ÷ real): {short}", file=sys.stderr)
    return replace(
        profile,
        weights={**profile.weights, **{c: profile.weights[c] + raised[c] for c in SCRIPT_CLASSES}},
        discounts={p: d + raised[f"discount {p.hex()}"] for p, d in profile.discounts.items()},
    )


def run(write_to: Path | None = None) -> list[Profile]:
    texts = catalog_texts()
    chunks = [
        Chunk(language, piece, in_scope(piece))
        for language, text in texts.items()
        for piece in chunks_of(text, CHUNK_CHARS["other"])
    ]
    print(
        f"# {len(chunks)} chunks of message catalogs in {len(texts)} languages, "
        f"{sum(c.checked for c in chunks)} of them mostly in scripts the corpus lacks",
        file=sys.stderr,
    )
    if not any(c.checked for c in chunks):
        print(f"# no message catalogs in scripts the corpus lacks under {LOCALES}: nothing to raise", file=sys.stderr)
        return []
    corpus = corpus_files()
    fitted = []
    for name, reference in REFERENCE_OF_PROFILE.items():
        if reference not in reference_counters():
            print(f"# {name}: skipped, its tokenizer is absent", file=sys.stderr)
            continue
        fitted.append(solve(chunks, corpus, name))
        print(json.dumps({name: profile_data(fitted[-1])}, indent=1))
    if write_to is not None and len(fitted) == len(REFERENCE_OF_PROFILE):
        write(fitted, write_to)
    return fitted


def main(argv: list[str] | None = None) -> None:
    """``python -m estimate_fit.fit_scripts [--write] [--output FILE]``, the same as ``python -m
    estimate_fit.fit_profiles --scripts``."""
    parser = argparse.ArgumentParser(prog="python -m estimate_fit.fit_scripts", description=__doc__.split("\n\n")[0])
    add_output_flags(parser)
    args = parser.parse_args(argv)
    run(write_to=args.output if args.write else None)


if __name__ == "__main__":
    main()

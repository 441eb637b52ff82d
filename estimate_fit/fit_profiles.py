"""Fit the weights of the ``claude``, ``cl100k`` and ``o200k`` profiles: ``python -m estimate_fit.fit_profiles``.

For each profile a linear program picks the weights (see ``plimsoll/estimate.py``) that bring the estimate as
close to the real count as it can without falling below it:

- every chunk of the shared corpus: estimate >= 1.01 x real count; every corpus file as a whole: <= 1.145 x;
- every chunk of the other texts: estimate >= 1.2 x real count where most of its characters are not ASCII
  (how densely a script is tokenized varies from text to text: unseen text needs room), >= 1.0 x where they
  are ASCII (code, data, logs) or in the corpus's scripts, except the texts in ``SOFT``, where falling short
  is penalised rather than forbidden (the calibrator corrects a job that runs high after its first reply);
- ranges no text here covers are charged what a byte-level tokenizer can spend at most on them: a token per
  UTF-8 byte (the floors below);
- objective: the smallest mean of estimate / real count over all chunks.

Every weight is solved as a whole number of its steps (the program is mixed-integer): 1/64 token for the
table, 1/256 for the rest, so what is printed satisfies the constraints exactly.

The texts: the shared corpus (``../shared/corpus``) and any ``*.txt`` in ``--extra-dir`` (default:
``PLIMSOLL_FIT_EXTRA_DIR``). The
project's own samples (``bench/samples.py``) are kept out, so that ``bench.estimator`` measures the estimates
on text they were not fitted to. The weights in ``plimsoll/profiles.json`` were fitted with such a folder
of texts from public web pages (Wikipedia and news articles in 30 languages, source code, logs), which we do not
redistribute; without it the fit runs on less data. The result is printed as the JSON of ``profiles.json``,
followed by the ratios it reaches; ``--write`` writes it there (``--output`` elsewhere).

``--scripts`` runs a second step instead (``estimate_fit.fit_scripts``): the scripts' weights are raised where the
message catalogs of this machine's programs, in every language they are translated to, fall below the margins
above. ``--ascii`` runs the third step instead (``estimate_fit.fit_ascii``): the scripts' weights stay as they are and
the ASCII ones (classes, each punctuation mark, runs of spaces) are refitted on the corpus and on agent tool output
(``estimate_fit.tool_output``). A full fit writes profiles without the marks' own costs and the space runs, so run
``--scripts --write`` and ``--ascii --write`` after it, in that order.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from estimate_fit.fit_shared import (
    CHUNK_CHARS,
    CORPUS_MARGIN,
    FILE_CEILING,
    SCRIPT_MARGIN,
    SOFT_PENALTY,
    add_output_flags,
    add_profile_flag,
    chunks_of,
    solver_output_to_stderr,
    write,
)
from estimate_fit.reference import REFERENCE_OF_PROFILE, corpus_files, reference_counters
from plimsoll.estimate import CLASS_RANGES, TABLE_CLASSES, TABLE_UNIT, UNIT, Profile
from plimsoll.profiles import profile_data

DISCOUNT_LEADS = (0xE0, 0xE1)  # shared by scripts that cost very differently: a discount per script
DISCOUNT_MIN_COUNT = 150  # a prefix needs this many characters in the texts to get a discount of its own
SCALARS = ("per_char", "continuation")
# Effective tokens per character at least: a token per UTF-8 byte where no text here shows the range's cost.
FLOORS = {
    "control": 1.0,
    "ipa_modifiers": 2.0,
    "combining": 2.0,
    "cyrillic_ext": 2.0,
    "syriac_thaana_nko": 2.0,
    "symbols": 2.0,
    "private": 3.0,
    "astral": 4.0,
}
# Texts where falling below the real count is penalised rather than forbidden: Latin-script languages other
# than English, base64 (its random letters cost about twice what English letters do) and numeric CSV (numbers
# split into groups of three digits): telling them from English prose and JSON would take a look at
# neighbouring bytes, which a byte table cannot give.
SOFT = {
    "vietnamese",
    "polish",
    "turkish",
    "german",
    "vi",
    "tr",
    "pl",
    "cs",
    "de",
    "fr",
    "es",
    "it",
    "pt",
    "base64",
    "csv",
}
# Other texts in the corpus's own scripts (Cyrillic, Chinese, Japanese, Korean) share its weights, which the
# corpus files' ceilings hold down: they are held to 1.0, not SCRIPT_MARGIN.
CORPUS_SCRIPTS = {"uk", "bg", "sr", "ru", "zh", "ja", "ko", "mixed"}
ASCII_MARGIN = 1.0  # other texts, mostly ASCII (code, data); mostly non-ASCII (a script): SCRIPT_MARGIN
ASCII_CLASSES = ("control", "tab", "newline", "space", "quote", "bracket", "punct", "digit", "upper", "lower")
TABLE_MAX = TABLE_UNIT * 255 / UNIT
BYTES_OF_LEAD = {
    cls: 1 if ranges[0][1] < 0x80 else 2 if ranges[0][0] < 0xE0 else 3 if ranges[0][0] < 0xF0 else 4
    for cls, ranges in CLASS_RANGES.items()
}


@dataclass(frozen=True)
class Chunk:
    source: str
    corpus: bool
    features: np.ndarray
    real: dict[str, int]


DISCOUNTS: dict[str, bytes] = {}  # filled by collect(): the two-byte prefixes the texts use enough


def feature_names() -> list[str]:
    return [*TABLE_CLASSES, *SCALARS, *DISCOUNTS]


def features(text: str) -> np.ndarray:
    """The features of ``text``: bytes per class, characters, continuation bytes, and every candidate prefix."""
    data = text.encode("utf-8", "surrogatepass")
    histogram = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    by_class = [sum(int(histogram[a : b + 1].sum()) for a, b in CLASS_RANGES[cls]) for cls in TABLE_CLASSES]
    prefixes = [data.count(bytes((lead, second))) for lead in DISCOUNT_LEADS for second in range(0x80, 0xC0)]
    return np.array([*by_class, len(text), len(data) - len(text), *prefixes], dtype=float)


def _candidate_prefixes() -> list[bytes]:
    return [bytes((lead, second)) for lead in DISCOUNT_LEADS for second in range(0x80, 0xC0)]


def extra_texts(folder: Path | None) -> dict[str, str]:
    if folder is None:
        return {}
    return {p.name: p.read_text(encoding="utf-8", errors="replace") for p in sorted(Path(folder).glob("*.txt"))}


def collect(extra_dir: Path | None = None) -> list[Chunk]:
    """The chunks of every text with their features and real counts; also picks the discounted prefixes."""
    counters = reference_counters()
    chunks = []
    for group, texts in (("corpus", corpus_files()), ("other", extra_texts(extra_dir))):
        for source, text in texts.items():
            for piece in chunks_of(text, CHUNK_CHARS[group]):
                real = {name: count(piece) for name, count in counters.items()}
                chunks.append(Chunk(source, group == "corpus", features(piece), real))
    fixed = len(TABLE_CLASSES) + len(SCALARS)
    totals = np.sum([c.features[fixed:] for c in chunks], axis=0)
    kept = [i for i, total in enumerate(totals) if total >= DISCOUNT_MIN_COUNT]
    DISCOUNTS.clear()
    DISCOUNTS.update({_candidate_prefixes()[i].hex(): _candidate_prefixes()[i] for i in kept})
    columns = [*range(fixed), *(fixed + i for i in kept)]
    return [Chunk(c.source, c.corpus, c.features[columns], c.real) for c in chunks]


def is_soft(source: str) -> bool:
    return Path(source).stem.split("_")[0] in SOFT


def fit(chunks: list[Chunk], reference: str) -> dict[str, float]:
    """The weights, each a whole number of its steps (1/64 token in the table, 1/256 for the rest)."""
    solved = solve(chunks, reference, {})
    steps = {name: TABLE_UNIT / UNIT if name in TABLE_CLASSES else 1 / UNIT for name in feature_names()}
    return {name: round(value / steps[name]) * steps[name] for name, value in zip(feature_names(), solved, strict=True)}


def solve(chunks: list[Chunk], reference: str, pinned: dict[str, float]) -> np.ndarray:
    """One mixed-integer program: the weights, plus a slack variable per soft chunk."""
    names = feature_names()
    index = {name: i for i, name in enumerate(names)}
    usable = [c for c in chunks if c.real[reference] > 0]
    soft = np.array([not c.corpus and is_soft(c.source) for c in usable])
    x = np.array([c.features for c in usable])
    real = np.array([c.real[reference] for c in usable], dtype=float)
    margin = np.array([_margin(c, s) for c, s in zip(usable, soft, strict=True)])
    slacks = int(soft.sum())
    slack_of = np.zeros((len(usable), slacks))
    slack_of[np.flatnonzero(soft), np.arange(slacks)] = real[soft]

    rows, right = [np.hstack([-x, -slack_of])], [-margin * real]  # estimate + slack >= margin x real

    def row(coefficients: dict[str, float], bound: float) -> None:
        line = np.zeros((1, len(names) + slacks))
        for name, value in coefficients.items():
            line[0, index[name]] = value
        rows.append(line)
        right.append(np.array([bound]))

    for source in sorted({c.source for c in usable if c.corpus}):
        mask = np.array([c.source == source for c in usable])
        rows.append(np.hstack([x[mask].sum(axis=0, keepdims=True), np.zeros((1, slacks))]))
        right.append(np.array([FILE_CEILING * real[mask].sum()]))
    for cls, floor in FLOORS.items():  # what a character of the class costs >= floor
        row({cls: -1, "per_char": -1, "continuation": -(BYTES_OF_LEAD[cls] - 1)}, -floor)
    for name, prefix in DISCOUNTS.items():  # what a discounted character still costs stays >= 0
        lead_class = next(cls for cls in TABLE_CLASSES if _covers(cls, prefix[0]))
        row({lead_class: -1, name: -1}, 0.0)

    objective = np.concatenate([(x / real[:, None]).mean(axis=0), np.full(slacks, SOFT_PENALTY)])
    bounds = [
        (pinned[n], pinned[n])
        if n in pinned
        else (0, TABLE_MAX)
        if n in TABLE_CLASSES
        else (-TABLE_MAX, 0)
        if n in DISCOUNTS
        else (0, 2)
        for n in names
    ] + [(0, None)] * slacks
    # Every weight is a whole number of steps: solve for the step counts (integers) instead of the weights.
    scale = np.array([TABLE_UNIT / UNIT if n in TABLE_CLASSES else 1 / UNIT for n in names] + [1.0] * slacks)
    low = np.array([b[0] for b in bounds], dtype=float) / scale
    high = np.array([np.inf if b[1] is None else b[1] for b in bounds], dtype=float) / scale
    integrality = np.array([1] * len(names) + [0] * slacks)
    matrix = np.vstack(rows) * scale
    with solver_output_to_stderr():
        solved = milp(
            objective * scale,
            constraints=LinearConstraint(matrix, -np.inf, np.concatenate(right)),
            integrality=integrality,
            bounds=Bounds(
                np.where(integrality == 1, np.ceil(low - 1e-9), low),
                np.where(integrality == 1, np.floor(high + 1e-9), high),
            ),
            options={"time_limit": 120},
        )
    if solved.x is None:
        raise SystemExit(f"{reference}: no weights satisfy the constraints ({solved.message})")
    return np.array(solved.x[: len(names)] * scale[: len(names)])


def _margin(chunk: Chunk, soft: bool) -> float:
    """How far above the real count the estimate of this chunk must stay."""
    if chunk.corpus:
        return CORPUS_MARGIN
    if soft or Path(chunk.source).stem.split("_")[0] in CORPUS_SCRIPTS:
        return 1.0
    ascii_chars = sum(chunk.features[TABLE_CLASSES.index(cls)] for cls in ASCII_CLASSES)
    characters = chunk.features[len(TABLE_CLASSES)]  # the per_char feature
    return ASCII_MARGIN if ascii_chars >= 0.8 * characters else SCRIPT_MARGIN


def _covers(cls: str, byte: int) -> bool:
    return any(a <= byte <= b for a, b in CLASS_RANGES[cls])


DESCRIPTIONS = {
    "claude": "Anthropic models (fitted to the legacy Claude tokenizer)",
    "cl100k": "OpenAI cl100k_base (GPT-4, GPT-3.5)",
    "o200k": "OpenAI o200k_base (GPT-4o, o-series)",
}


def as_profile(profile: str, weights: dict[str, float]) -> Profile:
    return Profile(
        name=profile,
        description=DESCRIPTIONS[profile],
        weights={cls: weights[cls] for cls in TABLE_CLASSES},
        per_char=weights["per_char"],
        continuation=weights["continuation"],
        discounts={DISCOUNTS[n]: weights[n] for n in DISCOUNTS if weights[n] != 0},
    )


def report(chunks: list[Chunk], reference: str, weights: dict[str, float]) -> None:
    vector = np.array([weights[name] for name in feature_names()])
    by_source: dict[str, list[float]] = {}
    totals: dict[str, list[float]] = {}
    for chunk in chunks:
        if chunk.real[reference] == 0:
            continue
        estimate = math.ceil(float(chunk.features @ vector))
        by_source.setdefault(chunk.source, []).append(estimate / chunk.real[reference])
        total = totals.setdefault(chunk.source, [0.0, 0.0])
        total[0] += estimate
        total[1] += chunk.real[reference]
    print(f"| text ({reference}) | whole | lowest chunk | highest chunk |\n|---|---:|---:|---:|")
    for source, ratios in by_source.items():
        whole = totals[source][0] / totals[source][1]
        print(f"| {source} | {whole:.3f} | {min(ratios):.3f} | {max(ratios):.3f} |")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m estimate_fit.fit_profiles", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ascii", action="store_true", help="refit only the ASCII part on agent tool output (estimate_fit.fit_ascii)"
    )
    parser.add_argument(
        "--scripts",
        action="store_true",
        help="raise the scripts' weights where this machine's message catalogs show them short "
        "(estimate_fit.fit_scripts)",
    )
    add_output_flags(parser)
    add_profile_flag(parser)
    parser.add_argument(
        "--extra-dir",
        type=Path,
        default=os.environ.get("PLIMSOLL_FIT_EXTRA_DIR"),
        help="a folder of *.txt texts to fit on beside the corpus (default: $PLIMSOLL_FIT_EXTRA_DIR)",
    )
    args = parser.parse_args(argv)
    if args.profile and not args.ascii:
        parser.error("--profile goes with --ascii: the other steps fit every profile")
    return args


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    if args.scripts:
        from estimate_fit import fit_scripts

        fit_scripts.run(write_to=args.output if args.write else None)
        return
    if args.ascii:
        from estimate_fit import fit_ascii

        fit_ascii.run(write_to=args.output if args.write else None, only=args.profile)
        return
    chunks = collect(args.extra_dir)
    print(f"# fitted on {len(chunks)} chunks from {len({c.source for c in chunks})} texts", file=sys.stderr)
    fitted = []
    for profile, reference in REFERENCE_OF_PROFILE.items():
        if reference not in reference_counters():
            print(f"# {profile}: skipped, the {reference} tokenizer is absent")
            continue
        weights = fit(chunks, reference)
        fitted.append(as_profile(profile, weights))
        print(json.dumps({profile: profile_data(fitted[-1])}, indent=1))
        report(chunks, reference, weights)
        print()
    if args.write and len(fitted) == len(REFERENCE_OF_PROFILE):
        write(fitted, args.output)


if __name__ == "__main__":
    main()

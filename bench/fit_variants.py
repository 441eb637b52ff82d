"""What other choices in the ASCII fit would do to the held-out goals: ``python -m bench.fit_variants``.

Issue 19 asks claude's and cl100k's estimates for three things on the held-out real agent runs: no conversation
under 1.0, no result of 500 tokens or more under 0.90, and a median conversation of at most 1.15. claude's shipped
fit meets all three; cl100k's misses the third (and a file written through a tool call sits just under 0.90). Each
variant below changes one choice of ``estimate_fit.fit_ascii``: a floor, a share of the objective, a bound, or what is
counted (a pattern, digrams). The script refits claude and cl100k with that change and judges the held-out goals as
``bench.estimator`` does, on the made tool output, the real runs and the files written through tool calls, and
beside them the lowest of Claude Code's views of code no fit has seen (``tests/test_estimate.py`` holds them at 0.95
or more). Each is also timed against tiktoken's ``encode`` on the mixed text in the same run, as ``bench.estimator``
times the shipped profiles (goal: 20× or more): a variant that counts more passes is slower.

The first row is the shipped profiles, not refitted; the second refits them with the shipped choices. The fit stops
at a proven gap, not a clock, so a refit of the same input (the data, and the weights it starts from, which set the
floor of every Latin-script language, from this machine's message catalogs) is the same from one run to the next.
cl100k was fitted before the tool output was made machine-independent and keeps those weights (the README says why):
the second row is what a refit would ship. Only the ASCII step is refitted; the scripts' weights stay as shipped.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any
from unittest import mock

from bench.estimator import (
    CONVERSATION_GOAL,
    RESULT_GOAL,
    RESULT_TOKENS,
    SPEED_GOAL,
    TIKTOKEN,
    Counting,
    mixed_text,
    real_count,
    times_beside_tiktoken,
    tool_output_goals,
    tool_output_ratios,
    trajectory_ratios,
    written_goal,
    written_ratios,
)
from bench.goals import Goal
from bench.provenance import header
from bench.report import table
from estimate_fit import fit_ascii
from estimate_fit.reference import REFERENCE_OF_PROFILE, reference_counters
from estimate_fit.tool_output import VIEW_FLOOR, WRITTEN_KINDS, claude_code_views_of_email
from plimsoll.estimate import Profile, count_tokens
from plimsoll.profiles import PROFILES

SWEPT = ("claude", "cl100k")  # the two whose held-out median sat over or at its goal
SHIPPED = "as shipped (not refitted)"
# A variant: the values of estimate_fit.fit_ascii's settings it changes (None: the shipped profiles, not refitted).
VARIANTS: dict[str, Mapping[str, Any] | None] = {
    SHIPPED: None,
    "the shipped choices, refitted": {},
    "conversations held 0.02 lower": {
        "CONVERSATION_FLOOR": {**fit_ascii.CONVERSATION_FLOOR, "claude": 1.03, "cl100k": 1.05}
    },
    "real runs weigh twice as much in the objective": {
        "OBJECTIVE_SHARES": {**fit_ascii.OBJECTIVE_SHARES, "real conversation": 6.0}
    },
    "an arrow costs a token at least (claude's choice before)": {"SYMBOL_FLOORS_OF_PROFILE": {}},
    "an arrow may cost nothing": {"SYMBOL_FLOORS_OF_PROFILE": {p: {fit_ascii.ARROW: 0.0} for p in SWEPT}},
    "an arrow may take a token off": {"SYMBOL_FLOORS_OF_PROFILE": {p: {fit_ascii.ARROW: -1.0} for p in SWEPT}},
    "letters may cost half a token less than their class": {
        "LETTER_SPREAD": {**fit_ascii.LETTER_SPREAD, "claude": (-0.5, 0.75), "cl100k": (-0.5, 0.75)}
    },
    "letters may cost up to 1.25 tokens more than their class (o200k's bound)": {
        "LETTER_SPREAD": {**fit_ascii.LETTER_SPREAD, "claude": (0.0, 1.25), "cl100k": (0.0, 1.25)}
    },
    "results held at 0.92, not 0.95": {"RESULT_FLOOR": 0.92},
    "results held at 0.97, not 0.95": {"RESULT_FLOOR": 0.97},
    "a line break followed by a space (indentation) may cost more than one followed by a word": {
        "PATTERN_OF_PROFILE": {**fit_ascii.PATTERN_OF_PROFILE, **dict.fromkeys(SWEPT, b"\n ")},
        "PATTERN_RANGE": (-2.0, 2.0),
    },
    # claude prices them (estimate_fit.fit_ascii.DIGRAMS_OF_PROFILE): one row each way.
    "digrams of word shapes the other way: claude without them (its choice before), cl100k with them": {
        "DIGRAMS_OF_PROFILE": {"cl100k": fit_ascii.DIGRAMS}
    },
    "results held at 0.92, what agents write at 0.95": {
        "RESULT_FLOOR": 0.92,
        "KIND_FLOORS": {**fit_ascii.KIND_FLOORS, **dict.fromkeys(WRITTEN_KINDS.values(), 0.95)},
    },
}


@dataclass(frozen=True)
class Row:
    variant: str
    profile: str
    runs: list[float]  # estimate ÷ real count of each held-out real run
    results: list[float]  # of each held-out result of at least 500 tokens, made and real
    written: list[float]  # of each held-out file written through a tool call, of at least 500 tokens
    made: list[float]  # of each held-out made conversation
    views: list[float]  # of each Claude Code view of the email package (never fitted)
    speed: float  # × tiktoken's encode on the mixed text
    unmet: list[str]  # the held-out goals not met, and the speed goal


def judged(variant: str, counting: Counting, speed: float) -> Row:
    """``counting`` on the held-out made tool output, real runs and written files, and the goals it misses there
    and on speed (``speed``: its throughput as a multiple of tiktoken's)."""
    made_kinds, made_whole = tool_output_ratios([counting], held_out=True)
    real_kinds, real_whole = trajectory_ratios([counting], held_out=True)
    written_kinds = written_ratios([counting], held_out=True)
    goals: list[Goal] = [
        *tool_output_goals(made_kinds, made_whole, " (made, held out)"),
        *tool_output_goals(real_kinds, real_whole, " (real runs, held out)"),
        written_goal(counting.label, written_kinds, " (held out)"),
    ]
    results = [x for kinds in (made_kinds, real_kinds) for r in kinds.values() for x in r[counting.label]]
    written = [x for r in written_kinds.values() for x in r[counting.label]]
    views = [
        count_tokens(v.text, counting.profile) / real_count(counting.reference, v.text)
        for v in claude_code_views_of_email()
    ]
    unmet = [g.text.removeprefix(f"{counting.label}: ") for g in goals if not g.met]
    if min(views) < VIEW_FLOOR:
        unmet.append(f"Claude Code views ≥ {VIEW_FLOOR}")
    if speed < SPEED_GOAL:
        unmet.append(f"≥ {SPEED_GOAL:.0f}× tiktoken encode")
    return Row(
        variant,
        counting.label,
        real_whole[counting.label],
        results,
        written,
        made_whole[counting.label],
        views,
        speed,
        unmet,
    )


REPEAT = 25  # timings of each counting, the best kept


def speeds(countings: Sequence[Counting], repeat: int = REPEAT) -> list[float]:
    """Each counting's throughput on the mixed text as a multiple of tiktoken's o200k ``encode``, timed in turns
    in one run as ``bench.estimator`` times the shipped profiles."""
    text, _ = mixed_text()
    counters = {str(i): partial(count_tokens, profile=c.profile) for i, c in enumerate(countings)}
    times = times_beside_tiktoken(counters, text, repeat)
    return [times[TIKTOKEN] / times[str(i)] for i in range(len(countings))]


def refit(items: list[fit_ascii.Item], profile: str, settings: Mapping[str, Any]) -> Profile:
    with mock.patch.multiple(fit_ascii, **settings) if settings else contextlib.nullcontext():
        return fit_ascii.refitted(PROFILES[profile], fit_ascii.solve(items, profile))


def run(variants: Sequence[str], profiles: Sequence[str] = SWEPT, repeat: int = REPEAT) -> list[Row]:
    present = [p for p in profiles if REFERENCE_OF_PROFILE[p] in reference_counters()]
    items = fit_ascii.collect() if any(VARIANTS[v] is not None for v in variants) else []
    made: list[tuple[str, Counting]] = []
    for variant in variants:
        settings = VARIANTS[variant]
        for profile in present:
            counting = PROFILES[profile] if settings is None else refit(items, profile, settings)
            made.append((variant, Counting(profile, counting, REFERENCE_OF_PROFILE[profile])))
    timed = speeds([counting for _, counting in made], repeat)
    return [judged(variant, counting, speed) for (variant, counting), speed in zip(made, timed, strict=True)]


def low_median(ratios: list[float]) -> str:
    return f"{min(ratios):.3f} / {statistics.median(ratios):.3f}"


def render(rows: list[Row]) -> str:
    return table(
        [
            "variant",
            "profile",
            "real runs held out: lowest / median",
            "results ≥ 500 tokens held out: lowest",
            "files written held out: lowest",
            "made conversations held out: lowest / median",
            "Claude Code views of email (never fitted): lowest",
            "× tiktoken encode (mixed text)",
            "held-out goals and speed",
        ],
        [
            [
                row.variant,
                row.profile,
                low_median(row.runs),
                f"{min(row.results):.3f}",
                f"{min(row.written):.3f}",
                low_median(row.made),
                f"{min(row.views):.3f}",
                f"{row.speed:.1f}",
                "NOT MET: " + "; ".join(row.unmet) if row.unmet else "met",
            ]
            for row in rows
        ],
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.fit_variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS), help="only these (repeatable)")
    parser.add_argument("--profile", action="append", choices=SWEPT, help="only these (repeatable)")
    parser.add_argument("--repeat", type=int, default=REPEAT, help="timings of each, the best kept (%(default)s)")
    args = parser.parse_args(argv)
    print("# Refitting the ASCII weights otherwise: the held-out goals\n")
    print(header(shlex.join(["python", "-m", "bench.fit_variants", *argv])) + "\n")
    print(
        f"Goals, on the held-out made tool output and real runs: conversations ≥ {CONVERSATION_GOAL[0]:.2f}, "
        f"median conversation ≤ {CONVERSATION_GOAL[1]}, results and written files ≥ {RESULT_TOKENS} tokens ≥ "
        f"{RESULT_GOAL}; and {SPEED_GOAL:.0f}× tiktoken's encode or more on the mixed text (the best of {args.repeat} "
        "timings of each, taken in turns).\n"
    )
    print(render(run(args.variant or tuple(VARIANTS), args.profile or SWEPT, args.repeat)))


if __name__ == "__main__":
    main()

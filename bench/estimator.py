"""How good and how fast the token estimates are: ``python -m bench.estimator``.

1. Per corpus file: every profile's estimate divided by the real count of its tokenizer (the goal: within
   [1.00, 1.15]), beside characters / 4 and the simple by-script rule.
2. Texts in scripts the corpus lacks (``bench/samples.py``): the estimate must not fall below the real count.
3. Agent tool output (``bench/tool_output.py``): estimate ÷ real count per kind of result (min / median / max over
   the results of at least 500 real tokens; the goal: never below 0.85) and per agent conversation (the goals:
   never below 1.00, median at most 1.15); then the same on a held-out set (other packages, other draws) that the
   weights were never fitted to.
4. Throughput of each profile against tiktoken's ``encode`` (o200k) on the same mixed text, as a ratio measured
   in this run (the goal: at least 20x for the default profile), and on the tool output.

Every goal is printed at the end, met or NOT MET, as measured in this run.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from bench.reference import REFERENCE_OF_PROFILE, corpus_files, reference_counters, skipped_references
from bench.report import table
from bench.samples import unseen_samples
from bench.tool_output import conversations, tool_outputs
from demo.chapters import chapters
from emulator.tokenizer import load_encoding
from plimsoll import PROFILES, estimate_tokens

GOAL = (1.00, 1.15)  # on the corpus
UNSEEN_GOAL = (1.00, float("inf"))  # elsewhere: never below the real count
FITTED = ("claude", "cl100k", "o200k")
RESULT_GOAL, RESULT_TOKENS = 0.85, 500  # a single tool result of at least 500 real tokens: never below 0.85
CONVERSATION_GOAL = (1.00, 1.15)  # a whole conversation: never below; the median at most 1.15
SPEED_GOAL = 20.0  # the default profile against tiktoken encode on mixed text


@dataclass(frozen=True)
class Goal:
    what: str
    met: bool
    measured: str


def spread(ratios: Sequence[float]) -> str:
    return f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}" if ratios else "—"


def tool_output_ratios(held_out: bool = False) -> tuple[dict[str, dict[str, list[float]]], dict[str, list[float]]]:
    """Estimate ÷ real count of every tool result of at least 500 real tokens, by kind and profile, and of every
    conversation (each message estimated on its own, as the worker does), by profile."""
    counters = reference_counters()
    by_kind: dict[str, dict[str, list[float]]] = {}
    real_of: dict[str, dict[str, int]] = {}
    for sample in tool_outputs(held_out):
        real_of[sample.text] = {p: counters[r](sample.text) for p, r in REFERENCE_OF_PROFILE.items() if r in counters}
        for profile, real in real_of[sample.text].items():
            if real >= RESULT_TOKENS:
                ratio = estimate_tokens(sample.text, profile) / real
                by_kind.setdefault(sample.kind, {}).setdefault(profile, []).append(ratio)
    whole: dict[str, list[float]] = {}
    for conversation in conversations(held_out=held_out):
        for profile, reference in REFERENCE_OF_PROFILE.items():
            if reference not in counters:
                continue
            real = sum(real_of[t][profile] if t in real_of else counters[reference](t) for t in conversation.parts)
            estimate = sum(estimate_tokens(t, profile) for t in conversation.parts)
            whole.setdefault(profile, []).append(estimate / real)
    return by_kind, whole


def tool_output_table(by_kind: dict[str, dict[str, list[float]]], whole: dict[str, list[float]]) -> str:
    profiles = [p for p in FITTED if p in whole]
    rows = [
        [kind, str(len(next(iter(r.values()), []))), *(spread(r.get(p, [])) for p in profiles)]
        for kind, r in by_kind.items()
    ]
    every = {p: [x for r in by_kind.values() for x in r.get(p, [])] for p in profiles}
    rows.append(
        [
            "every result ≥ 500 tokens",
            str(len(every[profiles[0]]) if profiles else 0),
            *(spread(every[p]) for p in profiles),
        ]
    )
    rows.append(
        [f"whole conversations ({len(next(iter(whole.values()), []))})", "", *(spread(whole[p]) for p in profiles)]
    )
    return table(["kind", "results", *(f"{p} ÷ {REFERENCE_OF_PROFILE[p]}: min / median / max" for p in profiles)], rows)


def tool_output_goals(
    by_kind: dict[str, dict[str, list[float]]], whole: dict[str, list[float]], label: str = ""
) -> list[Goal]:
    goals = []
    for profile in FITTED:
        if profile not in whole:
            continue
        results = [x for r in by_kind.values() for x in r.get(profile, [])]
        lowest = min(results)
        goals.append(
            Goal(
                f"{profile}: every tool result ≥ {RESULT_TOKENS} tokens ≥ {RESULT_GOAL}{label}",
                lowest >= RESULT_GOAL,
                f"lowest {lowest:.3f}",
            )
        )
        low, median = min(whole[profile]), statistics.median(whole[profile])
        goals.append(
            Goal(
                f"{profile}: conversations never under, median ≤ {CONVERSATION_GOAL[1]}{label}",
                low >= CONVERSATION_GOAL[0] and median <= CONVERSATION_GOAL[1],
                f"lowest {low:.3f}, median {median:.3f}",
            )
        )
    return goals


def ratio_goals(texts: dict[str, str], goal: tuple[float, float], what: str) -> list[Goal]:
    counters = reference_counters()
    goals = []
    for profile in FITTED:
        reference = REFERENCE_OF_PROFILE[profile]
        if reference not in counters or not texts:
            continue
        ratios = {name: estimate_tokens(text, profile) / counters[reference](text) for name, text in texts.items()}
        outside = {n: round(r, 3) for n, r in ratios.items() if not goal[0] <= r <= goal[1]}
        goals.append(
            Goal(f"{profile}: {what}", not outside, f"outside: {outside}" if outside else f"{len(ratios)} texts")
        )
    return goals


def accuracy_rows(texts: dict[str, str], goal: tuple[float, float] = GOAL) -> list[list[str]]:
    counters = reference_counters()
    rows = []
    for name, text in texts.items():
        real = {ref: count(text) for ref, count in counters.items()}
        row = [name, f"{len(text):,}", *(f"{real[r]:,}" for r in counters)]
        for baseline in ("chars4", "simple"):
            row += [f"{estimate_tokens(text, baseline) / real[r]:.3f}" for r in counters]
        for profile in FITTED:
            reference = REFERENCE_OF_PROFILE[profile]
            if reference in real:
                ratio = estimate_tokens(text, profile) / real[reference]
                mark = "" if goal[0] <= ratio <= goal[1] else " ✗"
                row.append(f"{ratio:.3f}{mark}")
            else:
                row.append("skipped")
        rows.append(row)
    return rows


def accuracy_header() -> list[str]:
    refs = list(reference_counters())
    return [
        "text",
        "chars",
        *refs,
        *(f"chars/4 ÷ {r}" for r in refs),
        *(f"simple ÷ {r}" for r in refs),
        *(f"{p} ÷ {REFERENCE_OF_PROFILE[p]}" for p in FITTED),
    ]


def mixed_text() -> tuple[str, str]:
    """About a million characters mixing the corpus's scripts (or generated chapters when it is absent)."""
    corpus = corpus_files()
    if corpus:
        return "\n".join(text[:150_000] for text in corpus.values()), "the shared corpus, 150,000 chars of each file"
    parts = chapters(8, chars=125_000)
    return "\n".join(c.text for c in parts), "generated chapters (../shared absent)"


def fastest(count: Callable[[str], object], text: str, repeat: int) -> float:
    """The best of ``repeat`` timings, each on a fresh copy of ``text``: a string that has been encoded once
    keeps its UTF-8 form, and the second reader would get it for free."""
    best = float("inf")
    for _ in range(repeat):
        copy = text[:-1] + text[-1:]
        started = time.perf_counter()
        count(copy)
        best = min(best, time.perf_counter() - started)
    return best


def throughput_rows(text: str, repeat: int = 7) -> list[list[str]]:
    o200k = load_encoding("o200k")
    baseline = fastest(lambda s: o200k.encode(s, disallowed_special=()), text, repeat)
    rows = [["tiktoken o200k encode", f"{len(text) / baseline / 1e6:.1f}", "1.0"]]
    for profile in PROFILES:
        seconds = fastest(partial(estimate_tokens, profile=profile), text, repeat)
        rows.append([f"estimate_tokens({profile!r})", f"{len(text) / seconds / 1e6:.1f}", f"{baseline / seconds:.1f}"])
    return rows


def speed_goal(rows: list[list[str]]) -> Goal:
    ratio = float(next(r[2] for r in rows if r[0] == "estimate_tokens('claude')"))
    return Goal(
        f"estimate_tokens('claude') ≥ {SPEED_GOAL:.0f}× tiktoken encode on mixed text",
        ratio >= SPEED_GOAL,
        f"{ratio:.1f}×",
    )


def main() -> None:
    corpus = corpus_files()
    print("## Estimate ÷ real count, corpus files (✗: outside [1.00, 1.15])\n")
    if corpus:
        print(table(accuracy_header(), accuracy_rows(corpus)))
    else:
        print("Skipped: ../shared/corpus is absent.")
    for skipped in skipped_references():
        print(f"\nSkipped reference tokenizer: {skipped}")
    print("\n## Estimate ÷ real count, text the weights were not fitted to (bench/samples.py; ✗: below 1.00)\n")
    print(table(accuracy_header(), accuracy_rows(unseen_samples(), UNSEEN_GOAL)))
    by_kind, whole = tool_output_ratios()
    print("\n## Estimate ÷ real count, agent tool output (bench/tool_output.py; results of ≥ 500 real tokens)\n")
    print(table_or_skip(by_kind, whole))
    held_kinds, held_whole = tool_output_ratios(held_out=True)
    print("\n## The same, held out: tool output of other packages and other draws, never fitted to\n")
    print(table_or_skip(held_kinds, held_whole))
    text, source = mixed_text()
    print(f"\n## Throughput on {len(text):,} characters of mixed text ({source})\n")
    speed = throughput_rows(text)
    print(table(["counter", "million chars/s", "× tiktoken"], speed))
    tool_text = "\n".join(s.text for s in tool_outputs())
    print(f"\n## Throughput on {len(tool_text):,} characters of tool output\n")
    print(table(["counter", "million chars/s", "× tiktoken"], throughput_rows(tool_text)))
    goals = [
        speed_goal(speed),
        *ratio_goals(corpus, GOAL, "every corpus file within [1.00, 1.15]"),
        *ratio_goals(unseen_samples(), UNSEEN_GOAL, "text in scripts the fit never saw never under (bench/samples.py)"),
        *tool_output_goals(by_kind, whole),
        *tool_output_goals(held_kinds, held_whole, " (held out)"),
    ]
    print("\n## Goals\n")
    print(table(["goal", "", "measured"], [[g.what, "met" if g.met else "NOT MET", g.measured] for g in goals]))
    sys.stdout.flush()


def table_or_skip(by_kind: dict[str, dict[str, list[float]]], whole: dict[str, list[float]]) -> str:
    return tool_output_table(by_kind, whole) if whole else "Skipped: no reference tokenizer."


if __name__ == "__main__":
    main()

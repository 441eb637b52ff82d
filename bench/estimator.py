"""How good and how fast the token estimates are: ``python -m bench.estimator``.

1. Per corpus file: every profile's estimate divided by the real count of its tokenizer (the goal: within
   [1.00, 1.15]), beside characters / 4 and the simple by-script rule.
2. Texts in scripts the corpus lacks (``bench/samples.py``): the estimate must not fall below the real count.
3. Throughput of each profile against tiktoken's ``encode`` (o200k) on the same mixed text, as a ratio measured
   in this run (the goal: at least 20x for the default profile).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial

from bench.reference import REFERENCE_OF_PROFILE, corpus_files, reference_counters, skipped_references
from bench.report import table
from bench.samples import unseen_samples
from emulator.tokenizer import load_encoding
from plimsoll import PROFILES, estimate_tokens
from worker.chapters import chapters

GOAL = (1.00, 1.15)  # on the corpus
UNSEEN_GOAL = (1.00, float("inf"))  # elsewhere: never below the real count
FITTED = ("claude", "cl100k", "o200k")


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
    text, source = mixed_text()
    print(f"\n## Throughput on {len(text):,} characters of mixed text ({source})\n")
    print(table(["counter", "million chars/s", "× tiktoken"], throughput_rows(text)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""How good and how fast the token estimates are: ``python -m bench.estimator``.

1. Per corpus file: every profile's estimate divided by the real count of its tokenizer (the goal: within
   [1.00, 1.15]), beside characters / 4 and the simple by-script rule.
2. Texts in scripts the corpus lacks (``bench/samples.py``): the estimate must not fall below the real count.
3. Throughput of each profile against tiktoken's ``encode`` (o200k) on the same mixed text, as a ratio measured
   in this run (the goal: at least 20x for the default profile).
"""

from __future__ import annotations

import sys
import timeit

from bench.reference import REFERENCE_OF_PROFILE, corpus_files, reference_counters, skipped_references
from bench.report import table
from bench.samples import unseen_samples
from emulator.tokenizer import load_encoding
from plimsoll import PROFILES, estimate_tokens
from worker.chapters import chapters

GOAL = (1.00, 1.15)
FITTED = ("claude", "cl100k", "o200k")


def accuracy_rows(texts: dict[str, str]) -> list[list[str]]:
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
                mark = "" if GOAL[0] <= ratio <= GOAL[1] else " ✗"
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


def throughput_rows(text: str, repeat: int = 5) -> list[list[str]]:
    o200k = load_encoding("o200k")
    baseline = min(timeit.repeat(lambda: o200k.encode(text, disallowed_special=()), number=1, repeat=repeat))
    rows = [["tiktoken o200k encode", f"{len(text) / baseline / 1e6:.1f}", "1.0"]]
    for profile in PROFILES:
        # A fresh copy each time, so no cached UTF-8 form of the string flatters us.
        seconds = min(timeit.repeat(lambda: estimate_tokens(text + " ", profile), number=1, repeat=repeat))
        rows.append([f"estimate_tokens({profile!r})", f"{len(text) / seconds / 1e6:.1f}", f"{baseline / seconds:.1f}"])
    return rows


def main() -> None:
    corpus = corpus_files()
    print("## Estimate ÷ real count, corpus files\n")
    if corpus:
        print(table(accuracy_header(), accuracy_rows(corpus)))
    else:
        print("Skipped: ../shared/corpus is absent.")
    for skipped in skipped_references():
        print(f"\nSkipped reference tokenizer: {skipped}")
    print("\n## Estimate ÷ real count, scripts outside the corpus (bench/samples.py)\n")
    print(table(accuracy_header(), accuracy_rows(unseen_samples())))
    text, source = mixed_text()
    print(f"\n## Throughput on {len(text):,} characters of mixed text ({source})\n")
    print(table(["counter", "million chars/s", "× tiktoken"], throughput_rows(text)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

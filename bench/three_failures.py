"""The three published failures of long agent runs, and their fixes, reproduced through the real stack:
``python -m bench.three_failures [--scale N]``.

Everything goes through what production runs: the HTTP API, PostgreSQL, Redis, a Celery worker, the official
Anthropic SDK and the model emulator, which counts with a real tokenizer (cl100k) and rejects requests over its
hard limit as the real API does. Writes ``bench/results/three_failures.md`` and its plots.

1. Eight subagents, each with one instruction and many long Russian chapters, under four configurations:
   ``legacy`` (cut only at user messages, characters / 4), ``original`` (the three stages with the simple
   by-script rule), ``unbatched`` (Plimsoll, but clearing one result at a time) and ``plimsoll``.
2. The space-anxious agent on a 40-chapter task, with and without the safety-net paragraph.
3. Estimates of one Russian chapter of about 100,000 characters, beside the published figures.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from api.client import PlimsollClient
from bench.provenance import header, png_metadata
from bench.report import table
from demo.chapters import chapters, corpus_text, generated_text
from demo.run import notes_matching
from emulator import EmulatorServer
from models.db import Database
from models.history import documents_read
from models.options import JobOptions
from models.prices import FIVE_MINUTES
from models.tables import Job, JobStatus, Step, Strategy
from models.tenants import create_tenant
from plimsoll import estimate_tokens
from testbed.stack import api_server, bundled_emulator, celery_worker, environment, fresh_database
from vocab import load_encoding

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGURATIONS = (Strategy.LEGACY, Strategy.ORIGINAL, Strategy.UNBATCHED, Strategy.PLIMSOLL)
PUBLISHED = {"chars / 4": 25_023, "by-script rule": 43_423, "measured": 44_600}
# The real size of a rejected request, from the provider's message ("prompt is too long: 1004321 tokens > ..."
# or "input length and `max_tokens` exceed context limit: 998765 + 4096 > ...").
_TOO_LONG = re.compile(r"(?:prompt is too long: |exceed context limit: )(\d+)")


@dataclass(frozen=True)
class Scale:
    """The write-up's figures divided by ``factor`` (limit, budget and chapter length alike)."""

    factor: int = 1
    subagents: int = 8
    chapters_per_subagent: int = 30
    anxious_chapters: int = 40

    @property
    def limit(self) -> int:
        return 1_000_000 // self.factor

    @property
    def budget(self) -> int:
        return 400_000 // self.factor

    @property
    def chapter_chars(self) -> int:  # a Russian chapter of about 44,000 tokens at full scale
        return 88_000 // self.factor


@dataclass
class Stack:
    database: Database
    api_url: str
    emulator: EmulatorServer
    api_key: str


@dataclass
class Subagent:
    status: str
    documents: int
    read: int  # chapters it read (read_document calls)
    noted: int  # chapters whose note in its final answer matches their content
    requests: list[int]  # real tokens of each request, in order (a rejected one last)
    rejected: bool
    cache_read: int = 0
    cache_write: int = 0
    uncached: int = 0


@dataclass
class Configuration:
    name: str
    subagents: list[Subagent] = field(default_factory=list)
    seconds: float = 0.0

    def requests(self) -> list[int]:
        return [r for s in self.subagents for r in s.requests]

    @property
    def input_cost(self) -> float:
        """Input cost relative to sending every token uncached."""
        total = sum(s.uncached + s.cache_read + s.cache_write for s in self.subagents)
        paid = sum(
            FIVE_MINUTES.cost(uncached=s.uncached, written=s.cache_write, read=s.cache_read) for s in self.subagents
        )
        return paid / total if total else 0.0

    @property
    def cache_read_share(self) -> float:
        total = sum(s.uncached + s.cache_read + s.cache_write for s in self.subagents)
        return sum(s.cache_read for s in self.subagents) / total if total else 0.0


@dataclass
class AnxiousRun:
    safety_net: bool
    chapters: int
    read: int
    largest_request: int
    budget: int
    ended: str


def russian_chapters(count: int, chars: int) -> dict[str, str]:
    return {c.name: c.text for c in chapters(count, chars=chars, languages=("ru",))}


def wait_for(database: Database, job_id: int, timeout: float) -> Job:
    """The job once it and all its subagents have finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with database.session() as session:
            job = session.get(Job, job_id)
            children = session.scalars(select(Job.status).where(Job.parent_id == job_id)).all()
            if job is not None and JobStatus(job.status).finished and all(JobStatus(c).finished for c in children):
                return job
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} did not finish within {timeout:.0f} s")


def upload(stack: Stack, texts: dict[str, str]) -> list[int]:
    with PlimsollClient(stack.api_url, stack.api_key) as client:
        return [client.add_document(name=name, content=text).id for name, text in texts.items()]


def submit(stack: Stack, documents: list[int], options: JobOptions) -> int:
    with PlimsollClient(stack.api_url, stack.api_key) as client:
        created = client.create_job(
            instruction="Check every chapter against the notes, one by one, and report on each.",
            document_ids=documents,
            options=options,
        )
    return created.id


def subagent_of(session: Any, job: Job, texts: dict[str, str]) -> Subagent:
    steps = list(session.scalars(select(Step).where(Step.job_id == job.id).order_by(Step.step)))
    requests = [s.reported_input_tokens for s in steps if s.reported_input_tokens is not None]
    rejected = job.status == JobStatus.NEEDS_NEW_CHAT
    too_long = _TOO_LONG.search(job.error or "")
    if rejected and too_long:
        requests.append(int(too_long.group(1)))
    names = [d.name for d in job.documents]
    return Subagent(
        status=job.status,
        documents=len(names),
        read=len(documents_read(session, job_ids=[job.id], names=names)),
        noted=len(notes_matching(job.final_answer or "", {name: texts[name] for name in names})),
        requests=requests,
        rejected=rejected,
        cache_read=job.cache_read_tokens,
        cache_write=job.cache_write_tokens,
        uncached=job.input_tokens,
    )


def eight_subagents(
    stack: Stack, scale: Scale, configurations: tuple[Strategy, ...] = CONFIGURATIONS
) -> list[Configuration]:
    """Failure 1 and the cost of clearing without batches: a main job hands each subagent its chapters."""
    texts = russian_chapters(scale.subagents * scale.chapters_per_subagent, scale.chapter_chars)
    documents = upload(stack, texts)
    results = []
    for name in configurations:
        stack.emulator.reset()
        stack.emulator.configure(limit=scale.limit, delegate_group=scale.chapters_per_subagent)
        started = time.monotonic()
        job_id = submit(stack, documents, JobOptions(budget=scale.budget, strategy=name))
        wait_for(stack.database, job_id, timeout=1_800)
        configuration = Configuration(name, seconds=time.monotonic() - started)
        with stack.database.session() as session:
            for child in session.scalars(select(Job).where(Job.parent_id == job_id).order_by(Job.id)):
                configuration.subagents.append(subagent_of(session, child, texts))
        results.append(configuration)
    return results


def space_anxious(stack: Stack, scale: Scale) -> list[AnxiousRun]:
    """Failure 2: the agent stops "to save space" unless told that old results are cleared for it."""
    texts = russian_chapters(scale.anxious_chapters, scale.chapter_chars)
    documents = upload(stack, texts)
    runs = []
    for safety_net in (False, True):
        stack.emulator.reset()
        # One agent reads everything itself (no delegating), as in the write-up.
        stack.emulator.configure(limit=scale.limit, anxious=True, delegate_group=len(texts) + 1)
        job_id = submit(stack, documents, JobOptions(budget=scale.budget, safety_net=safety_net))
        job = wait_for(stack.database, job_id, timeout=1_800)
        with stack.database.session() as session:
            done = subagent_of(session, session.get_one(Job, job_id), texts)
        answer = (job.final_answer or job.error or "").strip()
        ended = answer.splitlines()[0] if answer else job.status
        runs.append(AnxiousRun(safety_net, len(texts), done.read, max(done.requests, default=0), scale.budget, ended))
    return runs


def russian_chapter(chars: int = 100_092) -> tuple[str, str]:
    """A Russian chapter of ``chars`` characters (100,092 / 4 = the published 25,023), and where it is from."""
    source = corpus_text("ru")
    if source is not None:
        start = source.find("\n", len(source) // 3) + 1
        return source[start : start + chars], "War and Peace, vol. 1 (../shared/corpus)"
    return generated_text("ru", chars, seed=1)[:chars], "generated Russian (../shared absent)"


def estimates(text: str) -> list[list[str]]:
    from estimate_fit.reference import reference_counters

    rows = [["characters", f"{len(text):,}", "", ""]]
    rows.append(["chars / 4", f"{estimate_tokens(text, 'chars4'):,}", f"{PUBLISHED['chars / 4']:,}", "estimate"])
    rows.append(
        ["by-script rule", f"{estimate_tokens(text, 'simple'):,}", f"{PUBLISHED['by-script rule']:,}", "estimate"]
    )
    for profile in ("claude", "cl100k", "o200k"):
        rows.append([f"Plimsoll `{profile}` profile", f"{estimate_tokens(text, profile):,}", "", "estimate"])
    for name, count in reference_counters().items():
        rows.append(
            [
                f"real: {name}",
                f"{count(text):,}",
                f"~{PUBLISHED['measured']:,}" if name == "claude-legacy" else "",
                "tokenizer",
            ]
        )
    return rows


# ---- the report ----


def configuration_rows(results: list[Configuration], scale: Scale) -> list[list[str]]:
    rows = []
    for c in results:
        requests = c.requests()
        largest = max(requests, default=0)
        rows.append(
            [
                c.name,
                f"{sum(s.rejected for s in c.subagents)} of {len(c.subagents)}",
                f"{sum(s.status == JobStatus.SUCCEEDED for s in c.subagents)} of {len(c.subagents)}",
                " / ".join(str(s.read) for s in c.subagents),
                f"{sum(s.noted for s in c.subagents)}",
                f"{len(requests)}",
                f"{largest:,} ({largest / scale.budget:.2f}× budget, {largest / scale.limit:.2f}× limit)",
                f"{sum(r > scale.budget for r in requests)}",
                f"{c.cache_read_share:.0%}",
                f"{c.input_cost:.2f}",
                f"{c.seconds:.0f} s",
            ]
        )
    return rows


CONFIGURATION_HEADER = [
    "configuration",
    "rejected",
    "finished",
    "chapters read (each subagent)",
    "notes that match their chapter (all subagents)",
    "requests",
    "largest request, real tokens",
    "requests over budget (real size)",
    "cache-read share",
    "input cost vs uncached",
    "wall time",
]


def command(scale: Scale) -> str:
    return "python -m bench.three_failures" + (f" --scale {scale.factor}" if scale.factor != 1 else "")


def write_report(
    results: list[Configuration], anxious: list[AnxiousRun], chapter: tuple[str, str], scale: Scale, seconds: float
) -> str:
    text, source = chapter
    anxious_rows = [
        [
            "with the safety net" if r.safety_net else "without",
            f"{r.read} of {r.chapters}",
            f"{r.largest_request:,} of {r.budget:,}",
            r.ended[:120],
        ]
        for r in anxious
    ]
    scaled = (
        "at the write-up's scale" if scale.factor == 1 else f"scaled down {scale.factor}× (limit, budget, chapters)"
    )
    report = f"""# The three failures, reproduced through the real stack

{header(command(scale))}

Run {scaled}, in {seconds:.0f} s: HTTP API, PostgreSQL, Redis, a
Celery worker, the official Anthropic SDK and the emulator counting with cl100k and enforcing a hard limit of
{scale.limit:,} tokens. Budget per request: {scale.budget:,} tokens.

## 1. Subagents outgrew the model

{scale.subagents} subagents, each with one instruction and {scale.chapters_per_subagent} Russian chapters of about
{scale.chapter_chars:,} characters. Published: 8 of 8 rejected before; 0 of 8 rejected, 8 of 8 finished after.

{table(CONFIGURATION_HEADER, configuration_rows(results, scale))}

![request size per step](three_failures_requests.png)

![cumulative input cost](three_failures_cost.png)

## 2. A subagent stopped "to save space"

The emulator's space-anxious agent, told to read {scale.anxious_chapters} chapters. Published: it stopped after 2,
having used about 100,000 of a 400,000-token budget; told that old results are cleared, it kept going.

{table(["instructions", "chapters read", "largest request vs budget", "how it ended"], anxious_rows)}

## 3. Counting as if everything were English

One Russian chapter ({source}). Published: characters / 4 gave 25,023 tokens, the by-script rule 43,423, and
about 44,600 were measured.

{table(["count", "tokens", "published", "kind"], estimates(text))}

![estimate ÷ real count by script and profile](three_failures_estimates.png)
"""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "three_failures.md").write_text(report, encoding="utf-8")
    return report


def plot(results: list[Configuration], scale: Scale) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.estimator import FITTED
    from estimate_fit.reference import REFERENCE_OF_PROFILE, corpus_files, reference_counters

    figure, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.6), sharey=True)
    for axis, configuration in zip(axes, results, strict=True):
        for subagent in configuration.subagents:
            axis.plot(range(1, len(subagent.requests) + 1), subagent.requests, linewidth=1)
            if subagent.rejected:
                axis.plot(len(subagent.requests), subagent.requests[-1], "rx")
        axis.axhline(scale.budget, color="green", linestyle="--", label="budget")
        axis.axhline(scale.limit, color="red", linestyle=":", label="hard limit")
        axis.set_title(configuration.name)
        axis.set_xlabel("request")
    axes[0].set_ylabel("real tokens per request")
    axes[0].legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(RESULTS / "three_failures_requests.png", dpi=110, metadata=png_metadata(command(scale)))
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(6, 3.6))
    for configuration in results:
        if configuration.name not in (Strategy.UNBATCHED, Strategy.PLIMSOLL):
            continue
        paid = _cumulative_cost(configuration)
        axis.plot(range(1, len(paid) + 1), paid, label=f"{configuration.name}")
    axis.set_xlabel("request (all subagents, in step order)")
    axis.set_ylabel("cumulative input cost (uncached tokens)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "three_failures_cost.png", dpi=110, metadata=png_metadata(command(scale)))
    plt.close(figure)

    corpus = corpus_files() or {c.name: c.text for c in chapters(4, chars=40_000, prefer_corpus=False)}
    counters = reference_counters()
    figure, axis = plt.subplots(figsize=(8, 3.6))
    profiles = [
        p for p in ("chars4", "simple", *FITTED) if p in ("chars4", "simple") or REFERENCE_OF_PROFILE[p] in counters
    ]
    width = 0.8 / len(profiles)
    for offset, profile in enumerate(profiles):
        reference = counters[REFERENCE_OF_PROFILE.get(profile, "cl100k")]
        ratios = [estimate_tokens(t, profile) / reference(t) for t in corpus.values()]
        axis.bar([i + offset * width for i in range(len(corpus))], ratios, width, label=profile)
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_ylim(0, 1.4)
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(corpus))], [n.split(".")[0] for n in corpus], rotation=20)
    axis.set_ylabel("estimate ÷ real count")
    axis.set_title("each profile against its tokenizer (chars4 and simple against cl100k)", fontsize=9)
    axis.legend(fontsize=7, ncol=len(profiles), loc="upper center")
    figure.tight_layout()
    figure.savefig(RESULTS / "three_failures_estimates.png", dpi=110, metadata=png_metadata(command(scale)))
    plt.close(figure)


def _cumulative_cost(configuration: Configuration) -> list[float]:
    """Per request, what its input cost so far, spreading each subagent's cache reads and writes over its
    requests in proportion to their size (the emulator reports totals per job)."""
    points: list[float] = []
    total = 0.0
    for subagent in configuration.subagents:
        size = sum(subagent.requests) or 1
        paid = FIVE_MINUTES.cost(uncached=subagent.uncached, written=subagent.cache_write, read=subagent.cache_read)
        rate = paid / size
        for request in subagent.requests:
            total += request * rate
            points.append(total)
    return points


def run(
    stack: Stack, scale: Scale, *, configurations: tuple[Strategy, ...] = CONFIGURATIONS, report: bool = True
) -> tuple[list[Configuration], list[AnxiousRun]]:
    started = time.monotonic()
    results = eight_subagents(stack, scale, configurations)
    anxious = space_anxious(stack, scale)
    if report:
        plot(results, scale)
        write_report(results, anxious, russian_chapter(), scale, time.monotonic() - started)
    return results, anxious


@contextmanager
def real_stack() -> Iterator[Stack]:
    """PostgreSQL (a fresh database), Redis, a Celery worker, the API and the emulator."""
    with fresh_database(prefix="plimsoll_bench") as url, bundled_emulator() as emulator:
        values = {
            "PLIMSOLL_DATABASE_URL": url,
            "PLIMSOLL_QUEUE": "celery",
            "PLIMSOLL_EMULATOR_URL": emulator.base_url,
            "PLIMSOLL_ANTHROPIC_BASE_URL": emulator.base_url,
            "PLIMSOLL_MAX_STEPS_PER_JOB": "400",
            "PLIMSOLL_ALLOW_REPRODUCTIONS": "true",  # the point of this benchmark
        }
        with environment(values), celery_worker(), api_server(url) as api_url:
            database = Database(url)
            with database.session() as session:
                _, key = create_tenant(session, name="three-failures")
            try:
                yield Stack(database, api_url, emulator, key)
            finally:
                database.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="divide limit, budget and chapter length by this")
    arguments = parser.parse_args()
    scale = Scale(factor=arguments.scale)
    load_encoding("cl100k")
    with real_stack() as stack:
        run(stack, scale)
    print((RESULTS / "three_failures.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()

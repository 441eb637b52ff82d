"""A fleet under a real provider limit: ``python -m bench.fleet [--scaled]``.

Two Celery workers with different hostnames (prefork, 2 processes each, in processes of their own) share the
limiter in Redis and run against the emulator with an input-tokens-per-minute limit enforced as Anthropic does
(token bucket, 429 with retry-after and the rate-limit headers). Tenant A bursts N jobs; tenant B submits one
small job right after. Side by side in one run: admission on (the default), admission off (steps sent as they
come; a 429 is waited out, as the worker now does), and admission on while a second client takes 20 % of the key.

Reported per run: jobs by state, 429s per answered request, input tokens counted per minute against the limit,
wall time against the ideal, and tenant B's job time against its time alone. Writes ``bench/results/fleet.md``
stating the commit. Goals are marked met / NOT MET by this script.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import select

from bench import fleet_sleep
from bench.chaos_services import Processes
from bench.cluster import sender, start_worker
from bench.goals import Goal, render_goals
from bench.paid import Paid, paid
from bench.provenance import header, keep
from bench.report import table
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.options import JobOptions
from models.tables import Job, JobKind, JobStatus
from models.tenants import create_tenant
from testbed.stack import REDIS_URL, bundled_emulator, fresh_database, worker_environment
from worker.fairness import priority_lists, step_priority
from worker.names import RATE_LIMIT_KEYS, STEP_TASK

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
API_KEY = "fleet-key"
MODEL = "plimsoll-emulator"


@dataclass(frozen=True)
class Workload:
    jobs: int = 30  # tenant A's burst
    documents: int = 4
    chars: int = 40_000  # per document
    small_documents: int = 1  # tenant B's job
    input_tokens_per_minute: int = 200_000
    window_seconds: float = 60.0  # how the limit's use is reported: per minute, after the first
    workers: int = 2
    processes: int = 2  # per worker
    timeout_seconds: float = 1_800.0


FULL = Workload(jobs=30, documents=4, chars=24_000, window_seconds=30.0)
SCALED = Workload(
    jobs=8, documents=3, chars=3_300, input_tokens_per_minute=15_000, window_seconds=20.0, timeout_seconds=600.0
)


@dataclass(frozen=True)
class Mode:
    name: str
    admission: bool
    second_client_share: float = 0.0


MODES = (
    Mode("admission (default)", admission=True),
    Mode("no admission", admission=False),
    Mode("admission, second client 20 %", admission=True, second_client_share=0.2),
)


@dataclass
class Result:
    mode: Mode
    states: dict[str, int]
    answered: int
    refused: int
    counted: int  # input tokens the provider counted (cache reads left out), ours only
    minutes: list[float]  # share of our part of the limit used, per full minute after the first
    wall: float
    ideal: float
    small_alone: float
    small_in_burst: float
    limit: float  # our part of the limit, per minute
    failures: list[str] = field(default_factory=list)
    sleep: fleet_sleep.CapacitySleep | None = None  # worker-process time spent waiting for capacity
    paid: Paid | None = None  # what the run was billed, from the ledger

    @property
    def per_answered(self) -> float:
        return self.refused / self.answered if self.answered else 0.0

    @property
    def refused_share(self) -> float:
        return self.refused / (self.answered + self.refused) if self.answered + self.refused else 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--scaled", action="store_true", help="the scaled-down run the tests make")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS / 'fleet.md'}")
    args = parser.parse_args(argv)
    workload = SCALED if args.scaled else FULL
    results = run(workload)
    report = render(workload, results)
    print(report)
    if args.write:
        keep(report, "fleet.md")


def run(workload: Workload, modes: tuple[Mode, ...] = MODES) -> list[Result]:
    with bundled_emulator() as emulator, fresh_database(prefix="plimsoll_fleet") as url:
        database = Database(url)
        try:
            return [run_mode(workload, mode, emulator, database, url) for mode in modes]
        finally:
            database.dispose()
            forget_learned_limits()  # what the fleet learned of this emulator's limits must not slow what follows


def run_mode(workload: Workload, mode: Mode, emulator: EmulatorServer, database: Database, url: str) -> Result:
    forget_learned_limits()
    emulator.reset()
    limits = {"input_tokens_per_minute": workload.input_tokens_per_minute}
    emulator.configure(rate_limits={**limits, "second_client_share": mode.second_client_share})
    queue = f"plimsoll-fleet-{uuid.uuid4().hex[:8]}"
    tenants: dict[str, int] = {}  # A's jobs are one tenant's, B's both another's
    metrics = Path(tempfile.mkdtemp(prefix="plimsoll-fleet-metrics-"))
    with workers(workload, mode, emulator, url, queue, metrics) as send:
        time_job(database, send, submit(database, "warm-up", 1, workload, tenants), 300)  # the workers are up
        alone = submit(database, "B", workload.small_documents, workload, tenants, "B-alone")
        small_alone = time_job(database, send, alone, 300)
        emulator.reset(keep_config=True)  # the burst starts with a full bucket and fresh stats
        forget_learned_limits()
        started = time.monotonic()
        burst = [submit(database, "A", workload.documents, workload, tenants, f"A{n}") for n in range(workload.jobs)]
        for job_id in burst:
            send(job_id)
        small = submit(database, "B", workload.small_documents, workload, tenants)
        small_in_burst = time_job(database, send, small, workload.timeout_seconds)
        wait_all(database, [*burst, small], started + workload.timeout_seconds)
        wall = time.monotonic() - started
    stats = emulator.stats()
    ours = 1.0 - mode.second_client_share
    limit = workload.input_tokens_per_minute * ours
    answered = [r for r in stats["log"] if r["status"] == 200 and r["route"] == "messages"]
    counted = sum(r["input_tokens"] - r["cache_read"] for r in answered)
    # The bucket starts full (a minute's worth); the rest comes at the limit's rate.
    ideal = max(0.0, counted - workload.input_tokens_per_minute) / limit * 60 if limit else 0.0
    return Result(
        mode=mode,
        states=job_states(database, [*burst, small]),
        answered=len(answered),
        refused=stats["rejections"].get("rate_limited", 0),
        counted=counted,
        minutes=per_window(answered, limit, workload.window_seconds) if limit else [],
        wall=wall,
        ideal=ideal,
        small_alone=small_alone,
        small_in_burst=small_in_burst,
        limit=limit,
        failures=failures(database, [*burst, small]),
        sleep=capacity_sleep(metrics),
        paid=paid(database, [*burst, small]),
    )


def capacity_sleep(metrics: Path) -> fleet_sleep.CapacitySleep:
    try:
        return fleet_sleep.read(sorted(metrics.iterdir()))
    finally:
        shutil.rmtree(metrics, ignore_errors=True)


@contextmanager
def workers(
    workload: Workload, mode: Mode, emulator: EmulatorServer, url: str, queue: str, metrics: Path | None = None
) -> Iterator[Any]:
    """``workload.workers`` Celery workers with their own hostnames on ``queue`` (each with a Prometheus folder of
    its own under ``metrics``); yields a function that queues a job's first step there."""
    env = worker_environment(url, queue, emulator.base_url, API_KEY)
    env["PLIMSOLL_ADMISSION"] = "true" if mode.admission else "false"
    processes = Processes()
    database = Database(url)
    try:
        for slot in range(workload.workers):
            own = dict(env)
            if metrics is not None:
                (metrics / str(slot)).mkdir()
                own["PROMETHEUS_MULTIPROC_DIR"] = str(metrics / str(slot))
            name = f"fleet{slot}-{queue}@%h"
            start_worker(
                processes,
                queue=queue,
                name=name,
                concurrency=workload.processes,
                env=own,
                cwd=ROOT,
                log=f"worker{slot}.log",
            )
        app = sender(queue)

        def send(job_id: int) -> None:  # with the priority the API's enqueue gives a first step (worker/fairness.py)
            with database.session() as session:
                priority = step_priority(session, job_id)
            app.send_task(STEP_TASK, (job_id, 0), queue=queue, priority=priority)

        yield send
    finally:
        processes.close()
        database.dispose()
        redis.Redis.from_url(REDIS_URL).delete(*priority_lists(queue))


def submit(
    database: Database, tenant: str, documents: int, workload: Workload, tenants: dict[str, int], label: str = ""
) -> int:
    # Each job's own texts: jobs must not share a prompt-cache prefix with each other.
    written = chapters(documents, chars=workload.chars, languages=("en",))
    texts = {c.name: f"{label or tenant}\n{c.text}" for c in written}
    with database.session() as session:
        if tenant not in tenants:
            tenants[tenant] = create_tenant(session, name=f"{tenant}-{uuid.uuid4().hex[:6]}")[0].id
        ids = [add_document(session, tenant_id=tenants[tenant], name=n, content=t).id for n, t in texts.items()]
        job = create_job(
            session,
            tenant_id=tenants[tenant],
            instruction="Check each chapter against the notes and report one fact of each.",
            document_ids=ids,
            kind=JobKind.SUBAGENT,
            options=JobOptions(model=MODEL),
        )
        return job.id


def time_job(database: Database, send: Any, job_id: int, timeout: float) -> float:
    """From sending the job's first step to its end as the worker recorded it (``finished_at``): the half-second
    polling of ``wait_all`` would round a sub-second job up to it."""
    started, sent = time.monotonic(), datetime.now(UTC)
    send(job_id)
    wait_all(database, [job_id], started + timeout)
    with database.session() as session:
        finished = session.scalar(select(Job.finished_at).where(Job.id == job_id))
    if finished is None:
        return time.monotonic() - started
    return ((finished if finished.tzinfo else finished.replace(tzinfo=UTC)) - sent).total_seconds()


def wait_all(database: Database, ids: list[int], deadline: float) -> None:
    while time.monotonic() < deadline:
        with database.session() as session:
            statuses = session.scalars(select(Job.status).where(Job.id.in_(ids))).all()
        if all(JobStatus(status).finished for status in statuses):
            return
        time.sleep(0.5)


def job_states(database: Database, ids: list[int]) -> dict[str, int]:
    with database.session() as session:
        statuses = session.scalars(select(Job.status).where(Job.id.in_(ids))).all()
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts


def failures(database: Database, ids: list[int]) -> list[str]:
    with database.session() as session:
        errors = session.scalars(select(Job.error).where(Job.id.in_(ids), Job.status == JobStatus.FAILED)).all()
    return sorted({(error or "")[:120] for error in errors})


def per_window(answered: list[dict[str, Any]], limit: float, window: float) -> list[float]:
    """Share of ``limit`` (per minute) counted in each full window after the first minute (which spends the
    full bucket) and before the last window (where the last jobs end and demand falls under the limit)."""
    if not answered:
        return []
    start, end = min(r["at"] for r in answered) + 60.0, max(r["at"] for r in answered) - window
    shares = []
    low = start
    while low + window <= end:
        tokens = sum(r["input_tokens"] - r["cache_read"] for r in answered if low <= r["at"] < low + window)
        shares.append(tokens / (limit * window / 60.0))
        low += window
    return shares


def forget_learned_limits() -> None:
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{RATE_LIMIT_KEYS}{{anthropic/{MODEL}@*"):
        client.delete(key)
    client.close()


def goals(results: list[Result]) -> list[Goal]:
    default = next(r for r in results if r.mode == MODES[0])
    shared = next((r for r in results if r.mode.second_client_share > 0), None)
    listed = [
        Goal(
            "0 jobs failed (admission on, the default)", sum(default.states.values()) == default.states.get("succeeded")
        ),
        Goal("429s ≤ 1 % of requests (admission on)", default.refused_share <= 0.01),
        Goal(
            "≥ 90 % of the limit used in every full window after the first minute (admission on)",
            all(share >= 0.9 for share in default.minutes) if default.minutes else None,
        ),
        Goal("wall time ≤ 1.1× ideal (admission on)", default.wall <= 1.1 * default.ideal if default.ideal else None),
        Goal(
            "no worker process sleeps while waiting for capacity (busy after learning of a wait ≤ 1 % of the waits, "
            "admission on)",
            default.sleep.met if default.sleep is not None else None,
        ),
        Goal(
            "a small tenant's job ≤ 1.5× its time alone during the burst (fair shares)",
            default.small_in_burst <= 1.5 * default.small_alone,
        ),
    ]
    if shared is not None:
        listed.insert(2, Goal("429s ≤ 3 % of requests with a second client taking 20 %", shared.refused_share <= 0.03))
        listed.insert(0, Goal("0 jobs failed with a second client taking 20 %",
                              sum(shared.states.values()) == shared.states.get("succeeded")))  # fmt: skip
    return listed


def render(workload: Workload, results: list[Result]) -> str:
    lines = [
        "# A fleet under a provider limit",
        "",
        header("python -m bench.fleet" + (" --scaled" if workload == SCALED else " --write")),
        "",
        "Runs: "
        f"{workload.workers} workers × {workload.processes} processes, tenant A {workload.jobs} jobs of "
        f"{workload.documents} documents of {workload.chars:,} characters, tenant B one job of "
        f"{workload.small_documents}; emulator limit {workload.input_tokens_per_minute:,} input tokens/min "
        "(cache reads not counted).",
        "",
        table(
            [
                "run",
                "jobs by state",
                "answered",
                "429s",
                "429s per answered",
                "tokens counted",
                "limit used, by window",
                "wall s",
                "ideal s",
                "B alone s",
                "B in burst s",
                "worker-process s busy waiting (of s told)",
            ],
            [
                [
                    r.mode.name,
                    ", ".join(f"{state} {count}" for state, count in sorted(r.states.items())),
                    r.answered,
                    r.refused,
                    f"{r.per_answered:.3f}",
                    f"{r.counted:,}",
                    ", ".join(f"{share:.0%}" for share in r.minutes) or "(no full window)",
                    f"{r.wall:.1f}",
                    f"{r.ideal:.1f}",
                    f"{r.small_alone:.2f}",
                    f"{r.small_in_burst:.2f}",
                    r.sleep.shown() if r.sleep is not None else "",
                ]
                for r in results
            ],
        ),
        "",
        f"Limit used: input tokens counted in each {workload.window_seconds:.0f} s window after the first minute "
        "(the full bucket) and before the last, against our part of the limit. Ideal: the counted tokens beyond "
        "the first minute's full bucket, at our part of the limit.",
        "",
        *(f"- Billed ({r.mode.name}): {r.paid}." for r in results if r.paid is not None),
        "",
        "## Goals",
        "",
        render_goals(goals(results), "verdict last"),
    ]
    for r in results:
        if r.failures:
            lines += ["", f"Failures ({r.mode.name}): " + "; ".join(r.failures)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

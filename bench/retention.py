"""A retention sweep under load, and killed mid-way: ``python -m bench.retention`` (``--full``: a million rows).

One tenant's archive of ended jobs (500 stored messages per main job with its subagents, a step per two messages
and a summary each; a quarter of them with two subagents) ended 40 days ago under a 30-day policy; beside them a
few held jobs and a few recent ones, which must stay whole. Meanwhile the real service runs: the API (``plimsoll
api``) and a Celery worker (prefork), in processes of their own, with jobs running against the emulator, topped up
so that a fixed number are always unfinished, and two clients reading jobs, message pages and the job list in a
closed loop, every latency recorded.

1. No sweep (the baseline), for a while.
2. ``plimsoll retention --sweep`` in a process of its own, killed with SIGKILL once about a third of the archive
   went; then every main job is checked: whole (its messages, steps and summaries, its subagents' too, all there,
   none marked purged) or purged (none left, itself and every subagent marked), never anything else.
3. A second sweep, to the end.
4. No sweep again; the baseline is both no-sweep windows.

The API's p99 during the sweeps is compared with the baseline's, in the same run.
"""

from __future__ import annotations

import argparse
import math
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import text

from bench.chaos_services import Processes, wait_for_port
from bench.cluster import start_worker
from bench.goals import Goal, render_goals
from bench.provenance import header, keep
from bench.report import ROOT, table
from demo.chapters import chapters
from emulator import EmulatorConfig
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.tables import Job, JobStatus
from models.tenants import create_tenant, set_limits
from testbed.stack import bundled_emulator, free_port, fresh_database, worker_environment

RESULTS = ROOT / "bench" / "results" / "retention.md"
PER_FAMILY = 500  # stored messages of a main job and its subagents
SUBAGENT_MESSAGES = 100  # of each of the two subagents of every fourth job
REPEATS = 16  # of a 32-character hash: a 512-character message body
POLICY_DAYS = 30
P99_RISE_GOAL = 0.10
MIN_SAMPLES = 1_000  # fewer requests during the sweep than this, and its p99 stands on too few samples to judge


@dataclass(frozen=True)
class Size:
    name: str
    rows: int  # message rows the sweep purges
    running: int  # jobs kept unfinished throughout
    quiet_seconds: float  # each no-sweep window
    command: str

    @property
    def families(self) -> int:
        return self.rows // PER_FAMILY


SCALED = Size("scaled", 20_000, 4, 5.0, "python -m bench.retention")
FULL = Size("full", 1_000_000, 20, 90.0, "python -m bench.retention --full")


# The archive, written as the worker would have left it, in bulk


def seed(database: Database, tenant_id: int, families: int, *, ended_days_ago: float, held: bool = False) -> list[int]:
    """``families`` ended main jobs of the tenant with their histories; their ids."""
    with database.session() as session:
        document = add_document(session, tenant_id=tenant_id, name=f"{uuid.uuid4().hex[:6]}.txt", content="Text.")
        template = create_job(session, tenant_id=tenant_id, instruction="Read it.", document_ids=[document.id])
        template_id = template.id
    columns = [c.name for c in Job.__table__.columns if c.name != "id"]
    overrides = {
        "status": f"'{JobStatus.SUCCEEDED.value}'", "step": "250", "final_answer": "'The answer of job ' || g",
        "input_tokens": "1000000", "output_tokens": "20000", "held": "true" if held else "false",
        "finished_at": f"now() - interval '{ended_days_ago} days'", "lease_until": "NULL",
    }  # fmt: skip
    chosen = ", ".join(overrides.get(c, f"t.{c}") for c in columns)
    mains: list[int] = []
    for start in range(0, families, 100):
        count = min(100, families - start)
        with database.session() as session:
            rows = session.execute(
                text(f"INSERT INTO jobs ({', '.join(columns)}) SELECT {chosen} FROM jobs t "
                     "CROSS JOIN generate_series(1, :n) g WHERE t.id = :t RETURNING id"),
                {"n": count, "t": template_id},
            )  # fmt: skip
            ids = sorted(rows.scalars())
            with_subagents = ids[::4]
            children = list(
                session.execute(
                    text("INSERT INTO jobs (" + ", ".join(columns) + ") SELECT "
                         + ", ".join({"parent_id": "p.id", "kind": "'subagent'"}.get(c, f"p.{c}") for c in columns)
                         + " FROM jobs p CROSS JOIN generate_series(1, 2) g WHERE p.id = ANY(:ids) RETURNING id"),
                    {"ids": with_subagents},
                ).scalars()
            )  # fmt: skip
            alone = [i for i in ids if i not in set(with_subagents)]
            _history(session, alone, PER_FAMILY)
            _history(session, with_subagents, PER_FAMILY - 2 * SUBAGENT_MESSAGES)
            _history(session, children, SUBAGENT_MESSAGES)
            mains += ids
    with database.session() as session:
        session.execute(text("DELETE FROM jobs WHERE id = :t"), {"t": template_id})
    return mains


def _history(session: Any, job_ids: Sequence[int], messages: int) -> None:
    """``messages`` messages of each job, a step per two of them and one summary."""
    if not job_ids:
        return
    each = {"ids": list(job_ids), "m": messages, "r": REPEATS}
    session.execute(
        text("INSERT INTO messages (job_id, seq, step, role, content, token_estimate, outline, created_at) "
             "SELECT j, g, g / 2, CASE WHEN g % 2 = 1 THEN 'assistant' ELSE 'user' END, "
             "to_jsonb(repeat(md5(j::text || '-' || g::text), :r)), 150, '{}'::jsonb, now() "
             "FROM unnest(CAST(:ids AS bigint[])) AS j CROSS JOIN generate_series(0, :m - 1) AS g"),
        each,
    )  # fmt: skip
    session.execute(
        text("INSERT INTO steps (job_id, step, stage, planning_budget, calibration_factor, estimated_tokens, "
             "reported_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, messages_sent, cleared, "
             "dropped, stop_reason, overhead_ms, created_at) "
             "SELECT j, g, 'whole', 100000, 1.0, 5000, 5000, 4000, 0, 100, 2 * g, '[]'::jsonb, 0, 'tool_use', 10.0, "
             "now() FROM unnest(CAST(:ids AS bigint[])) AS j CROSS JOIN generate_series(1, :m / 2) AS g"),
        each,
    )  # fmt: skip
    session.execute(
        text("INSERT INTO summaries (job_id, step, first_seq, last_seq, content, token_estimate, replayed, "
             "input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, created_at) "
             "SELECT j, 1, 1, :m - 1, repeat('summary ', 200), 400, false, 0, 0, 0, 400, now() "
             "FROM unnest(CAST(:ids AS bigint[])) AS j"),
        each,
    )  # fmt: skip


FAMILIES = """
SELECT m.id,
       m.history_purged_at IS NOT NULL,
       (SELECT count(*) FROM jobs c WHERE c.parent_id = m.id
          AND (c.history_purged_at IS NOT NULL) <> (m.history_purged_at IS NOT NULL)),
       (SELECT count(*) FROM messages x JOIN jobs f ON f.id = x.job_id WHERE f.id = m.id OR f.parent_id = m.id)
       + (SELECT coalesce(sum(x.count), 0) FROM packed_histories x JOIN jobs f ON f.id = x.job_id
          WHERE f.id = m.id OR f.parent_id = m.id),
       (SELECT count(*) FROM steps x JOIN jobs f ON f.id = x.job_id WHERE f.id = m.id OR f.parent_id = m.id),
       (SELECT count(*) FROM summaries x JOIN jobs f ON f.id = x.job_id WHERE f.id = m.id OR f.parent_id = m.id),
       (SELECT count(*) FROM jobs c WHERE c.parent_id = m.id)
FROM jobs m WHERE m.id = ANY(:ids)
"""


@dataclass(frozen=True)
class Census:
    whole: int
    purged: int
    half: int  # anything else: some of a history gone, or marked without being gone


def census(database: Database, mains: Sequence[int]) -> Census:
    whole = purged = half = 0
    with database.session() as session:
        for _id, marked, odd, messages, steps, summaries, children in session.execute(
            text(FAMILIES), {"ids": list(mains)}
        ):
            gone = (messages, steps, summaries) == (0, 0, 0)
            kept = (messages, steps, summaries) == (PER_FAMILY, PER_FAMILY // 2, 1 + children)
            if marked and gone and not odd:
                purged += 1
            elif not marked and kept and not odd:
                whole += 1
            else:
                half += 1
    return Census(whole, purged, half)


def purged_count(database: Database, mains: Sequence[int]) -> int:
    with database.session() as session:
        query = "SELECT count(*) FROM jobs WHERE id = ANY(:ids) AND history_purged_at IS NOT NULL"
        return int(session.execute(text(query), {"ids": list(mains)}).scalar_one())


# The service under load


@dataclass
class Load:
    """Two clients reading the API in a closed loop; each latency filed under the phase it was measured in."""

    url: str
    key: str
    live: list[int] = field(default_factory=list)
    phase: str = "warm-up"
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def client(self, offset: int) -> None:
        with httpx.Client(base_url=self.url, headers={"X-API-Key": self.key}, timeout=30) as http:
            turn = offset
            while not self.stop.is_set():
                turn += 1
                job = self.live[turn % len(self.live)] if self.live else None
                path = ("/v1/jobs?limit=20" if job is None or turn % 3 == 0 else
                        f"/v1/jobs/{job}" if turn % 3 == 1 else f"/v1/jobs/{job}/messages?limit=20")  # fmt: skip
                phase, began = self.phase, time.perf_counter()
                answer = http.get(path)
                elapsed = time.perf_counter() - began
                if answer.status_code != 200:
                    self.errors += 1
                self.latencies.setdefault(phase, []).append(elapsed)


def keep_running(load: Load, database: Database, tenant_id: int, document_ids: list[int], running: int) -> None:
    """Keep ``running`` of the tenant's main jobs unfinished: a job that ends is replaced by a new one."""
    body = {"instruction": "Check every chapter.", "document_ids": document_ids}
    with httpx.Client(base_url=load.url, headers={"X-API-Key": load.key}, timeout=30) as http:
        while not load.stop.is_set():
            with database.session() as session:
                unfinished = list(
                    session.execute(
                        text("SELECT id FROM jobs WHERE tenant_id = :t AND parent_id IS NULL "
                             "AND status IN ('queued', 'running') ORDER BY id"),
                        {"t": tenant_id},
                    ).scalars()
                )  # fmt: skip
            for _ in range(running - len(unfinished)):
                answer = http.post("/v1/jobs", json=body)
                answer.raise_for_status()
                unfinished.append(int(answer.json()["id"]))
            load.live[:] = unfinished
            load.stop.wait(0.5)


def start_service(url: str, emulator_url: str, processes: Processes) -> tuple[str, dict[str, str]]:
    """The API and a Celery worker, in processes of their own; the API's URL and the environment the operator's
    commands run in."""
    queue = f"plimsoll-retention-{uuid.uuid4().hex[:8]}"
    env = worker_environment(url, queue, emulator_url, "bench") | {
        "PLIMSOLL_MAX_RUNNING_JOBS_PER_TENANT": "0",
        "PLIMSOLL_MAX_QUEUED_JOBS_PER_TENANT": "0",
        "PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY": "0",
    }
    port = free_port()
    api = processes.spawn([sys.executable, "-m", "cli", "api", "--port", str(port)], log="api.log", env=env, cwd=ROOT)
    wait_for_port(port, 60, api)
    start_worker(processes, queue=queue, name=f"{queue}@%h", concurrency=4, env=env, cwd=ROOT, log="worker.log")
    return f"http://127.0.0.1:{port}", env


@dataclass(frozen=True)
class Result:
    size: Size
    seeded_seconds: float
    quiet: list[float]
    sweeping: list[float]
    errors: int
    killed_after: int  # main jobs purged when the first sweep was killed
    at_kill: Census
    at_end: Census
    kept_whole: Census  # the held and the recent jobs, after both sweeps
    sweep_seconds: float
    messages_purged: int


def run(size: Size) -> Result:
    processes = Processes()
    try:
        with (
            fresh_database(prefix="plimsoll_bench") as url,
            bundled_emulator(EmulatorConfig(latency_seconds=1.0)) as emulator,
        ):
            database = Database(url)
            try:
                return _run(size, url, emulator.base_url, database, processes)
            finally:
                database.dispose()
    finally:
        processes.close()


def _run(size: Size, url: str, emulator_url: str, database: Database, processes: Processes) -> Result:
    with database.session() as session:
        archive, _ = create_tenant(session, name="archive")
        set_limits(session, tenant_id=archive.id, limits={"retention_days": POLICY_DAYS})
        live, key = create_tenant(session, name="live")
        texts = {c.name: c.text for c in chapters(8, chars=1_500, languages=("en", "ru"))}
        document_ids = [add_document(session, tenant_id=live.id, name=n, content=t).id for n, t in texts.items()]
        archive_id, live_id = archive.id, live.id
    began = time.monotonic()
    due = seed(database, archive_id, size.families, ended_days_ago=POLICY_DAYS + 10)
    kept = seed(database, archive_id, 3, ended_days_ago=POLICY_DAYS + 10, held=True)
    kept += seed(database, archive_id, 3, ended_days_ago=POLICY_DAYS - 10)
    seeded = time.monotonic() - began
    with database.session() as session:
        session.execute(text("ANALYZE"))
    api_url, env = start_service(url, emulator_url, processes)
    load = Load(api_url, key)
    threads = [threading.Thread(target=keep_running, args=(load, database, live_id, document_ids, size.running))]
    threads += [threading.Thread(target=load.client, args=(offset,)) for offset in range(2)]
    for thread in threads:
        thread.start()
    try:
        load.stop.wait(3.0)  # warm-up: the first jobs started, the connections open
        load.phase = "quiet"
        load.stop.wait(size.quiet_seconds)
        load.phase = "sweep"
        sweep_began = time.monotonic()
        first = _sweep(processes, env, "sweep-1.log")
        killed_after = _kill_midway(processes, first, database, due)
        at_kill = census(database, due)
        second = _sweep(processes, env, "sweep-2.log")
        second.wait(timeout=3600)
        sweep_seconds = time.monotonic() - sweep_began
        load.phase = "quiet"
        load.stop.wait(size.quiet_seconds)
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(timeout=60)
    if second.returncode != 0:
        raise RuntimeError(f"the second sweep failed; see {processes.root / 'sweep-2.log'}")
    return Result(
        size, seeded, load.latencies.get("quiet", []), load.latencies.get("sweep", []), load.errors, killed_after,
        at_kill, census(database, due), census(database, kept), sweep_seconds, size.rows,
    )  # fmt: skip


def _sweep(processes: Processes, env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
    return processes.spawn([sys.executable, "-m", "cli", "retention", "--sweep", "--json"], log=log, env=env, cwd=ROOT)


KILL_POLL_SECONDS = 0.2


def _kill_midway(processes: Processes, sweep: subprocess.Popen[bytes], database: Database, due: list[int]) -> int:
    """SIGKILL the sweep once about a third of the due jobs went; how many had gone."""
    third = max(1, len(due) // 3)
    while (purged := purged_count(database, due)) < third:
        if sweep.poll() is not None:
            raise RuntimeError("the sweep ended before it could be killed mid-way")
        # A few jobs go a second: looking more often would add the benchmark's own load to the sweep's.
        time.sleep(KILL_POLL_SECONDS)
    processes.kill_group(sweep, signal.SIGKILL)
    return purged


# The report


def p99(latencies: Sequence[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)] if ordered else math.nan


def goals(result: Result) -> list[Goal]:
    rise = p99(result.sweeping) / p99(result.quiet) - 1
    # Judged at full size only: the scaled run's load is the rest of the test suite, not the service's own.
    judged = len(result.sweeping) >= MIN_SAMPLES and result.size == FULL
    why_not = "the scaled run" if result.size != FULL else f"fewer than {MIN_SAMPLES:,}"
    midway = 0 < result.killed_after < result.size.families
    return [
        Goal(
            f"a sweep of {result.size.rows:,} message rows while {result.size.running} jobs run: the API's p99 "
            f"rises ≤ {P99_RISE_GOAL:.0%}",
            (rise <= P99_RISE_GOAL) if judged else None,
            f"{rise:+.1%} over {len(result.sweeping):,} requests" + ("" if judged else f" (not judged: {why_not})"),
        ),
        Goal(
            "after a SIGKILL in the middle of the sweep, 0 half-purged jobs",
            midway and result.at_kill.half == 0,
            f"{result.at_kill.half} half-purged; killed after {result.killed_after:,} of {result.size.families:,} jobs",
        ),
        Goal(
            "after the next sweep every due history is purged, and the held and recent ones are whole",
            result.at_end.purged == result.size.families and result.at_end.half == 0 and result.kept_whole.whole == 6,
            f"{result.at_end.purged:,} purged, {result.kept_whole.whole} of 6 kept whole",
        ),
    ]


def render(result: Result) -> str:
    size = result.size
    quiet, sweeping = result.quiet, result.sweeping
    latency_rows = [
        [label, f"{len(each):,}", f"{statistics.median(each) * 1000:.1f}", f"{p99(each) * 1000:.1f}"]
        for label, each in (("no sweep (baseline)", quiet), ("during the sweep", sweeping))
    ]
    census_rows = [
        [moment, f"{c.whole:,}", f"{c.purged:,}", f"{c.half:,}"]
        for moment, c in (("at the SIGKILL", result.at_kill), ("after the second sweep", result.at_end))
    ]
    rate = result.messages_purged / result.sweep_seconds
    return "\n\n".join(
        [
            "# A retention sweep under load",
            header(size.command),
            f"{size.rows:,} message rows of {size.families:,} ended main jobs ({PER_FAMILY} messages per job with "
            f"its subagents, a step per two, a summary each), under a {POLICY_DAYS}-day policy, with "
            f"{size.running} jobs running against the emulator (1 s per model call, a prefork worker of 4) and two "
            f"clients reading the API in a closed loop (a job, a page of 20 messages, the job list). The archive "
            f"was written in {result.seeded_seconds:.0f} s. Default settings: batches of about 500 messages, "
            "each followed by a rest nine times as long as it took (at least 0.05 s).",
            "## The API's latency, without and during the sweep (same run)",
            table(["", "requests", "median ms", "p99 ms"], latency_rows),
            f"Requests that failed: {result.errors}.",
            "## The sweep, killed with SIGKILL mid-way, then run again",
            table(["", "whole", "purged", "half-purged"], census_rows),
            f"Both sweeps together purged {result.messages_purged:,} messages in {result.sweep_seconds:.1f} s "
            f"({rate:,.0f} messages/s), the first killed after {result.killed_after:,} jobs.",
            "## Goals",
            render_goals(goals(result)),
        ]
    )


def main(argv: list[str] | None = None) -> Result:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__)
    parser.add_argument("--full", action="store_true", help="a million message rows and 20 running jobs")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)} (with --full)")
    args = parser.parse_args(argv)
    result = run(FULL if args.full else SCALED)
    report = render(result)
    print(report)
    if args.write and args.full:
        keep(report, "retention.md")
    return result


if __name__ == "__main__":
    main()

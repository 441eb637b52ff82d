"""Time the worker spends in its own code per step, the model's reply excluded: ``python -m bench.worker_overhead``.

A job is given 25, 115, 1,000 and 10,000 stored messages (tool rounds over 60 real chapters), then takes steps
against the emulator (in a process of its own, so its work takes nothing from ours) on PostgreSQL: one warm-up
step each, then seven timed rounds of one step of every job in turn (the machine's speed drifts during a run:
every size sees the same drift), in a process that has run a job of its own first (a worker's process runs warm).
Each step records its own overhead: planning, loading the bodies it sends, storing the reply and the tool
results, in their transactions. The baseline, measured in the same run for each timed step, is PostgreSQL alone
(psycopg, no ORM) reading the rows a step planned from scratch needs: every outline of the job and the bodies
that step sent. Beside it, not judged: the writes any durable step makes (its lease taken in the reads'
transaction; the tool's page read; the reply and the tool result, the step's record, its charge and its event
inserted, the job's row updated, in a second transaction), by psycopg alone, into a scratch job.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from bench.chaos_services import wait_for_port
from bench.goals import Goal, render_goals
from bench.provenance import header, provenance
from bench.report import table
from demo.chapters import chapters
from models.db import Database
from models.documents import add_document
from models.history import append_messages
from models.jobs import create_job, steps_of
from models.options import JobOptions
from models.settings import Settings
from models.tables import Job, JobKind, Message, Step
from models.tenants import create_tenant
from testbed.stack import environment, free_port, fresh_database
from worker.providers import AnthropicProvider
from worker.step import Services, run_step

COMMAND = "python -m bench.worker_overhead"
RESULTS = Path(__file__).resolve().parent / "results" / "worker_overhead.md"
SIZES = (25, 115, 1_000, 10_000)
STEPS = 7
# Steps of a job of its own before any size is timed: a worker's process runs warm (psycopg prepares a statement on
# its fifth execution on a connection, SQLAlchemy compiles each statement once), and the first size measured was
# paying that start for every process.
WARM_UP_STEPS = 10
RATIO_GOAL = 1.5  # time in our code per step, at most this many times PostgreSQL alone for the same rows
GROWTH_GOAL = 2.0  # at the largest size, at most this many times the time at the smallest


@dataclass(frozen=True)
class Measured:
    stored: int  # messages stored before the warm-up step
    ours: list[float]  # ms in our code, per timed step
    postgres: list[float]  # ms of PostgreSQL alone for the same rows, per timed step
    steps: list[Step]
    written: list[float]  # ms of PostgreSQL alone for a step's writes, per timed step

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.postgres)


def job_with_history(database: Database, stored: int, texts: dict[str, str]) -> int:
    """A subagent job over ``texts`` whose history already holds ``stored`` messages of tool rounds."""
    names = list(texts)
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"overhead-{uuid.uuid4().hex[:8]}")
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        job = create_job(
            session,
            tenant_id=tenant.id,
            instruction="Read.",
            document_ids=ids,
            kind=JobKind.SUBAGENT,
            options=JobOptions(budget=400_000),
        )
        rounds: list[dict[str, Any]] = []
        for index in range((stored - 1) // 2):
            name = names[index % len(names)]
            tool_id = f"toolu_{index:06d}"
            call = {"type": "tool_use", "id": tool_id, "name": "read_document", "input": {"name": name}}
            rounds.append({"role": "assistant", "content": [{"type": "text", "text": f"Reading {name}."}, call]})
            rounds.append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": texts[name]}]}
            )
        append_messages(session, job, rounds, step=0)
        job.step = len(rounds) // 2
        job.max_steps = job.step + 100  # what an operator lets such a long job take (the default stops at 1,000)
        return job.id


def first_step(database: Database, job_id: int) -> int:
    with database.session() as session:
        return int(session.scalar(select(Job.step).where(Job.id == job_id)) or 0)


def stored_count(database: Database, job_id: int) -> int:
    with database.session() as session:
        return int(session.scalar(select(func.count()).where(Message.job_id == job_id)) or 0)


def postgres_alone(url: str, job_id: int, stored: int, step: Step) -> float:
    """Milliseconds for psycopg to read what a step planned from scratch reads: the outlines of the ``stored``
    messages it planned over, then the bodies it sent (those kept, but for messages of cleared results only)."""
    with psycopg.connect(url) as connection:
        return _reads(connection, job_id, stored, step)


def _reads(connection: psycopg.Connection[Any], job_id: int, stored: int, step: Step) -> float:
    opened = time.perf_counter()
    outlines = connection.execute(
        "SELECT outline FROM messages WHERE job_id = %s AND seq < %s ORDER BY seq", (job_id, stored)
    ).fetchall()
    listed = time.perf_counter()
    cleared = set(step.cleared)
    sent = [
        seq
        for seq in [0, *range(step.dropped + 1, len(outlines))]
        if outlines[seq][0].get("has_text") or not all(r[0] in cleared for r in outlines[seq][0].get("results", ()))
    ]
    chosen = time.perf_counter()
    connection.execute(
        "SELECT seq, role, content FROM messages WHERE job_id = %s AND seq = ANY(%s)", (job_id, sent)
    ).fetchall()
    done = time.perf_counter()
    return ((listed - opened) + (done - chosen)) * 1000


@dataclass(frozen=True)
class Scratch:
    """Where the writes of ``writes_alone`` go: a job of the measured job's tenant, and a page to read."""

    job_id: int
    tenant_id: int
    document_id: int


def scratch_for(database: Database, job_id: int) -> Scratch:
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        document_id = min(link.document_id for link in job.documents)
        scratch = create_job(session, tenant_id=job.tenant_id, instruction="Scratch.", kind=JobKind.SUBAGENT)
        return Scratch(scratch.id, job.tenant_id, document_id)


def writes_alone(url: str, job_id: int, stored: int, step: Step, scratch: Scratch) -> float:
    """Milliseconds for psycopg to make the writes any durable step makes: the lease taken in the transaction of
    ``postgres_alone``'s reads (their time not counted); the tool's page read; then, in one transaction, the reply
    and the tool result (the step's own two messages, as stored), the step's record, its charge and its event
    inserted and the job's row updated. The writes go to ``scratch``, so the measured job's history is left as it
    was. Its time ends before the last commit, as a step's does (it records its time in the store's
    transaction)."""
    with psycopg.connect(url, autocommit=True) as connection:
        written = connection.execute(
            "SELECT step, role, content, token_estimate, outline FROM messages WHERE job_id = %s AND seq >= %s "
            "ORDER BY seq LIMIT 2",
            (job_id, stored),
        ).fetchall()
        [(first,)] = connection.execute("SELECT count(*) FROM messages WHERE job_id = %s", (scratch.job_id,))
        began = time.perf_counter()
        with connection.transaction():
            connection.execute(
                "UPDATE jobs SET lease_owner = %s, lease_until = now() + interval '30 seconds' WHERE id = %s",
                (uuid.uuid4().hex, scratch.job_id),
            )
            reading = time.perf_counter()
            _reads(connection, job_id, stored, step)
            reads = (time.perf_counter() - reading) * 1000
        connection.execute(
            "SELECT substr(content, 1, 8000) FROM documents WHERE id = %s AND tenant_id = %s",
            (scratch.document_id, scratch.tenant_id),
        ).fetchone()
        with connection.transaction():
            connection.execute(
                "INSERT INTO messages (job_id, seq, step, role, content, token_estimate, outline, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, now()), (%s, %s, %s, %s, %s, %s, %s, now())",
                [
                    value
                    for n, (number, role, content, estimate, outline) in enumerate(written)
                    for value in (scratch.job_id, first + n, number, role, Jsonb(content), estimate, Jsonb(outline))
                ],
            )
            connection.execute(
                "INSERT INTO steps (job_id, step, stage, planning_budget, calibration_factor, estimated_tokens, "
                "reported_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, messages_sent, cleared, "
                "dropped, stop_reason, overhead_ms, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now())",
                (
                    scratch.job_id, step.step, step.stage, step.planning_budget, step.calibration_factor,
                    step.estimated_tokens, step.reported_input_tokens, step.cache_read_tokens,
                    step.cache_write_tokens, step.output_tokens, step.messages_sent, Jsonb(step.cleared),
                    step.dropped, step.stop_reason, step.overhead_ms,
                ),
            )  # fmt: skip
            connection.execute(
                "INSERT INTO charges (tenant_id, job_id, main_job_id, step, kind, model, prices, uncached_tokens, "
                "cache_write_tokens, cache_read_tokens, output_tokens, uncached_usd, cache_write_usd, cache_read_usd, "
                "output_usd, total_usd, delivery, created_at) "
                "VALUES (%s, %s, %s, %s, 'used', 'plimsoll-emulator', %s, %s, 0, 0, %s, 0, 0, 0, 0, 0, %s, now())",
                (
                    scratch.tenant_id, scratch.job_id, scratch.job_id, step.step, Jsonb({"priced_as": "free"}),
                    step.reported_input_tokens or 0, step.output_tokens, uuid.uuid4().hex,
                ),
            )  # fmt: skip
            connection.execute(
                "INSERT INTO events (tenant_id, job_id, type, data, created_at) VALUES (%s, %s, 'step', %s, now())",
                (scratch.tenant_id, scratch.job_id, Jsonb({"step": step.step, "stage": step.stage})),
            )
            connection.execute(
                "UPDATE jobs SET step = step + 1, lease_owner = NULL, lease_until = NULL, "
                "input_tokens = input_tokens + %s, output_tokens = output_tokens + %s WHERE id = %s",
                (step.reported_input_tokens or 0, step.output_tokens, scratch.job_id),
            )
            ended = time.perf_counter()  # before the commit, as a step's own time is taken before its store's
    return (ended - began) * 1000 - reads


def measure(
    database: Database, emulator_url: str, sizes: Sequence[int], texts: dict[str, str], steps: int
) -> list[Measured]:
    """A job per size, each given one warm-up step; then ``steps`` timed rounds, each one step of every job in
    turn, so that the machine's speed drifting during the run moves every size alike."""
    provider = AnthropicProvider(api_key="bench", base_url=emulator_url)
    services = Services(
        database=database,
        settings=Settings(database_url=database.url),
        provider_for=lambda job: provider,
        enqueue=lambda job_id, step, delay: None,
        report=lambda error: None,
    )
    url = make_url(database.url).set(drivername="postgresql").render_as_string(hide_password=False)
    jobs = [job_with_history(database, stored, texts) for stored in sizes]
    next_step = {job_id: run_step(job_id, services, step=first_step(database, job_id)).step for job_id in jobs}
    counts: dict[int, list[int]] = {job_id: [] for job_id in jobs}
    for _ in range(steps):  # each delivered with its step number, as the worker's task is
        for job_id in jobs:
            counts[job_id].append(stored_count(database, job_id))
            next_step[job_id] = run_step(job_id, services, step=next_step[job_id]).step
    return [_timed(database, url, stored, job_id, counts[job_id]) for stored, job_id in zip(sizes, jobs, strict=True)]


def _timed(database: Database, url: str, stored: int, job_id: int, counts: list[int]) -> Measured:
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        timed = [s for s in steps_of(session, job_id) if s.reported_input_tokens is not None][1:]
    if len(timed) != len(counts):
        raise RuntimeError(f"the job ended before its steps could be timed: {job.status} {job.error or ''}")
    postgres = [postgres_alone(url, job_id, count, step) for count, step in zip(counts, timed, strict=True)]
    scratch = scratch_for(database, job_id)
    written = [writes_alone(url, job_id, count, step, scratch) for count, step in zip(counts, timed, strict=True)]
    return Measured(stored, [s.overhead_ms for s in timed], postgres, timed, written)


@contextmanager
def emulator_process() -> Iterator[str]:
    """The emulator in a process of its own, and the settings that send the emulator's models to it; yields its
    base URL."""
    port = free_port()
    command = [sys.executable, "-m", "emulator", "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(command)
    try:
        wait_for_port(port, 60, process)
        url = f"http://127.0.0.1:{port}"
        with environment({"PLIMSOLL_EMULATOR_URL": url}):
            yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def goals(rows: Sequence[Measured]) -> list[Goal]:
    """The default goals over the sizes measured: the ratio at each, the growth from the smallest to the largest."""
    judged = [
        Goal(
            f"time in our code per step ≤ {RATIO_GOAL}× PostgreSQL alone for the same rows, at {m.stored:,} messages",
            m.ratio <= RATIO_GOAL,
            f"{m.ratio:.2f}×",
        )
        for m in rows
    ]
    smallest, largest = rows[0], rows[-1]
    if len(rows) > 1:
        growth = statistics.median(largest.ours) / statistics.median(smallest.ours)
        judged.append(
            Goal(
                f"at {largest.stored:,} messages ≤ {GROWTH_GOAL}× the time at {smallest.stored:,}",
                growth <= GROWTH_GOAL,
                f"{growth:.2f}×",
            )
        )
    return judged


def report(rows: Sequence[Measured]) -> str:
    lines = [
        [
            f"{m.stored:,}",
            f"{statistics.median(m.ours):.1f}",
            f"{min(m.ours):.1f} – {max(m.ours):.1f}",
            f"{statistics.median(m.postgres):.1f}",
            f"{m.ratio:.2f}×",
            f"{statistics.median(m.written):.1f}",
            f"{statistics.median(m.written) / (RATIO_GOAL * statistics.median(m.postgres)):.0%}",
            f"{statistics.median(s.messages_sent for s in m.steps):.0f}",
            f"{statistics.median(len(s.cleared) for s in m.steps):.0f}",
            ", ".join(sorted({s.stage for s in m.steps})),
        ]
        for m in rows
    ]
    header = ["stored messages", "our code, median ms", "range ms", "PostgreSQL alone, median ms", "ratio"]
    written = ["a step's writes alone, median ms", f"of the goal's {RATIO_GOAL}× PostgreSQL alone"]
    return "\n".join(
        [
            "## Time in our code per step (PostgreSQL, the model's reply excluded)\n",
            table([*header, *written, "messages sent", "results cleared", "stage"], lines),
            "",
            "*PostgreSQL alone* reads what a step planned from scratch reads (the goals' baseline). *A step's writes "
            "alone* are what any durable step writes, by psycopg alone (its lease taken, the tool's page read, its "
            "two messages, record, charge and event inserted and the job's row updated, in two transactions, timed "
            "to the second one's commit, as a step times itself); beside them, the share they take of the time the "
            "goal allows a whole step.",
            "\n## Goals\n",
            render_goals(goals(rows)),
        ]
    )


def run(sizes: Sequence[int] = SIZES, steps: int = STEPS) -> tuple[str, list[Goal]]:
    """The report and the goals of a run at ``sizes``, ``steps`` timed steps each."""
    texts = {c.name: c.text for c in chapters(60, chars=12_000, languages=("ru", "en", "zh"))}
    with fresh_database(prefix="plimsoll_bench") as url, emulator_process() as emulator_url:
        database = Database(url)
        measure(database, emulator_url, sizes[:1], texts, WARM_UP_STEPS)  # not reported
        rows = measure(database, emulator_url, sizes, texts, steps)
        database.dispose()
    return report(rows), goals(rows)


def main() -> None:
    made, clean = header(COMMAND), provenance().clean  # the code measured: the tree as the run starts
    text, _ = run()
    text = f"{made}\n\n{text}\n"
    print(text)
    if clean:  # a report names a commit: only a clean tree's run is kept
        RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

"""Pages of documents stored by reference against inline: ``python -m bench.storage [--scale N]``.

Thirty jobs read the same four documents, each run to its end through the worker's own step code
(``worker.step.run_step``) on PostgreSQL against the model emulator over HTTP with the official Anthropic SDK, with
the default model and budget. Two workloads: the fleet benchmark's (English chapters of 24,000 characters) and
long documents (four times as long). Each runs twice in one run, each time in a fresh database: storing every
page inline in its message (``PLIMSOLL_PAGES_BY_REFERENCE=false``, how every message was stored before) and by
reference (the default). Once the jobs have ended, the retention sweep's packing runs (``models/packing.py``: each
ended job's messages become one compressed row) and the bytes are measured at rest. Then the documents are
deleted, which keeps the pages the histories refer to as the tenant's bodies, and the bytes are measured again.
``--scale N`` divides both the jobs and the documents' length by N, which keeps the ratio the goal is about (a
job's own messages against the documents) about the same.

Stored bytes are PostgreSQL's own count: ``pg_column_size`` of each whole row (``pg_column_size(m.*)``: every
column, long values as TOAST keeps them, compressed), summed over the messages, the packed histories and the
bodies, against the same over the four documents; the goal is judged at rest, and the ratio as the jobs ended,
their messages still rows, is shown beside it. ``pg_total_relation_size`` (heap, TOAST and indexes, in 8 kB
pages) of the same tables is shown too. Every job's messages, read back as the API reads them, are hashed: both
ways must give the same bytes as rows, packed, and after the documents go. Writes ``bench/results/storage.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import uuid
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

from bench.goals import Goal, render_goals
from bench.provenance import header, keep
from bench.report import table
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document, delete_document
from models.history import all_messages
from models.jobs import create_job
from models.options import JobOptions
from models.retention import pack_ended
from models.settings import Settings
from models.tables import Job, JobStatus
from models.tenants import create_tenant
from testbed.stack import bundled_emulator, environment, fresh_database
from worker.providers import AnthropicProvider
from worker.step import Services, run_step

JOBS, DOCUMENTS = 30, 4
WORKLOADS = {"the fleet's documents": 24_000, "long documents": 96_000}  # characters each, at --scale 1
RATIO_GOAL = 1.1  # stored message bytes over the documents' own stored bytes
INSTRUCTION = "Check each chapter against the notes and report one fact of each."
MAX_STEPS = 50  # a job's steps before the benchmark gives up on it (each reads a page or answers)
WAYS = {"inline": "false", "by reference": "true"}  # PLIMSOLL_PAGES_BY_REFERENCE
PACKING_SECONDS = 120.0  # the sweep's time for packing the ended jobs (it stops sooner, once none is left)


@dataclass(frozen=True)
class Sizes:
    """Stored bytes at one moment, by PostgreSQL's count."""

    messages: int  # stored messages, in rows or packed
    message_rows: int  # sum of pg_column_size over the messages' rows
    packed_rows: int  # the same over the packed histories' rows (models/packing.py)
    page_rows: int  # the same over the rows that carry pages of documents (tool results of read_document)
    body_rows: int  # the same over the bodies' rows
    document_rows: int  # the same over the documents' rows
    messages_relation: int  # pg_total_relation_size of messages, packed histories and bodies
    documents_relation: int

    @property
    def stored(self) -> int:
        return self.message_rows + self.packed_rows + self.body_rows


@dataclass(frozen=True)
class Outcome:
    jobs: int
    succeeded: int
    ended: Sizes  # every job ended, its messages rows, the documents still there
    before: Sizes  # then packed by the sweep (at rest)
    after: Sizes  # then the documents deleted
    read_back: str  # sha256 of every job's messages as they are read, ended, the documents still there
    read_back_packed: str  # the same once packed
    read_back_after: str  # the same once the documents are gone

    @property
    def ratio(self) -> float:
        """Stored message bytes at rest (packed) over the documents' own stored bytes."""
        return self.before.stored / self.before.document_rows

    @property
    def ratio_as_rows(self) -> float:
        """The same as the jobs ended, before the sweep packed them."""
        return self.ended.stored / self.ended.document_rows


# The user messages answering an assistant message that called read_document, found by the call's name.
CARRYING_PAGES = (
    "SELECT a.seq + 1 FROM messages a WHERE a.job_id = m.job_id AND a.role = 'assistant' "
    'AND a.content::text LIKE \'%"name": "read_document"%\''
)


def sizes(session: Session) -> Sizes:
    def one(sql: str) -> int:
        return int(session.scalar(text(sql)) or 0)

    return Sizes(
        messages=one("SELECT (SELECT count(*) FROM messages) + (SELECT coalesce(sum(count), 0) FROM packed_histories)"),
        message_rows=one("SELECT sum(pg_column_size(m.*)) FROM messages m"),
        packed_rows=one("SELECT sum(pg_column_size(p.*)) FROM packed_histories p"),
        page_rows=one(f"SELECT sum(pg_column_size(m.*)) FROM messages m WHERE m.seq IN ({CARRYING_PAGES})"),
        body_rows=one("SELECT sum(pg_column_size(b.*)) FROM bodies b"),
        document_rows=one("SELECT sum(pg_column_size(d.*)) FROM documents d"),
        messages_relation=one(
            "SELECT pg_total_relation_size('messages') + pg_total_relation_size('packed_histories') "
            "+ pg_total_relation_size('bodies')"
        ),
        documents_relation=one("SELECT pg_total_relation_size('documents')"),
    )


def read_back(session: Session, job_ids: list[int]) -> str:
    """sha256 of every job's messages as they are read (role and content, the text of every page in place)."""
    digest = hashlib.sha256()
    for job_id in job_ids:
        for message in all_messages(session, job_id):
            digest.update(json.dumps([message.role, message.content], ensure_ascii=False).encode())
    return digest.hexdigest()


def run_way(emulator: EmulatorServer, by_reference: str, jobs: int, chars: int) -> Outcome:
    """The jobs, in a fresh database, with pages stored one way; measured, then measured again without documents."""
    texts = {c.name: c.text for c in chapters(DOCUMENTS, chars=chars, languages=("en",))}
    with (
        fresh_database(prefix="plimsoll_bench") as url,
        environment({"PLIMSOLL_PAGES_BY_REFERENCE": by_reference}),
    ):
        database = Database(url)
        provider = AnthropicProvider(api_key="bench", base_url=emulator.base_url)
        services = Services(
            database=database,
            settings=Settings(database_url=url),
            provider_for=lambda job: provider,
            enqueue=lambda job_id, step, delay: None,
            report=lambda error: None,
        )
        with database.session() as session:
            tenant, _ = create_tenant(session, name=f"storage-{uuid.uuid4().hex[:8]}")
            tenant_id = tenant.id
            ids = [add_document(session, tenant_id=tenant_id, name=n, content=t).id for n, t in texts.items()]
            job_ids = [
                create_job(
                    session, tenant_id=tenant_id, instruction=INSTRUCTION, document_ids=ids, options=JobOptions()
                ).id
                for _ in range(jobs)
            ]
        for job_id in job_ids:
            emulator.reset()
            for _ in range(MAX_STEPS):
                if run_step(job_id, services).action == "finished":
                    break
        with database.session() as session:
            statuses = [session.get(Job, job_id) for job_id in job_ids]
            succeeded = sum(1 for job in statuses if job is not None and job.status == JobStatus.SUCCEEDED)
            ended, read = sizes(session), read_back(session, job_ids)
        pack_ended(database, services.settings, seconds=PACKING_SECONDS)  # what the retention sweep does
        with database.session() as session:
            before, read_packed = sizes(session), read_back(session, job_ids)
        with database.session() as session:
            for document_id in ids:
                delete_document(session, tenant_id=tenant_id, document_id=document_id)
        with database.session() as session:
            after, read_after = sizes(session), read_back(session, job_ids)
        database.dispose()
    return Outcome(jobs, succeeded, ended, before, after, read, read_packed, read_after)


Results = dict[tuple[str, str], Outcome]  # (workload, way) -> outcome


def goals(results: Results) -> list[Goal]:
    checked = []
    for workload in dict.fromkeys(w for w, _ in results):
        inline, by_reference = results[workload, "inline"], results[workload, "by reference"]
        checked.append(
            Goal(
                f"{workload}: {by_reference.jobs} jobs reading the same {DOCUMENTS} documents: stored message bytes "
                f"<= {RATIO_GOAL}x the documents' own stored bytes, at rest (ended, packed by the sweep)",
                by_reference.ratio <= RATIO_GOAL,
                f"{by_reference.ratio:.2f}× (as rows {by_reference.ratio_as_rows:.2f}×; inline {inline.ratio:.2f}×)",
            )
        )
    outcomes = list(results.values())
    same = all(
        results[w, "inline"].read_back == o.read_back == o.read_back_packed == o.read_back_after
        for (w, _), o in results.items()
    )
    checked.append(
        Goal(
            "every job's messages read back the same bytes as stored inline, as rows, packed, and after the "
            "documents are deleted",
            same,
        )
    )
    checked.append(
        Goal(
            "every job succeeded",
            all(o.succeeded == o.jobs for o in outcomes),
            f"{sum(o.succeeded for o in outcomes)}/{sum(o.jobs for o in outcomes)}",
        )
    )
    return checked


HEADER = [
    "workload",
    "pages stored",
    "jobs succeeded",
    "messages",
    "ended: message rows (bytes)",
    "of which carrying pages",
    "ratio as rows",
    "at rest: packed (bytes)",
    "documents (bytes)",
    "ratio at rest",
    "per job at rest (bytes)",
    "after deleting the documents: packed + bodies (bytes)",
    "messages, packed + bodies, relation size at rest (bytes)",
    "documents, relation size (bytes)",
]


def rows(results: Results) -> list[list[str]]:
    return [
        [
            workload,
            way,
            f"{o.succeeded}/{o.jobs}",
            f"{o.before.messages:,}",
            f"{o.ended.message_rows:,}",
            f"{o.ended.page_rows:,}",
            f"{o.ratio_as_rows:.2f}×",
            f"{o.before.packed_rows:,}",
            f"{o.before.document_rows:,}",
            f"{o.ratio:.2f}×",
            f"{o.before.stored // o.jobs:,}",
            f"{o.after.stored:,}",
            f"{o.before.messages_relation:,}",
            f"{o.before.documents_relation:,}",
        ]
        for (workload, way), o in results.items()
    ]


def run(scale: int = 1) -> tuple[str, list[Goal]]:
    """Every workload both ways, side by side; the report (Markdown) and the goals."""
    jobs = max(1, JOBS // scale)
    with bundled_emulator() as emulator:
        results = {
            (f"{workload} ({chars // scale:,} characters)", way): run_way(emulator, value, jobs, chars // scale)
            for workload, chars in WORKLOADS.items()
            for way, value in WAYS.items()
        }
    checked = goals(results)
    report = "\n\n".join(
        [
            f"## Storage ({jobs} jobs reading the same {DOCUMENTS} documents, the default model and budget)",
            table(HEADER, rows(results)),
            "Bytes are PostgreSQL's: `sum(pg_column_size(row.*))` over the rows (every column, long values "
            "compressed, as TOAST keeps them). Ended: every job has ended, its messages are rows (the rows carrying "
            "pages are the results of `read_document` calls, the rest is each job's own conversation: its "
            "instruction, the agent's notes and calls). At rest: the retention sweep has packed each ended job's "
            "messages into one compressed row (`models/packing.py`). The ratios are the messages' bytes and the "
            "bodies' over the documents' rows, before the documents are deleted (no bodies then). After the "
            "documents are deleted, the bodies hold each page read once. The relation sizes are "
            "`pg_total_relation_size` (heap, TOAST and indexes, in 8 kB pages).",
            "### Goals",
            render_goals(checked),
        ]
    )
    return report, checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="divide the number of jobs by this")
    arguments = parser.parse_args()
    report, _ = run(arguments.scale)
    command = "python -m bench.storage" + (f" --scale {arguments.scale}" if arguments.scale != 1 else "")
    written = f"{header(command)}\n\n{report}\n"
    print(written)
    if arguments.scale == 1:
        keep(written, "storage.md")


if __name__ == "__main__":
    main()

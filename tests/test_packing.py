"""Packed histories (models/packing.py): an ended family's messages, packed into one compressed row per job, read
back exactly as their rows did (the API's pages, the command line, the hand-over, the documents read, a document
deleted afterwards); a family still at work is left as rows; a sweep killed with SIGKILL in the middle leaves every
job whole, in rows or packed; a purge takes the packs; the migration's downgrade puts the rows back."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from emulator import EmulatorServer
from models.continuation import continue_job
from models.db import Database
from models.documents import delete_document
from models.history import all_messages, append_messages
from models.jobs import create_job, end_job
from models.migrate import alembic_config, upgrade
from models.options import JobOptions
from models.packing import pack_families, packable_families, stored_rows
from models.retention import purge
from models.tables import Job, JobKind, JobStatus, Message, PackedHistory, now
from models.tenants import create_tenant
from testbed.stack import environment, fresh_database
from tests.support import wait_until
from tests.support_pages import Ran, api_messages, run_job

ROOT = Path(__file__).resolve().parent.parent


def pages_of(database: Database, ran: Ran, limit: int, max_bytes: int) -> list[dict[str, Any]]:
    """Every message, read through GET .../messages a page at a time (``max_bytes``: the page's content bound)."""
    read: list[dict[str, Any]] = []
    with (
        environment({"PLIMSOLL_MAX_PAGE_BYTES": str(max_bytes)}),
        TestClient(create_app(database=database), headers={"X-API-Key": ran.key}) as client,
    ):
        offset: int | None = 0
        while offset is not None:
            page = client.get(f"/v1/jobs/{ran.job_id}/messages", params={"offset": offset, "limit": limit}).json()
            read += page["items"]
            offset = page["next_offset"]
    return read


def views(database: Database, ran: Ran) -> dict[str, Any]:
    """What a person can read of the job's history: the API's messages (whole and page by page), the job's view
    (the documents it read) and the hand-over a continuation would start from."""
    with TestClient(create_app(database=database), headers={"X-API-Key": ran.key}) as client:
        job = client.get(f"/v1/jobs/{ran.job_id}").json()
    with database.session() as session:
        not_kept = session.begin_nested()
        instruction = continue_job(
            session, tenant_id=ran.tenant_id, job_id=ran.job_id, instruction="Go on."
        ).job.instruction
        not_kept.rollback()
    return {
        "messages": api_messages(database, ran),
        "pages": pages_of(database, ran, limit=3, max_bytes=10_000),
        "read": job["progress"]["documents_read"],
        "handover": instruction,
    }


def test_a_packed_history_reads_as_its_rows_did(database: Database, emulator: EmulatorServer) -> None:
    ran = run_job(database, emulator)
    as_rows = views(database, ran)
    with database.session() as session:
        count = session.scalar(select(func.count()).where(Message.job_id == ran.job_id))
        assert ran.job_id in packable_families(session, ended_before=now(), limit=10_000)
        assert pack_families(session, [ran.job_id]).messages == count
    with database.session() as session:
        assert session.scalar(select(func.count()).where(Message.job_id == ran.job_id)) == 0
        pack = session.get_one(PackedHistory, ran.job_id)
        assert pack.count == count and len(pack.messages) < 5_000
        assert ran.job_id not in packable_families(session, ended_before=now(), limit=10_000)
    assert views(database, ran) == as_rows
    with database.session() as session:  # the documents go: the pages the pack refers to are kept
        for document_id in ran.document_ids:
            delete_document(session, tenant_id=ran.tenant_id, document_id=document_id)
    assert api_messages(database, ran) == as_rows["messages"]


def _family(database: Database, tenant_id: int, messages: int) -> tuple[int, int]:
    """A main job and its subagent, each with its opening message and ``messages`` more, both running."""
    with database.session() as session:
        main = create_job(session, tenant_id=tenant_id, instruction="Read.", document_ids=[], options=JobOptions())
        session.flush()
        child = create_job(
            session,
            tenant_id=tenant_id,
            instruction="Read a part.",
            document_ids=[],
            kind=JobKind.SUBAGENT,
            parent=main,
            options=JobOptions(),
        )
        for job in (main, child):
            job.status = JobStatus.RUNNING
            rounds: list[dict[str, Any]] = []
            for n in range(messages // 2):
                call = {
                    "type": "tool_use",
                    "id": f"toolu_{job.id}_{n}",
                    "name": "read_document",
                    "input": {"name": "a"},
                }
                rounds += [
                    {"role": "assistant", "content": [{"type": "text", "text": f"Reading {n}."}, call]},
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "x" * n}],
                    },
                ]
            append_messages(session, job, rounds, step=1)
        return main.id, child.id


def _end(database: Database, *job_ids: int) -> None:
    with database.session() as session:
        for job_id in job_ids:
            end_job(session, session.get_one(Job, job_id), JobStatus.SUCCEEDED)


def _digest(database: Database, job_ids: list[int]) -> dict[int, str]:
    """Each job's stored messages, every column, wherever they are."""
    with database.session() as session:
        rows = stored_rows(session, job_ids)
    found: dict[int, Any] = {job_id: hashlib.sha256() for job_id in job_ids}
    for row in rows:
        values = [row.id, row.seq, row.step, row.role, row.content, row.token_estimate, row.outline]
        found[row.job_id].update(json.dumps([*values, row.created_at.isoformat()]).encode())
    return {job_id: digest.hexdigest() for job_id, digest in found.items()}


def _where(database: Database, job_ids: list[int]) -> dict[int, tuple[int, int]]:
    """(message rows, packed histories) of each job."""
    with database.session() as session:
        rows = dict(
            session.execute(
                select(Message.job_id, func.count()).where(Message.job_id.in_(job_ids)).group_by(Message.job_id)
            ).all()
        )
        packs = set(session.scalars(select(PackedHistory.job_id).where(PackedHistory.job_id.in_(job_ids))))
    return {job_id: (rows.get(job_id, 0), int(job_id in packs)) for job_id in job_ids}


def test_a_family_is_packed_only_once_every_job_of_it_has_ended_and_a_purge_takes_the_packs(
    database: Database,
) -> None:
    with database.session() as session:
        tenant_id = create_tenant(session, name="packing-family")[0].id
    main, child = _family(database, tenant_id, 6)
    before = _digest(database, [main, child])
    _end(database, main)  # its subagent still at work
    with database.session() as session:
        assert main not in packable_families(session, ended_before=now(), limit=10_000)
        assert pack_families(session, [main]).families == 0
    assert _where(database, [main, child]) == {main: (7, 0), child: (7, 0)}
    _end(database, child)
    with database.session() as session:
        assert pack_families(session, [main]).messages == 14
    assert _where(database, [main, child]) == {main: (0, 1), child: (0, 1)}
    assert _digest(database, [main, child]) == before
    with database.session() as session:
        purged = purge(session, [main])
    assert (purged.jobs, purged.messages) == (1, 14)
    assert _where(database, [main, child]) == {main: (0, 0), child: (0, 0)}


SWEEP = """
import sys
from models.db import Database
from models.retention import pack_ended
from models.settings import Settings
pack_ended(Database(sys.argv[1]), Settings(retention_pause_seconds=0.2, retention_pause_ratio=0), seconds=600)
"""


def test_a_sweep_killed_in_the_middle_leaves_every_job_whole_in_rows_or_packed() -> None:
    with fresh_database(prefix="plimsoll_packing") as url:
        database = Database(url)
        with database.session() as session:
            tenant_id = create_tenant(session, name="packing-kill")[0].id
        families = [_family(database, tenant_id, 40) for _ in range(40)]
        jobs = [job_id for family in families for job_id in family]
        _end(database, *jobs)
        before = _digest(database, jobs)
        sweep = subprocess.Popen([sys.executable, "-c", SWEEP, url], cwd=ROOT, env={**os.environ})
        wait_until(lambda: any(packed for _, packed in _where(database, jobs).values()), 60, "the sweep packs")
        time.sleep(0.1)
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(10)
        midway = _where(database, jobs)
        assert all((rows == 41) != (packed == 1) for rows, packed in midway.values()), midway
        assert 0 < sum(packed for _, packed in midway.values()) < len(jobs)  # killed in the middle
        assert _digest(database, jobs) == before
        with database.session() as session:  # the next sweep goes on
            while batch := packable_families(session, ended_before=now(), limit=10):
                pack_families(session, batch)
        assert set(_where(database, jobs).values()) == {(0, 1)}
        assert _digest(database, jobs) == before
        database.dispose()


def test_the_migration_s_downgrade_puts_packed_messages_back_into_rows() -> None:
    with fresh_database(prefix="plimsoll_packing") as url:
        upgrade(url)
        database = Database(url)
        with database.session() as session:
            tenant_id = create_tenant(session, name="packing-downgrade")[0].id
        main, child = _family(database, tenant_id, 8)
        _end(database, main, child)
        before = _digest(database, [main, child])
        with database.session() as session:
            pack_families(session, [main])
        database.dispose()
        command.downgrade(alembic_config(url), "0024")
        database = Database(url)
        with database.session() as session:
            rows = session.execute(select(Message.job_id, Message.seq, Message.content, Message.created_at)).all()
        assert len(rows) == 18
        database.dispose()
        upgrade(url)
        database = Database(url)
        assert _where(database, [main, child]) == {main: (9, 0), child: (9, 0)}
        assert _digest(database, [main, child]) == before
        database.dispose()


def test_all_messages_reads_a_packed_history_in_order(database: Database) -> None:
    with database.session() as session:
        tenant_id = create_tenant(session, name="packing-order")[0].id
    main, child = _family(database, tenant_id, 10)
    _end(database, main, child)
    with database.session() as session:
        as_rows = all_messages(session, main)
        pack_families(session, [main])
    with database.session() as session:
        assert all_messages(session, main) == as_rows and [m.seq for m in as_rows] == list(range(11))

"""Retention on the real stack (uvicorn, PostgreSQL, a Celery worker, the emulator, whose agent delegates groups of
ten documents): the default keeps every history; a tenant's policy purges the histories of its jobs that ended
long enough ago, subagents with them, in the Celery task beat sends and in ``plimsoll retention --sweep``, while the
rows, answers, notices and usage stay; a held job keeps its history until released; the API answers 410 for what
went. The clock cannot be moved: jobs that ran for real are made to have ended long ago."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner, Result

from cli.main import app as cli
from demo.chapters import chapters
from models.db import Database
from models.packing import stored_rows
from models.retention import due_query, pause_after, policies, retention_report
from models.settings import Settings, get_settings
from models.tables import Job, Notice, PackedHistory, Step, Summary, now
from testbed.stack import api_server, fresh_database
from tests.support import wait_until
from tests.support_cli import set_job
from worker.tasks import retention_task

pytestmark = pytest.mark.usefixtures("celery_worker", "emulator_reset")


@pytest.fixture(scope="module")
def url(database_url: str) -> Iterator[str]:
    with api_server(database_url) as served:
        yield served


def run(*args: str | Path) -> Result:
    outcome = CliRunner().invoke(cli, [str(arg) for arg in args])
    assert "Traceback" not in outcome.output
    return outcome


def new_tenant(database_url: str) -> tuple[str, str]:
    name = f"keeper-{uuid.uuid4().hex[:8]}"
    created = run("tenant", "create", name, "--json", "--database-url", database_url)
    return name, json.loads(created.stdout)["api_key"]


def submitted(url: str, key: str, folder: Path, documents: int) -> int:
    paths = []
    for chapter in chapters(documents, chars=300, languages=("en",)):
        paths.append(folder / f"{uuid.uuid4().hex[:6]}-{chapter.name}")
        paths[-1].write_text(chapter.text, encoding="utf-8")
    done = run("submit", *paths, "-i", "Check every chapter.", "--wait", "--interval", "0.2", "--api-url", url,
               "--api-key", key)  # fmt: skip
    assert done.exit_code == 0, done.output
    return int(done.stdout.split("\n", 1)[0])


def ended_days_ago(database: Database, job_id: int, days: float) -> None:
    set_job(database, job_id, finished_at=now() - timedelta(days=days))


def history(database: Database, job_id: int) -> dict[str, int]:
    """How many messages (in rows or packed), steps and summaries the job and its subagents have stored."""
    with database.session() as session:
        family = select(Job.id).where((Job.id == job_id) | (Job.parent_id == job_id))
        return {
            "messages": len(stored_rows(session, session.scalars(family))),
            **{
                table.__tablename__: session.scalar(select(func.count()).where(table.job_id.in_(family))) or 0
                for table in (Step, Summary)
            },
        }


def packed(database: Database, job_ids: list[int]) -> list[int]:
    """Those of ``job_ids`` whose messages are packed (models/packing.py)."""
    with database.session() as session:
        return sorted(session.scalars(select(PackedHistory.job_id).where(PackedHistory.job_id.in_(job_ids))))


def tenant_row(database_url: str, name: str, *options: str) -> dict[str, Any]:
    shown = run("retention", "--json", *options, "--database-url", database_url)
    assert shown.exit_code == 0, shown.output
    answer = json.loads(shown.stdout)
    [row] = [row for row in answer["tenants"] if row["tenant"] == name]
    return {**row, "swept": answer.get("swept")}


def test_by_default_every_history_is_kept(url: str, database: Database, database_url: str, tmp_path: Path) -> None:
    name, key = new_tenant(database_url)
    job_id = submitted(url, key, tmp_path, 2)
    ended_days_ago(database, job_id, 36_000)
    kept = history(database, job_id)

    row = tenant_row(database_url, name, "--sweep")
    messages = httpx.get(f"{url}/v1/jobs/{job_id}/messages", headers={"X-API-Key": key})

    assert get_settings().retention_days == 0
    assert (row["days"], row["where"]) == (0, "the operator's setting PLIMSOLL_RETENTION_DAYS")
    assert (row["due_jobs"], row["jobs"], row["purged"]) == (0, 1, 0)
    assert row["messages"] == kept["messages"] > 0 and row["bytes"] > 0
    assert history(database, job_id) == kept
    assert messages.status_code == 200 and messages.json()["total"] == kept["messages"]


def test_a_tenants_policy_purges_old_histories_and_keeps_the_rest(
    url: str, database: Database, database_url: str, tmp_path: Path
) -> None:
    name, key = new_tenant(database_url)
    headers = {"X-API-Key": key}
    limits = run("tenant", "limits", name, "--retention-days", "30", "--database-url", database_url)
    old = submitted(url, key, tmp_path, 20)  # two subagents of ten documents
    other_old, held, recent = (submitted(url, key, tmp_path, 2) for _ in range(3))
    holding = run("hold", str(held), "--api-url", url, "--api-key", key)
    for job_id in (old, other_old, held):
        ended_days_ago(database, job_id, 31)
    ended_days_ago(database, recent, 29)
    with database.session() as session:
        session.add(Notice(tenant_id=session.get_one(Job, old).tenant_id, job_id=old, text="A notice to keep."))
    before = httpx.get(f"{url}/v1/jobs/{old}", headers=headers).json()
    children = [child["id"] for child in before["children"]]
    kept = {job_id: history(database, job_id) for job_id in (old, other_old, held, recent)}

    due = tenant_row(database_url, name)
    retention_task.delay()  # what Celery beat sends
    wait_until(lambda: history(database, other_old)["messages"] == 0, 60, "the sweep purged the old jobs")
    after = httpx.get(f"{url}/v1/jobs/{old}", headers=headers).json()
    gone = {path: httpx.get(f"{url}/v1/jobs/{path}", headers=headers) for path in
            (f"{old}/messages", f"{old}/steps", f"{children[0]}/messages")}  # fmt: skip
    shown = run("messages", str(old), "--api-url", url, "--api-key", key)
    continued = httpx.post(f"{url}/v1/jobs/{old}/continue", headers=headers, json={"instruction": "Go on."})
    hold_purged = httpx.post(f"{url}/v1/jobs/{old}/hold", headers=headers)
    hold_subagent = httpx.post(f"{url}/v1/jobs/{children[0]}/hold", headers=headers)
    notices = httpx.get(f"{url}/v1/notices", headers=headers, params={"unread": "false"}).json()

    assert limits.exit_code == 0 and "retention_days" in limits.stdout and "--retention-days" in limits.stdout
    assert holding.exit_code == 0 and f"plimsoll release {held}" in holding.stderr
    assert len(children) == 2 and kept[old]["messages"] > 0 and kept[old]["steps"] > 0
    assert (due["days"], due["held"], due["jobs"], due["due_jobs"]) == (30, 1, 4, 2)
    assert due["due_messages"] == kept[old]["messages"] + kept[other_old]["messages"]
    assert due["messages"] == sum(each["messages"] for each in kept.values())
    assert history(database, old) == {"messages": 0, "steps": 0, "summaries": 0}
    assert after["history_purged_at"] is not None and before["history_purged_at"] is None
    for same in ("status", "final_answer", "usage", "finished_at", "children", "instruction", "error"):
        assert after[same] == before[same], same
    assert after["progress"]["documents_read"] == before["progress"]["documents_read"] != []
    assert after["last_request"] is None
    for answer in gone.values():
        assert answer.status_code == 410 and "was purged on" in answer.json()["detail"]
    assert shown.exit_code == 1 and "its answer, notices and usage are kept" in " ".join(shown.stderr.split())
    assert continued.status_code == 409 and "purged" in continued.json()["detail"]
    assert hold_purged.status_code == 410
    assert hold_subagent.status_code == 409 and f"hold job {old}" in hold_subagent.json()["detail"]
    assert [n["text"] for n in notices["items"] if n["job_id"] == old] == ["A notice to keep."]
    assert history(database, held) == kept[held] and history(database, recent) == kept[recent]
    wait_until(lambda: packed(database, [held, recent]) == sorted([held, recent]), 60, "the sweep packs them")
    assert history(database, held) == kept[held] and history(database, recent) == kept[recent]
    assert httpx.get(f"{url}/v1/jobs/{held}", headers=headers).json()["held"] is True

    released = run("release", str(held), "--api-url", url, "--api-key", key)
    swept = tenant_row(database_url, name, "--sweep")

    assert released.exit_code == 0
    assert swept["swept"]["purged"] == {"jobs": 1, "messages": kept[held]["messages"]}
    assert (swept["purged"], swept["held"], swept["due_jobs"]) == (3, 0, 0)
    assert swept["messages"] == kept[recent]["messages"] == history(database, recent)["messages"]
    assert history(database, held)["messages"] == 0


def test_a_sweep_rests_after_each_batch_as_long_as_the_batch_took_and_at_least_the_pause() -> None:
    defaults = Settings()
    assert (defaults.retention_pause_ratio, defaults.retention_pause_seconds) == (9.0, 0.05)
    assert pause_after(0.04, defaults) == pytest.approx(0.36)  # a tenth of the sweep's time on the database
    assert pause_after(0.4, defaults) == pytest.approx(3.6)  # the database is busy: the sweep yields more
    assert pause_after(0.001, defaults) == 0.05
    assert pause_after(0.4, Settings(retention_pause_ratio=0.0)) == 0.05  # the old fixed pause


def test_the_setting_is_the_policy_of_tenants_without_their_own(database: Database) -> None:
    settings = Settings(database_url=database.url, retention_days=7)
    with fresh_database() as url:
        fresh = Database(url)
        with fresh.session() as session:
            ok = run("tenant", "create", "a", "--database-url", url)
            assert ok.exit_code == 0
            [policy] = policies(session, settings)
            due = due_query(policy, now())
            report = retention_report(session, settings)
        fresh.dispose()
    assert (policy.days.value, policy.days.where) == (7, "the operator's setting PLIMSOLL_RETENTION_DAYS")
    assert due is not None and report[0].days == 7


def test_the_commands_of_the_retention_page_do_what_it_says(
    url: str, database: Database, database_url: str, tmp_path: Path
) -> None:
    page = (Path(__file__).parents[1] / "docs" / "retention.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```sh\n(.*?)```", page, flags=re.S)
    name, key = new_tenant(database_url)
    job_id = submitted(url, key, tmp_path, 2)
    ended_days_ago(database, job_id, 31)
    kept = history(database, job_id)["messages"]
    held_at_the_report = None
    for line in block.splitlines():
        argv = [name if part == "acme" else str(job_id) if part == "12" else part
                for part in shlex.split(line.split("  #", 1)[0])[1:]]  # fmt: skip
        on_the_database = argv[0] in ("tenant", "retention")
        where = ["--database-url", database_url] if on_the_database else ["--api-url", url, "--api-key", key]
        done = run(*argv, *where)
        assert done.exit_code == 0, (argv, done.output)
        if argv == ["retention"]:
            assert name in done.stdout
            held_at_the_report = history(database, job_id)["messages"]
    after = tenant_row(database_url, name)

    assert held_at_the_report == kept > 0
    assert history(database, job_id) == {"messages": 0, "steps": 0, "summaries": 0}
    assert (after["days"], after["purged"], after["held"], after["jobs"]) == (30, 1, 0, 0)

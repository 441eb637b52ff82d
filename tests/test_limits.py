"""The operator's limits at the edge (models/limits.py), through the real API on the real database: ceilings a job
cannot pass (the settings', or the tenant's own), the reproductions only where the operator allows them, and the
tenant's quotas of queued jobs and stored bytes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from models.db import Database
from models.jobs import create_job
from models.settings import get_settings
from models.tables import Document, Job
from models.tenants import set_limits
from testbed.stack import environment
from tests.support_api import Api, Caller, serve_api


@pytest.fixture
def api(database: Database) -> Iterator[Api]:
    with serve_api(database) as api:
        yield api


def document(caller: Caller) -> list[int]:
    return [caller.document("a.txt", "Alpha.")]  # stored once: the same name and text again is the same document


def submit(caller: Caller, **fields: object) -> tuple[int, str]:
    response = caller.post("/v1/jobs", json={"instruction": "Read.", "document_ids": document(caller), **fields})
    return response.status_code, response.json().get("detail", "")


def test_the_default_ceilings_are_the_defaults_and_the_most_a_job_may_ask(api: Api) -> None:
    caller = api.tenant()
    settings = get_settings()
    assert (settings.max_steps_per_job, settings.max_input_tokens_per_job) == (1_000, 50_000_000)

    job = caller.job(document(caller))
    at_the_ceiling = caller.job(document(caller), max_steps=1_000, max_input_tokens=50_000_000)
    steps = submit(caller, max_steps=1_001)
    tokens = submit(caller, max_input_tokens=50_000_001)
    checked = caller.post("/v1/jobs/check", json={"instruction": "Read.", "max_steps": 1_001})

    assert job["limits"] == at_the_ceiling["limits"] == {
        "max_steps": 1_000, "max_input_tokens": 50_000_000, "max_cost_usd": 250, "wind_down": True
    }  # fmt: skip
    assert steps == (
        422,
        "max_steps 1,001 is over the ceiling of 1,000 (the operator's setting PLIMSOLL_MAX_STEPS_PER_JOB); "
        "ask for at most that",
    )
    assert (
        tokens[0] == 422 and "the ceiling of 50,000,000 (the operator's setting PLIMSOLL_MAX_INPUT_TOKENS" in tokens[1]
    )
    assert checked.status_code == 422 and "PLIMSOLL_MAX_STEPS_PER_JOB" in checked.json()["detail"]


def test_a_lowered_setting_is_the_ceiling_and_a_tenants_own_wins(api: Api, database: Database) -> None:
    lowered, own = api.tenant(), api.tenant()
    with database.session() as session:
        set_limits(session, tenant_id=own.tenant_id, limits={"max_steps_per_job": 50})
    with environment({"PLIMSOLL_MAX_STEPS_PER_JOB": "20"}):
        assert caller_limits(lowered) == 20
        assert submit(lowered, max_steps=21)[0] == 422
        assert caller_limits(own) == 50  # higher than the setting: the operator gave this tenant more
        assert caller_limits(own, max_steps=50) == 50
        refused = submit(own, max_steps=51)
    assert refused == (
        422,
        "max_steps 51 is over the ceiling of 50 (the operator's limit for this tenant: plimsoll tenant limits "
        "--max-steps); ask for at most that",
    )


def caller_limits(caller: Caller, **fields: Any) -> int:
    return int(caller.job(document(caller), **fields)["limits"]["max_steps"])


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"strategy": "legacy"}, "strategy=legacy"),
        ({"strategy": "original"}, "strategy=original"),
        ({"strategy": "unbatched"}, "strategy=unbatched"),
        ({"safety_net": False}, "safety_net=false"),
    ],
)
def test_the_reproductions_are_refused_unless_the_operator_allows_them(
    api: Api, fields: dict[str, object], named: str
) -> None:
    caller = api.tenant()
    assert get_settings().allow_reproductions is False  # the default

    refused = submit(caller, **fields)
    checked = caller.post("/v1/jobs/check", json={"instruction": "Read.", **fields})
    with environment({"PLIMSOLL_ALLOW_REPRODUCTIONS": "true"}):
        allowed = submit(caller, **fields)

    assert refused == (
        422,
        f"{named} reproduce old failures, for benchmarks: this service does not allow them (the operator's "
        "setting PLIMSOLL_ALLOW_REPRODUCTIONS)",
    )
    assert checked.status_code == 422
    assert allowed[0] == 201


def test_the_default_quota_of_queued_jobs_takes_a_thousand_and_refuses_the_next(api: Api, database: Database) -> None:
    caller = api.tenant()
    assert get_settings().max_queued_jobs_per_tenant == 1_000
    with database.session() as session:  # 999 queued jobs, made as the API makes them
        for _ in range(999):
            create_job(session, tenant_id=caller.tenant_id, instruction="Wait.")

    thousandth = submit(caller)
    refused = submit(caller)

    assert thousandth[0] == 201
    assert refused == (
        429,
        "this tenant has 1,000 jobs queued, its quota of 1,000 (the operator's setting "
        "PLIMSOLL_MAX_QUEUED_JOBS_PER_TENANT): submit more once some have started, or cancel some",
    )


def test_a_tenants_own_quota_of_queued_jobs_counts_its_main_jobs_while_queued(api: Api, database: Database) -> None:
    caller, other = api.tenant(), api.tenant()
    with database.session() as session:
        set_limits(session, tenant_id=caller.tenant_id, limits={"max_queued_jobs": 2})
    first, _second = caller.job(document(caller)), caller.job(document(caller))

    refused = submit(caller)
    others = submit(other)  # another tenant's quota is its own
    assert caller.post(f"/v1/jobs/{first['id']}/cancel").status_code == 200
    after_cancelling = submit(caller)

    assert refused[0] == 429 and "its quota of 2 (the operator's limit for this tenant" in refused[1]
    assert others[0] == after_cancelling[0] == 201
    with database.session() as session:
        queued = session.scalars(select(Job.status).where(Job.tenant_id == caller.tenant_id)).all()
    assert sorted(queued) == ["cancelled", "queued", "queued"]


def test_the_storage_quota_counts_utf8_bytes_and_stores_nothing_of_an_upload_that_passes_it(
    api: Api, database: Database
) -> None:
    caller = api.tenant()
    russian = "Глава первая. " * 50  # two bytes a letter
    size = len(russian.encode())
    with database.session() as session:
        set_limits(session, tenant_id=caller.tenant_id, limits={"max_document_bytes": 2 * size})
    caller.document("one.txt", russian)

    files = [("files", (name, (russian + name).encode(), "text/plain")) for name in ("two.txt", "three.txt")]
    refused = caller.post("/v1/documents", files=files)

    assert refused.status_code == 429
    assert refused.json()["detail"] == (
        f"this tenant's documents take {size:,} bytes; {size + 7:,} more would pass its quota of {2 * size:,} bytes "
        "(the operator's limit for this tenant: plimsoll tenant limits --max-document-bytes): delete documents it "
        "no longer needs (DELETE /v1/documents/ID, plimsoll documents delete)"
    )
    assert [d.name for d in stored(database, caller.tenant_id)] == ["one.txt"]


def test_under_the_default_storage_quota_documents_of_the_largest_size_are_stored_with_their_bytes(
    api: Api, database: Database
) -> None:
    caller = api.tenant()
    settings = get_settings()
    assert settings.max_document_bytes_per_tenant == 10_000_000_000
    text = "日本語の文章。" * (settings.max_document_chars // 7)  # three bytes a character
    for name in ("a.txt", "b.txt"):
        caller.document(name, text)
    assert [(d.chars, d.bytes) for d in stored(database, caller.tenant_id)] == [(len(text), 3 * len(text))] * 2


def stored(database: Database, tenant_id: int) -> list[Document]:
    with database.session() as session:
        return list(session.scalars(select(Document).where(Document.tenant_id == tenant_id).order_by(Document.id)))

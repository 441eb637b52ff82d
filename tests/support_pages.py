"""Pages of documents stored by reference, the job both ways: run through the worker's own steps against the
emulator, and read back as the API answers (tests/test_pages_by_reference.py, tests/test_packing.py)."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.options import JobOptions
from models.tenants import create_tenant
from testbed.stack import environment
from tests.support_worker import run_to_end, services
from worker.providers import AnthropicProvider
from worker.providers.base import Provider, Reply
from worker.step import run_step

TEXTS = {c.name: c.text for c in chapters(2, chars=9_000, languages=("en",))}
BUDGET = 8_000  # a page is at most a quarter of it: each document comes in several pages
INSTRUCTION = "Check each chapter against the notes and report one fact of each."
CREATED_AT = re.compile(r'"created_at": ?"[^"]*"')


class Recording:
    """The real provider; every request it is handed is kept, as the JSON the SDK is given."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.requests: list[str] = []

    def send(self, **request: Any) -> Reply:
        self.requests.append(json.dumps(request, ensure_ascii=False))
        return self.provider.send(**request)


@dataclass(frozen=True)
class Ran:
    job_id: int
    tenant_id: int
    key: str
    document_ids: list[int]
    requests: list[str]


def run_job(
    database: Database, emulator: EmulatorServer, *, tenant: tuple[int, str] | None = None, inline_steps: int = 0
) -> Ran:
    """The job, run to its end step by step through the worker's own code, against the emulator over HTTP; its first
    ``inline_steps`` steps store pages inline, as before."""
    emulator.reset()
    recording = Recording(AnthropicProvider(api_key="test", base_url=emulator.base_url))
    with database.session() as session:
        if tenant is None:
            row, key = create_tenant(session, name=f"pages-{uuid.uuid4().hex[:8]}")
            tenant = row.id, key
        ids = [add_document(session, tenant_id=tenant[0], name=n, content=t).id for n, t in TEXTS.items()]
        job = create_job(
            session, tenant_id=tenant[0], instruction=INSTRUCTION, document_ids=ids, options=JobOptions(budget=BUDGET)
        )
        job_id = job.id
    steps = services(database, recording, [])
    with environment({"PLIMSOLL_PAGES_BY_REFERENCE": "false"}):
        for _ in range(inline_steps):
            assert run_step(job_id, steps).action == "continued"
    assert run_to_end(job_id, steps)[-1].action == "finished"
    return Ran(job_id, tenant[0], tenant[1], ids, recording.requests)


def api_messages(database: Database, ran: Ran) -> str:
    """GET .../messages as the bytes the API answers, but for when each message was written."""
    with TestClient(create_app(database=database), headers={"X-API-Key": ran.key}) as client:
        response = client.get(f"/v1/jobs/{ran.job_id}/messages", params={"limit": 500})
    assert response.status_code == 200, response.text
    assert response.json()["total"] == len(response.json()["items"])
    return CREATED_AT.sub("", response.text)

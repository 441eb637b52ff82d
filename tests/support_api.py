"""Helpers for the tests of the HTTP API: the app on a test client, tenants with their keys, and rows written the
way the worker writes them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from api.deps import Enqueue
from models.db import Database
from models.tables import Document, Step
from models.tenants import create_tenant

Response = Any  # the TestClient's: httpx's or httpx2's, by the Starlette installed


@dataclass
class Caller:
    """One tenant talking to the API with its key."""

    client: TestClient
    tenant_id: int
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.key}

    def get(self, path: str, *, headers: dict[str, str] | None = None, **request: Any) -> Response:
        return self.client.get(path, headers=self.headers | (headers or {}), **request)

    def post(self, path: str, *, headers: dict[str, str] | None = None, **request: Any) -> Response:
        return self.client.post(path, headers=self.headers | (headers or {}), **request)

    def document(self, name: str, content: str) -> int:
        response = self.post("/v1/documents", json={"name": name, "content": content})
        assert response.status_code == 201, response.text
        return int(response.json()["documents"][0]["id"])

    def job(self, document_ids: list[int], instruction: str = "Summarise the documents.", **fields: Any) -> Any:
        response = self.post("/v1/jobs", json={"instruction": instruction, "document_ids": document_ids, **fields})
        assert response.status_code == 201, response.text
        return response.json()


@dataclass
class Api:
    client: TestClient
    database: Database
    enqueued: list[int] = field(default_factory=list)

    def tenant(self) -> Caller:
        tenant_id, key = new_tenant(self.database)
        return Caller(self.client, tenant_id, key)


def new_tenant(database: Database) -> tuple[int, str]:
    with database.session() as session:
        tenant, key = create_tenant(session, name=f"tenant-{uuid.uuid4().hex[:10]}")
    return tenant.id, key


@contextmanager
def serve_api(database: Database, enqueue: Enqueue | None = None) -> Iterator[Api]:
    enqueued: list[int] = []
    app = create_app(database=database, enqueue=enqueue or enqueued.append)
    with TestClient(app) as client:
        yield Api(client, database, enqueued)


def stored_documents(database: Database, tenant_id: int) -> list[Document]:
    with database.session() as session:
        return list(session.scalars(select(Document).where(Document.tenant_id == tenant_id)))


def read(tool_use_id: str, name: str) -> dict[str, Any]:
    call = {"type": "tool_use", "id": tool_use_id, "name": "read_document", "input": {"name": name}}
    return {"role": "assistant", "content": [{"type": "text", "text": f"Reading {name}."}, call]}


def result(tool_use_id: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": "Text."}]}


def step_row(job_id: int, step: int, *, stage: str, cleared: list[str] | None = None) -> Step:
    return Step(
        job_id=job_id,
        step=step,
        stage=stage,
        planning_budget=38_000,
        calibration_factor=1.05,
        estimated_tokens=900,
        reported_input_tokens=950,
        messages_sent=7,
        cleared=["t0", "t1"] if cleared is None else cleared,
        dropped=1,
        stop_reason="tool_use",
    )

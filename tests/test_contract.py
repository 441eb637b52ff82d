"""The contract between the API and its client, on the real stack (uvicorn, PostgreSQL, a Celery worker, the
emulator): for every job shape (with subagents, with pages, failed, incomplete, cancelled, needs_new_chat,
continued) every answer the client reads is parsed by the client's own model into exactly what the API sent, and
matches the response schema the API publishes in its OpenAPI document."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
from pydantic import BaseModel

from api.client import PlimsollClient
from api.schemas import ContinueIn, JobIn, JobView
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.tenants import create_tenant
from testbed.stack import api_server, environment
from tests.support import wait_until
from tests.support_worker import wait_for

pytestmark = pytest.mark.usefixtures("celery_worker")

SHAPES = ("subagents", "pages", "failed", "incomplete", "cancelled", "needs_new_chat", "continued")
ENDS_AS = {"subagents": "succeeded", "pages": "succeeded", "continued": "succeeded"}


class Recording(httpx.BaseTransport):
    """HTTP as the client really does it, every answer kept as it came off the wire."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.answers: list[tuple[httpx.Request, httpx.Response]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.read()
        self.answers.append((request, response))
        return response


@dataclass
class Contract:
    client: PlimsollClient
    recording: Recording
    openapi: dict[str, Any]
    checked: set[tuple[str, str]] = field(default_factory=set)

    def read(self, call: Callable[[], BaseModel]) -> Any:
        """What ``call`` answers, after checking it against what came off the wire and against the schema."""
        parsed = call()
        request, response = self.recording.answers[-1]
        sent = response.json()
        assert parsed.model_dump(mode="json") == sent, f"{request.method} {request.url.path}: the client's model "
        template = self.template(request.url.path)
        method = request.method.lower()
        responses = self.openapi["paths"][template][method]["responses"]
        schema = responses[str(response.status_code)]["content"]["application/json"]["schema"]
        jsonschema_rs.validate({**schema, "components": self.openapi["components"]}, sent)
        self.checked.add((request.method, template))
        return parsed

    def template(self, path: str) -> str:
        if path in self.openapi["paths"]:  # /v1/webhooks/deliveries before /v1/webhooks/{webhook_id}
            return path
        for template in self.openapi["paths"]:
            if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path):
                return str(template)
        raise AssertionError(f"{path} is not in the OpenAPI document")


@dataclass
class Shapes:
    contract: Contract
    jobs: dict[str, int]


@pytest.fixture(scope="module")
def shapes(
    database: Database, database_url: str, emulator: EmulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shapes]:
    with database.session() as session:
        _, key = create_tenant(session, name=f"contract-{uuid.uuid4().hex[:8]}")
    recording = Recording()
    with api_server(database_url) as url, PlimsollClient(url, key, transport=recording) as client:
        openapi = httpx.get(f"{url}/openapi.json").json()
        contract = Contract(client, recording, openapi)
        emulator.reset()
        try:
            folder = tmp_path_factory.mktemp("contract")
            yield Shapes(contract, make_every_shape(contract, database, emulator, folder))
        finally:
            emulator.reset()


def make_every_shape(contract: Contract, database: Database, emulator: EmulatorServer, folder: Path) -> dict[str, int]:
    def documents(texts: dict[str, str]) -> list[int]:
        for name, text in texts.items():
            (folder / name).write_text(text, encoding="utf-8")
        created = contract.read(lambda: contract.client.upload([folder / name for name in texts]))
        return [document.id for document in created.documents]

    def submit(texts: dict[str, str], **options: Any) -> int:
        job = JobIn(instruction="Check each chapter and report one fact of each.", document_ids=documents(texts))
        job = job.model_copy(update=options)
        contract.read(lambda: contract.client.check_job(job))
        created: JobView = contract.read(lambda: contract.client.submit_job(job))
        return created.id

    def english(count: int, chars: int, tag: str) -> dict[str, str]:
        return {f"{tag}-{c.name}": c.text for c in chapters(count, chars=chars, languages=("en",))}

    # The model's window shrinks under the legacy strategy's requests: the job needs a new chat.
    emulator.configure(limit=40_000)
    russian = {f"legacy-{c.name}": c.text for c in chapters(8, chars=12_000, languages=("ru",))}
    with environment({"PLIMSOLL_ALLOW_REPRODUCTIONS": "true"}):  # the operator allows the reproduction
        jobs = {"needs_new_chat": submit(russian, budget=20_000, strategy="legacy")}
    assert wait_for(database, jobs["needs_new_chat"]).status == "needs_new_chat"
    continued = ContinueIn(instruction="Note one fact of each chapter left.")
    jobs["continued"] = contract.read(lambda: contract.client.continue_job(jobs["needs_new_chat"], continued)).id
    assert wait_for(database, jobs["continued"]).status == "succeeded"
    emulator.reset()

    jobs["subagents"] = submit(english(12, 600, "sub"))
    jobs["pages"] = submit(english(1, 60_000, "long"), budget=20_000)
    # A job out of steps winds down and ends incomplete; without the wind-down (a reproduction) it fails.
    with environment({"PLIMSOLL_ALLOW_REPRODUCTIONS": "true"}):
        jobs["failed"] = submit(english(1, 600, "failed"), max_steps=1, wind_down=False)
    # A main job and its subagents share its step limit: four steps do not read two groups of ten chapters.
    jobs["incomplete"] = submit(english(20, 600, "incomplete"), max_steps=4)
    jobs["cancelled"] = submit(english(12, 600, "cancel"))
    # cancelled once it has subagents
    wait_until(
        lambda: contract.client.job(jobs["cancelled"]).children,
        120,
        "the job to be cancelled has subagents",
        every=0.02,
    )
    contract.read(lambda: contract.client.cancel(jobs["cancelled"]))
    for shape, job_id in jobs.items():
        assert wait_for(database, job_id).status == ENDS_AS.get(shape, shape), shape
    return jobs


def read_everything_about(contract: Contract, shape: str, job_id: int) -> None:
    client = contract.client
    job: JobView = contract.read(lambda: client.job(job_id))
    for child in job.children:
        assert contract.read(lambda: client.job(child.id)).parent_id == job_id  # noqa: B023
    contract.read(lambda: client.messages(job_id, limit=500))
    contract.read(lambda: client.steps(job_id, limit=500))
    notices = contract.read(lambda: client.notices(job_id=job_id))
    if notices.items:
        contract.read(lambda: client.mark_notice_read(notices.items[0].id))
    if shape in ("subagents", "incomplete", "cancelled"):
        assert job.children, f"the {shape} job started no subagent"
    if shape == "pages":
        pages = [m for m in client.messages(job_id, limit=500).items if "to read on" in str(m.content)]
        assert pages, "the long document was not read in pages"


def read_every_listing(contract: Contract, jobs: dict[str, int]) -> None:
    client = contract.client
    listed = contract.read(lambda: client.jobs(limit=100))
    assert set(jobs.values()) <= {job.id for job in listed.items}
    contract.read(lambda: client.jobs(kind="subagent", limit=100))
    documents = contract.read(lambda: client.documents(limit=100))
    contract.read(lambda: client.document(documents.items[0].id))
    contract.read(lambda: client.notices())
    contract.read(client.models)
    contract.read(client.usage)
    contract.read(client.health)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_answer_about_a_job_is_what_the_client_reads(shapes: Shapes, shape: str) -> None:
    read_everything_about(shapes.contract, shape, shapes.jobs[shape])


def test_every_listing_is_what_the_client_reads(shapes: Shapes) -> None:
    read_every_listing(shapes.contract, shapes.jobs)


def test_every_route_with_an_answer_was_checked(shapes: Shapes, database: Database) -> None:
    contract = shapes.contract
    read_every_listing(contract, shapes.jobs)
    for shape, job_id in shapes.jobs.items():
        read_everything_about(contract, shape, job_id)
    with_an_answer = {
        (method.upper(), path)
        for path, methods in contract.openapi["paths"].items()
        for method in methods
        if (method, path) not in NO_BODY
    }
    read_the_webhooks_routes(contract, database, shapes.jobs["failed"])
    contract.read(lambda: contract.client.hold(shapes.jobs["failed"]))
    contract.read(lambda: contract.client.release(shapes.jobs["failed"]))
    assert with_an_answer - contract.checked == set()


NO_BODY = {
    ("delete", "/v1/documents/{document_id}"),  # 204
    ("delete", "/v1/webhooks/{webhook_id}"),  # 204
    ("get", "/v1/events"),  # Server-Sent Events, not JSON: tests/test_events.py reads them
    ("get", "/v1/jobs/{job_id}/events"),
}


def read_the_webhooks_routes(contract: Contract, database: Database, job_id: int) -> None:
    """An endpoint registered, listed, a delivery of one of the job's events listed and sent again, then removed."""
    from models.events import EventType, record
    from models.tables import Job

    client = contract.client
    with environment({"PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE": "true"}):
        created = contract.read(lambda: client.add_webhook("http://127.0.0.1:9/hook", ["job.ended"]))
    contract.read(client.webhooks)
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        record(session, job, EventType.ENDED, {"status": "failed"})
    deliveries = contract.read(lambda: client.deliveries(endpoint_id=created.id))
    contract.read(lambda: client.redeliver(deliveries.items[0].id))
    client.remove_webhook(created.id)

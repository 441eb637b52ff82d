"""The whole HTTP API fuzzed from its OpenAPI schema by schemathesis, cases that fit the schema and cases that do
not (malformed bodies, wrong types, missing fields): never a 5xx answer, and every answer checked by all of
schemathesis's checks (its status code and content type documented, its body valid against the response schema,
``Allow`` on a 405, invalid input refused, ...) but one: a request the schema allows may still be refused, for
reasons no schema states (text PostgreSQL cannot store, a budget over the model's limit, a model not in the
catalogue, the limits in the settings), so ``positive_data_acceptance`` is left out.

Runs against the real app on the test PostgreSQL database, as a real tenant; steps are put on a list instead of
a queue, so no worker is needed. The number of examples per operation is bounded so that the test stays well
under a minute on a small machine (``PLIMSOLL_FUZZ_EXAMPLES`` raises it for a longer hunt)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance

from api.app import create_app
from api.constants import MAX_ID
from models.db import Database
from models.documents import add_document
from models.history import append_messages
from models.jobs import create_job
from models.tables import JobKind, JobStatus, Notice
from testbed.stack import environment
from tests.examples import examples
from tests.support_api import new_tenant, read, result, step_row

# On one pytest-xdist worker, so that the module's tenant is made once and its tally covers every operation.
pytestmark = pytest.mark.xdist_group("fuzz")
EXAMPLES = examples(int(os.environ.get("PLIMSOLL_FUZZ_EXAMPLES", "25")))
answers: Counter[int] = Counter()  # status code -> requests, reported at the end of the module


@dataclass(frozen=True)
class Tenant:
    key: str
    ids: dict[str, list[int]]  # path parameter -> ids of the tenant's own objects


@pytest.fixture(scope="module")
def tenant(database: Database) -> Tenant:
    """A tenant with a document, a job with history and steps, a subagent and a notice, so that half the cases
    reach real objects instead of a 404."""
    tenant_id, key = new_tenant(database)
    with database.session() as session:
        document = add_document(session, tenant_id=tenant_id, name="a.txt", content="Chapter one.")
        job = create_job(session, tenant_id=tenant_id, instruction="Read it.", document_ids=[document.id])
        append_messages(session, job, [read("t1", "a.txt"), result("t1")], step=1)
        session.add(step_row(job.id, 1, stage="full"))
        job.step, job.status = 1, JobStatus.RUNNING
        child = create_job(
            session,
            tenant_id=tenant_id,
            instruction="Check a.",
            document_ids=[document.id],
            kind=JobKind.SUBAGENT,
            parent=job,
        )
        notice = Notice(tenant_id=tenant_id, job_id=job.id, text="A notice.")
        session.add(notice)
        session.flush()
        ids = {"document_id": [document.id], "job_id": [job.id, child.id], "notice_id": [notice.id]}
    return Tenant(key, ids)


# The schema is read when the module is imported; the app gets the session's test database before the first call.
app = create_app(enqueue=lambda _job_id: None)
# The event streams stay open until their job ends (a case would wait for it): their refusals (a malformed
# Last-Event-ID or ``after``, another tenant's job) are tested in tests/test_events.py.
schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex=r"/events$")


@pytest.fixture(autouse=True, scope="module")
def on_the_test_database(database: Database, request: pytest.FixtureRequest) -> Iterator[None]:
    app.state.database = database
    # Every case reaches its route: the per-key limit would answer most of them 429 (tests/test_rate_limit.py).
    with environment({"PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY": "0"}):
        yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capturing = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capturing is not None:
        by_status = ", ".join(f"{code}: {n}" for code, n in sorted(answers.items()))
        with capturing.global_and_fixture_disabled():
            reporter.write_line(f"\nfuzz: {answers.total()} requests ({by_status})")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same cases every run: a failure here is reproducible, not flaky
    suppress_health_check=list(HealthCheck),
)
def test_no_request_gets_a_server_error_and_every_answer_fits_the_schema(case: Any, tenant: Tenant) -> None:
    headers = {"X-API-Key": tenant.key}
    for name, value in (case.path_parameters or {}).items():
        # An id in range, odd: one of the tenant's own objects instead (deterministic, as the cases are).
        if name in tenant.ids and isinstance(value, int) and 0 < value <= MAX_ID and value % 2:
            case.path_parameters[name] = tenant.ids[name][value // 2 % len(tenant.ids[name])]
    try:
        response = case.call(headers=headers)
    except Exception:  # the test client raises the app's unhandled error rather than answering its 500
        answers[500] += 1
        raise
    answers[response.status_code] += 1
    case.validate_response(response, headers=headers, excluded_checks=[positive_data_acceptance])

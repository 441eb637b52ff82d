"""The whole HTTP API fuzzed from its OpenAPI schema by schemathesis: whatever is sent, never a 5xx answer.

Runs against the real app on the test PostgreSQL database, as a real tenant; steps are put on a list instead of
a queue, so no worker is needed. The number of examples per operation is bounded so that the test stays well
under a minute on a small machine (``PLIMSOLL_FUZZ_EXAMPLES`` raises it for a longer hunt)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from api.app import create_app
from models.db import Database
from tests.test_api import new_tenant

EXAMPLES = int(os.environ.get("PLIMSOLL_FUZZ_EXAMPLES", "25"))
answers: Counter[int] = Counter()  # status code -> requests, reported at the end of the module


@pytest.fixture(scope="module")
def tenant_key(database: Database) -> str:
    _, key = new_tenant(database)
    return key


# The schema is read when the module is imported; the app gets the session's test database before the first call.
app = create_app(enqueue=lambda _job_id: None)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.fixture(autouse=True, scope="module")
def on_the_test_database(database: Database, request: pytest.FixtureRequest) -> Iterator[None]:
    app.state.database = database
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
def test_no_request_gets_a_server_error(case: Any, tenant_key: str) -> None:
    try:
        response = case.call(headers={"X-API-Key": tenant_key})
    except Exception:  # the test client raises the app's unhandled error rather than answering its 500
        answers[500] += 1
        raise
    answers[response.status_code] += 1
    case.validate_response(response, checks=[not_a_server_error])

"""What a person meets first at the API: the docs pages work without the internet, and a body that is not JSON
gets one clear message, naming where it breaks, on every route that takes JSON."""

from __future__ import annotations

import re
import uuid

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from models.db import Database
from models.tenants import create_tenant

BROKEN = b'{"instruction": "Go.",\n "document_ids": [1,]}'


@pytest.fixture
def client(database: Database) -> TestClient:
    with database.session() as session:
        _, key = create_tenant(session, name=f"front-{uuid.uuid4().hex[:8]}")
    return TestClient(create_app(database=database, enqueue=lambda job_id: None), headers={"X-API-Key": key})


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_load_everything_from_the_api_itself(client: TestClient, page: str) -> None:
    html = client.get(page).text
    assets = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
    assert assets, html
    assert not [a for a in assets if a.startswith(("http://", "https://", "//"))], assets
    for asset in assets:
        if asset.endswith((".js", ".css")):
            assert client.get(asset).status_code == 200, asset


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/documents"])
def test_a_body_that_is_not_json_gets_one_clear_message(client: TestClient, path: str) -> None:
    response = client.post(path, content=BROKEN, headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"] == "the body is not valid JSON: expecting value at line 2 column 21"

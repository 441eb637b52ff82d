"""plimsoll models (the catalogue with its prices, from the real API under uvicorn) and plimsoll tenant limits
(the operator's ceilings and quotas of one tenant, on the database), each as a person and a script read it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner, Result

from api.client import ApiError, PlimsollClient
from cli.main import app as cli
from models.catalogue import CATALOGUE
from models.db import Database
from models.limits import limits_of
from models.pricing import prices_of
from models.settings import get_settings
from models.tables import Tenant
from models.tenants import tenant_named
from tests.support_api import new_tenant
from tests.support_cli import Served, serving


@pytest.fixture(scope="module")
def served(database: Database) -> Iterator[Served]:
    with serving(database) as state:
        yield state


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_plimsoll_models_lists_each_models_window_budget_and_prices_with_their_source(
    served: Served, database: Database
) -> None:
    key = new_tenant(database)[1]
    settings = get_settings()

    listed = json.loads(run("models", "--json", "--api-url", served.url, "--api-key", key).stdout)
    shown = run("models", "--api-url", served.url, "--api-key", key)

    assert listed["default_model"] == settings.default_model
    by_name = {model["name"]: model for model in listed["models"]}
    assert set(by_name) == set(CATALOGUE)
    for name, spec in CATALOGUE.items():
        model, prices = by_name[name], prices_of(name, settings)
        assert (model["context_limit"], model["default_budget"]) == (spec.context_limit, spec.default_budget)
        assert model["prices"]["rates"]["input"] == float(prices.rates.input)
        assert model["prices"]["rates"]["cache_write_1h"] == float(prices.rates.cache_write_1h)
        assert (model["prices"]["source"], model["prices"]["priced_as"]) == (prices.source, prices.priced_as)
    sonnet = prices_of("claude-sonnet-5-5", settings)
    [row] = [
        line.strip() for line in shown.stdout.splitlines() if line.strip().startswith("plimsoll-emulator (default)")
    ]
    assert row.split()[2:7] == ["1,000,000", "400,000", f"${sonnet.rates.input:g}", f"${sonnet.rates.output:g}",
                                f"${sonnet.rates.cache_write_5m:g}"]  # fmt: skip
    assert row.endswith(f"{sonnet.source}, as claude-sonnet-5-5")


def test_the_models_route_needs_a_key(served: Served) -> None:
    with PlimsollClient(served.url, None) as client, pytest.raises(ApiError) as refused:
        client.models()
    assert refused.value.status_code == 401


def test_tenant_limits_are_set_shown_listed_enforced_and_reset(
    served: Served, database: Database, database_url: str
) -> None:
    name = f"acme-{uuid.uuid4().hex[:8]}"
    key = json.loads(run("tenant", "create", name, "--json", "--database-url", database_url).stdout)["api_key"]

    changed = run(
        "tenant", "limits", name, "--max-steps", "30", "--max-input-tokens", "1000000", "--max-queued-jobs", "0",
        "--max-document-bytes", "5000000", "--database-url", database_url,
    )  # fmt: skip
    shown = json.loads(run("tenant", "limits", name, "--json", "--database-url", database_url).stdout)
    listing = run("tenant", "list", "--database-url", database_url).stdout.splitlines()
    headers = {"X-API-Key": key}
    check = httpx.post(f"{served.url}/v1/jobs/check", headers=headers, json={"instruction": "Read."}).json()
    uploaded = httpx.post(f"{served.url}/v1/documents", headers=headers, json={"name": "a.txt", "content": "Alpha."})
    ids = [uploaded.json()["documents"][0]["id"]]
    over = httpx.post(
        f"{served.url}/v1/jobs",
        headers=headers,
        json={"instruction": "Read.", "document_ids": ids, "max_input_tokens": 1_000_001},
    )

    assert changed.exit_code == 0, changed.output
    assert "the operator's limit for this tenant: plimsoll tenant limits --max-steps" in changed.stdout
    assert shown["max_steps"] == {"value": 30, "where": "the operator's limit for this tenant: plimsoll tenant "
                                  "limits --max-steps"}  # fmt: skip
    assert (shown["max_queued_jobs"]["value"], shown["max_document_bytes"]["value"]) == (0, 5_000_000)
    assert any(line.split()[1:2] == [name] and line.split()[-6:] == ["default", "30", "1,000,000", "none", "5,000,000",
                                                                     "default"]
               for line in listing)  # fmt: skip
    assert (check["max_steps"], check["max_input_tokens"]) == (30, 1_000_000)
    assert over.status_code == 422 and "plimsoll tenant limits --max-input-tokens" in over.json()["detail"]

    reset = run("tenant", "limits", name, "--reset", "--max-steps", "40", "--database-url", database_url)
    with database.session() as session:
        limits = limits_of(session.get(Tenant, tenant_named(session, name).id), get_settings())
    assert reset.exit_code == 0
    assert (limits.max_steps.value, limits.max_input_tokens.value) == (40, get_settings().max_input_tokens_per_job)
    assert limits.max_input_tokens.where == "the operator's setting PLIMSOLL_MAX_INPUT_TOKENS_PER_JOB"


def test_tenant_limits_out_of_range_or_for_no_tenant_are_refused(database_url: str) -> None:
    name = f"acme-{uuid.uuid4().hex[:8]}"
    run("tenant", "create", name, "--database-url", database_url)

    too_few = run("tenant", "limits", name, "--max-steps", "0", "--database-url", database_url)
    too_many = run("tenant", "limits", name, "--max-steps", "100001", "--database-url", database_url)
    nobody = run("tenant", "limits", "nobody-at-all", "--max-steps", "5", "--database-url", database_url)

    assert too_few.exit_code == 2 and "--max-steps" in too_few.stderr
    assert too_many.exit_code == 1 and "max_steps_per_job must be between 1 and 100,000" in too_many.stderr
    assert nobody.exit_code == 1 and "no tenant named 'nobody-at-all'" in nobody.stderr

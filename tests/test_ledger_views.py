"""The ledger as people see it: a job's cost with its subagents (each its own line) in the job view, costs in the
job list, a tenant's spending by day, month, model and job over a date range (GET /v1/usage), and the same in
dollars from the command line (plimsoll usage, plimsoll jobs, the watch panel)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from rich.console import Console
from typer.testing import CliRunner

from api.schemas import JobView
from cli.main import app as cli
from cli.watch import job_panel
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.ledger import ChargeKind, record_charge
from models.pricing import prices_of
from models.settings import Settings
from models.tables import Job, JobKind
from models.tenants import create_tenant
from tests.support_api import Caller, serve_api
from tests.support_cli import Served, serving

TODAY = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
EARLIER = TODAY - timedelta(days=40)  # another month


def charge(database: Database, job_id: int, kind: ChargeKind, tokens: int, at: datetime) -> Decimal:
    settings = Settings()
    with database.session() as session:
        job = session.get_one(Job, job_id)
        made = record_charge(
            session,
            job,
            step=job.step,
            kind=kind,
            prices=prices_of(job.model, settings),
            uncached=0 if kind == ChargeKind.REFUSED else tokens,
            written=0,
            read=0 if kind == ChargeKind.REFUSED else tokens * 3,
            output=0 if kind == ChargeKind.REFUSED else tokens // 10,
            cache_ttl_seconds=settings.cache_ttl_seconds,
        )
        made.created_at = at
        session.flush()
        return made.total_usd


@pytest.fixture
def family(database: Database) -> Iterator[tuple[int, str, int, int, dict[str, Decimal]]]:
    """A tenant's main job with one subagent, charged over two months; another tenant's job charged too."""
    spent: dict[str, Decimal] = {}
    with database.session() as session:
        tenant, key = create_tenant(session, name=f"ledger-{uuid.uuid4().hex[:8]}")
        other, _ = create_tenant(session, name=f"other-{uuid.uuid4().hex[:8]}")
        ids = []
        for owner in (tenant, other):
            document = add_document(session, tenant_id=owner.id, name="a.txt", content="Alpha.")
            ids.append(create_job(session, tenant_id=owner.id, instruction="Read.", document_ids=[document.id]).id)
        main = session.get_one(Job, ids[0])
        sub = create_job(
            session,
            tenant_id=tenant.id,
            instruction="Read a.txt.",
            document_ids=[main.documents[0].document_id],
            kind=JobKind.SUBAGENT,
            parent=main,
        ).id
        tenant_id = tenant.id
    spent["main"] = charge(database, ids[0], ChargeKind.STEP, 2_000, TODAY) + charge(
        database, ids[0], ChargeKind.COMPACTION, 1_000, TODAY
    )
    spent["earlier"] = charge(database, ids[0], ChargeKind.STEP, 500, EARLIER)
    spent["sub"] = charge(database, sub, ChargeKind.STEP, 3_000, TODAY) + charge(
        database, sub, ChargeKind.WASTED, 3_000, TODAY
    )
    spent["refused"] = charge(database, sub, ChargeKind.REFUSED, 0, TODAY)
    spent["other"] = charge(database, ids[1], ChargeKind.STEP, 9_000, TODAY)
    yield tenant_id, key, ids[0], sub, spent


def test_a_main_jobs_cost_includes_its_subagents_each_on_its_own_line(
    database: Database, family: tuple[int, str, int, int, dict[str, Decimal]]
) -> None:
    tenant_id, key, main, sub, spent = family
    with serve_api(database) as api:
        caller = Caller(api.client, tenant_id, key)
        cost = caller.get(f"/v1/jobs/{main}").json()["cost"]
        sub_cost = caller.get(f"/v1/jobs/{sub}").json()["cost"]
        listed = {j["id"]: j["cost_usd"] for j in caller.get("/v1/jobs").json()["items"]}
    whole = spent["main"] + spent["earlier"] + spent["sub"]
    assert spent["refused"] == 0 and whole > 0
    assert cost["total_usd"] == pytest.approx(float(whole))
    assert [(line["job_id"], line["kind"]) for line in cost["jobs"]] == [(main, "main"), (sub, "subagent")]
    assert cost["jobs"][1]["total_usd"] == pytest.approx(float(spent["sub"]))
    assert cost["by_kind"]["wasted"] > 0 and cost["by_kind"]["compaction"] > 0 and cost["by_kind"]["refused"] == 0
    assert cost["requests"] == 5  # the refusal is not a billed request
    split = ("uncached_input_usd", "cache_write_usd", "cache_read_usd", "output_usd")
    assert sum(cost[name] for name in split) == pytest.approx(cost["total_usd"])
    assert sub_cost["total_usd"] == pytest.approx(float(spent["sub"])) and sub_cost["jobs"] == []
    assert listed[main] == pytest.approx(float(whole))


def test_usage_gives_a_tenants_spending_by_day_month_model_and_job_over_a_range(
    database: Database, family: tuple[int, str, int, int, dict[str, Decimal]]
) -> None:
    tenant_id, key, main, _sub, spent = family
    today, earlier = TODAY.date(), EARLIER.date()
    with serve_api(database) as api:
        caller = Caller(api.client, tenant_id, key)
        this_month = caller.get("/v1/usage").json()
        both = caller.get("/v1/usage", params={"from": f"{earlier}", "to": f"{today}"}).json()
        refusals = [
            caller.get("/v1/usage", params={"from": f"{today}", "to": f"{earlier}"}),
            caller.get("/v1/usage", params={"from": "2026-13-01"}),
            caller.get("/v1/usage", params={"from": f"{today - timedelta(days=400)}", "to": f"{today}"}),
        ]
    recent = spent["main"] + spent["sub"]
    assert (this_month["from"], this_month["to"]) == (f"{today.replace(day=1)}", f"{today}")
    assert this_month["total_usd"] == pytest.approx(float(recent))  # neither last month's nor the other tenant's
    assert both["total_usd"] == pytest.approx(float(recent + spent["earlier"]))
    assert [d["period"] for d in both["days"]] == [f"{earlier}", f"{today}"]
    assert [m["period"] for m in both["months"]] == [f"{earlier:%Y-%m}", f"{today:%Y-%m}"]
    assert [(j["job_id"], j["total_usd"]) for j in both["jobs"]] == [(main, pytest.approx(both["total_usd"]))]
    assert [m["model"] for m in both["models"]] == [Settings().default_model]
    assert both["by_kind"]["wasted"] == pytest.approx(this_month["by_kind"]["wasted"])
    assert this_month["by_kind"]["wasted"] > 0
    assert [r.status_code for r in refusals] == [422, 422, 422]
    assert "after" in refusals[0].text and "366 days" in refusals[2].text


@pytest.fixture(scope="module")
def served(database: Database) -> Iterator[Served]:
    with serving(database) as state:
        yield state


def test_the_command_line_shows_dollars(
    database: Database, served: Served, family: tuple[int, str, int, int, dict[str, Decimal]]
) -> None:
    tenant_id, key, main, _sub, spent = family
    options = ["--api-url", served.url, "--api-key", key]
    by_job = CliRunner().invoke(cli, ["usage", "--by", "job", "--from", f"{EARLIER.date()}", *options])
    jobs = CliRunner().invoke(cli, ["jobs", *options])
    bad = CliRunner().invoke(cli, ["usage", "--from", "yesterday", *options])
    whole = spent["main"] + spent["earlier"] + spent["sub"]
    assert by_job.exit_code == 0, by_job.output
    assert f"job {main}" in by_job.output and f"${whole:,.4f}" in by_job.output
    assert f"${spent['sub'] / 2:,.4f}" in by_job.output  # the wasted reply, as its own column
    assert jobs.exit_code == 0 and f"${whole:,.4f}" in jobs.output
    assert bad.exit_code == 2 and "not a date" in bad.output

    with serve_api(database) as api:
        view = JobView.model_validate(Caller(api.client, tenant_id, key).get(f"/v1/jobs/{main}").json())
    console = Console(record=True, width=160)
    console.print(job_panel(view))
    panel = console.export_text()
    assert re.search(rf"Cost +\${whole:,.4f} · ", panel) and f"${spent['sub']:,.4f} of it by subagents" in panel
    assert "x uncached" not in panel

"""The ledger as people see it through the API: a job's cost with its subagents (each its own line) in the job
view, costs in the job list, and a tenant's spending by day, month, model and job over a date range
(GET /v1/usage)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from models.db import Database
from models.settings import Settings
from tests.support_api import Caller, serve_api
from tests.support_ledger import EARLIER, TODAY, Family, family

__all__ = ["family"]  # the fixture


def test_a_main_jobs_cost_includes_its_subagents_each_on_its_own_line(database: Database, family: Family) -> None:
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
    database: Database, family: Family
) -> None:
    tenant_id, key, main, _sub, spent = family
    today, earlier = TODAY.date(), EARLIER.date()
    with serve_api(database) as api:
        caller = Caller(api.client, tenant_id, key)
        before = datetime.now(UTC).date()
        this_month = caller.get("/v1/usage").json()
        after = datetime.now(UTC).date()
        both = caller.get("/v1/usage", params={"from": f"{earlier}", "to": f"{today}"}).json()
        refusals = [
            caller.get("/v1/usage", params={"from": f"{today}", "to": f"{earlier}"}),
            caller.get("/v1/usage", params={"from": "2026-13-01"}),
            caller.get("/v1/usage", params={"from": f"{today - timedelta(days=400)}", "to": f"{today}"}),
            caller.get("/v1/usage", params={"to": "0"}),  # a number is not a day (pydantic would read 1970-01-01)
        ]
    recent = spent["main"] + spent["sub"]
    asked = date.fromisoformat(this_month["last_day"])
    assert before <= asked <= after  # the day it was asked (a run may cross midnight after the charges' day)
    assert this_month["first_day"] == f"{asked.replace(day=1)}"
    assert this_month["total_usd"] == pytest.approx(float(recent))  # neither last month's nor the other tenant's
    assert both["total_usd"] == pytest.approx(float(recent + spent["earlier"]))
    assert [d["period"] for d in both["days"]] == [f"{earlier}", f"{today}"]
    assert [m["period"] for m in both["months"]] == [f"{earlier:%Y-%m}", f"{today:%Y-%m}"]
    assert [(j["job_id"], j["total_usd"]) for j in both["jobs"]] == [(main, pytest.approx(both["total_usd"]))]
    assert [m["model"] for m in both["models"]] == [Settings().default_model]
    assert both["by_kind"]["wasted"] == pytest.approx(this_month["by_kind"]["wasted"])
    assert this_month["by_kind"]["wasted"] > 0
    assert [r.status_code for r in refusals] == [422, 422, 422, 422]
    assert "after" in refusals[0].text and "366 days" in refusals[2].text and "YYYY-MM-DD" in refusals[3].text

"""What the tenant spent, in dollars, on the command line: plimsoll usage, the cost column of plimsoll jobs, and
the watch panel's Cost row (and a cache line that no longer reads as if the cache made the job dearer)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from rich.console import Console
from typer.testing import CliRunner

from api.schemas import JobView
from cli.main import app as cli
from cli.watch import job_panel
from models.db import Database
from tests.support_api import Caller, serve_api
from tests.support_cli import Served, serving
from tests.support_ledger import EARLIER, Family, family

__all__ = ["family"]  # the fixture


@pytest.fixture(scope="module")
def served(database: Database) -> Iterator[Served]:
    with serving(database) as state:
        yield state


def test_the_command_line_shows_dollars(database: Database, served: Served, family: Family) -> None:
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

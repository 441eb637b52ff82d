"""``plimsoll tenant cap``: a tenant's own cap on running jobs, set, listed, back to the default, and refused at
the edge when it is not a whole number of 0 or more. The cap itself at work: tests/test_fair_shares.py."""

from __future__ import annotations

import json
import uuid

from typer.testing import CliRunner, Result

from cli.main import app as cli
from models.db import Database
from models.tables import Tenant
from models.tenants import tenant_named


def operator(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def cap_of(database: Database, name: str) -> int | None:
    with database.session() as session:
        tenant: Tenant = tenant_named(session, name)
        return tenant.max_running_jobs


def test_a_tenants_cap_is_set_listed_and_reset(database: Database, database_url: str) -> None:
    name = f"acme-{uuid.uuid4().hex[:8]}"
    assert operator("tenant", "create", name, "--database-url", database_url).exit_code == 0
    assert cap_of(database, name) is None  # the setting's

    capped = operator("tenant", "cap", name, "3", "--database-url", database_url)
    assert (capped.exit_code, capped.stderr.strip()) == (0, f"Running jobs of tenant '{name}': 3.")
    assert cap_of(database, name) == 3
    listed = json.loads(operator("tenant", "list", "--json", "--database-url", database_url).stdout)
    assert [row["max_running_jobs"] for row in listed if row["name"] == name] == [3]

    unlimited = operator("tenant", "cap", name, "0", "--json", "--database-url", database_url)
    assert json.loads(unlimited.stdout) == {"name": name, "max_running_jobs": 0}
    table = operator("tenant", "list", "--database-url", database_url).stdout
    assert any(name in line and "none" in line for line in table.splitlines())

    reset = operator("tenant", "cap", name, "--default", "--database-url", database_url)
    assert reset.exit_code == 0 and "the default" in reset.stderr
    assert cap_of(database, name) is None


def test_a_cap_that_is_not_a_whole_number_of_0_or_more_is_refused(database: Database, database_url: str) -> None:
    name = f"acme-{uuid.uuid4().hex[:8]}"
    operator("tenant", "create", name, "--database-url", database_url)
    for wrong in (["-1"], ["many"], ["2.5"]):
        outcome = operator("tenant", "cap", name, *wrong, "--database-url", database_url)
        assert outcome.exit_code == 2, wrong  # a usage error, before the database is touched
    for wrong in ([], ["3", "--default"]):
        outcome = operator("tenant", "cap", name, *wrong, "--database-url", database_url)
        assert outcome.exit_code == 1 and "either a number of jobs" in outcome.stderr
    assert cap_of(database, name) is None
    unknown = operator("tenant", "cap", "nobody-at-all", "2", "--database-url", database_url)
    assert unknown.exit_code == 1 and "no tenant named 'nobody-at-all'" in unknown.stderr

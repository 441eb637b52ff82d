"""``plimsoll webhooks``: add, list, deliveries, redeliver and remove, through typer's runner against the real API
under uvicorn, delivered by a real Celery worker to a real receiver that checks every signature."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner, Result

from cli.main import app as cli
from models.db import Database
from models.events import EventType
from testbed.stack import environment
from testbed.webhook_receiver import WebhookReceiver
from tests.support import wait_until
from tests.support_api import new_tenant
from tests.support_cli import Served, parse, serving
from tests.support_webhooks import happen

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def served(database: Database) -> Iterator[Served]:
    with environment({"PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE": "true"}), serving(database) as state:
        yield state


def run(served: Served, key: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--api-url", served.url, "--api-key", key])


def test_webhooks_add_list_deliveries_redeliver_remove(database: Database, served: Served, celery_worker: Any) -> None:
    tenant_id, key = new_tenant(database)
    with WebhookReceiver() as receiver:
        added = run(served, key, "webhooks", "add", receiver.url(), "--events", "job.ended,notice")
        assert added.exit_code == 0, added.output
        endpoint_id, secret = added.stdout.split()
        assert secret.startswith("whsec_") and "not shown again" in added.stderr
        receiver.secrets["/hook"] = secret
        listed = run(served, key, "webhooks", "list")
        assert endpoint_id in listed.stdout and "job.ended,notice" in listed.stdout and secret not in listed.stdout

        job_id, _ = happen(database, tenant_id, EventType.ENDED, {"status": "succeeded"})
        receiver.wait_for(1)

        def delivered() -> str | None:
            shown = run(served, key, "webhooks", "deliveries", "--job", str(job_id)).stdout
            return shown if "delivered 200" in shown else None

        shown = wait_until(delivered, 10, "the delivery listed as delivered")
        assert "msg_" in shown and "job.ended" in shown
        delivery_id = shown.splitlines()[1].split()[0]
        again = run(served, key, "webhooks", "redeliver", delivery_id)
        assert again.exit_code == 0 and "queued to be sent again" in again.stderr
        second = receiver.wait_for(2)
        assert second[0].webhook_id == second[1].webhook_id and all(r.verified for r in second)

        def listed_by_hand() -> str | None:
            shown = run(served, key, "webhooks", "deliveries", "--endpoint", endpoint_id).stdout
            return shown if "(by hand)" in shown else None

        by_hand = wait_until(listed_by_hand, 10, "the second attempt listed")
        assert by_hand.count("delivered 200") == 2

        removed = run(served, key, "webhooks", "remove", endpoint_id)
        assert removed.exit_code == 0 and f"Webhook {endpoint_id} removed." in removed.stderr
        assert "No webhooks." in run(served, key, "webhooks", "list").stderr
        assert run(served, key, "webhooks", "remove", endpoint_id).exit_code == 1


def test_webhooks_add_refuses_a_private_address_by_default(database: Database) -> None:
    _, key = new_tenant(database)
    with serving(database) as served:
        refused = run(served, key, "webhooks", "add", "http://127.0.0.1:9/hook", "--events", "job.ended")
    assert refused.exit_code == 1 and "PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE" in refused.stderr


def test_every_command_on_the_webhooks_page_parses_and_is_run_above() -> None:
    """docs/webhooks.md's commands: each parses, and each subcommand it shows is run by a test of this module."""
    page = (ROOT / "docs" / "webhooks.md").read_text(encoding="utf-8")
    commands = [
        shlex.split(line.split("  #", 1)[0])[1:]
        for block in re.findall(r"```sh\n(.*?)```", page, flags=re.S)
        for line in block.splitlines()
        if line.startswith("plimsoll ")
    ]
    this_module = Path(__file__).read_text(encoding="utf-8")
    group: Any = typer.main.get_command(cli)
    assert {argv[1] for argv in commands} == set(group.commands["webhooks"].commands)
    for argv in commands:
        parse(group, argv)
        assert f'"webhooks", "{argv[1]}"' in this_module, f"no test runs plimsoll webhooks {argv[1]}"

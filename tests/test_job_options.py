"""A job's options are defined once (models/options.py): the command's flags carry them, a job keeps them, a
continued job inherits them (but the strategy), and a job ends one way whoever ends it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer

from cli.main import app
from models.db import Database
from models.options import JobOptions
from models.tables import Job, JobStatus
from tests.support_api import Api, serve_api

CHOSEN: dict[str, Any] = {  # each unlike its default
    "budget": 20_000,
    "locale": "cs",
    "strategy": "legacy",
    "safety_net": False,
    "compaction": "off",
    "max_steps": 7,
    "max_input_tokens": 100_000,
}


@pytest.fixture
def api(database: Database) -> Iterator[Api]:
    with serve_api(database) as api:
        yield api


def test_every_option_is_a_flag_of_submit_and_every_kept_one_a_column() -> None:
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    submit = {param.name for param in command.commands["submit"].params}
    assert set(JobOptions.model_fields) <= submit
    assert set(JobOptions.KEPT) == set(JobOptions.model_fields) - {"allow_retired_model"}
    assert set(JobOptions.KEPT) <= set(Job.__table__.columns.keys())


def test_a_continued_job_inherits_the_options_of_the_old_but_its_strategy(api: Api, allow_reproductions: None) -> None:
    caller = api.tenant()
    document = caller.document("a.txt", "Alpha.")
    old = caller.job([document], **CHOSEN)
    assert {name: old[name] for name in ("budget", "locale", "strategy", "safety_net", "compaction")} == {
        name: CHOSEN[name] for name in ("budget", "locale", "strategy", "safety_net", "compaction")
    }
    assert caller.post(f"/v1/jobs/{old['id']}/cancel").status_code == 200

    continued = caller.post(f"/v1/jobs/{old['id']}/continue", json={"instruction": "Go on."})

    assert continued.status_code == 201, continued.text
    new = continued.json()
    assert new["strategy"] == JobOptions().strategy  # a reproduction of an old failure is not carried on
    assert new["compaction"] == CHOSEN["compaction"] and new["safety_net"] == CHOSEN["safety_net"]
    assert (new["budget"], new["locale"]) == (CHOSEN["budget"], CHOSEN["locale"])
    assert new["limits"] == {
        "max_steps": CHOSEN["max_steps"], "max_input_tokens": CHOSEN["max_input_tokens"], "max_cost_usd": 250,
        "wind_down": True,
    }  # fmt: skip


def test_an_option_given_to_a_continuation_wins(api: Api, allow_reproductions: None) -> None:
    caller = api.tenant()
    old = caller.job([caller.document("a.txt", "Alpha.")], **CHOSEN)
    caller.post(f"/v1/jobs/{old['id']}/cancel")

    given = {"compaction": "auto", "max_steps": CHOSEN["max_steps"] + 1, "safety_net": True}
    new = caller.post(f"/v1/jobs/{old['id']}/continue", json={"instruction": "Go on.", **given}).json()

    assert (new["compaction"], new["limits"]["max_steps"], new["safety_net"]) == tuple(given.values())


def test_a_cancelled_job_ends_as_the_runner_ends_one(api: Api) -> None:
    caller = api.tenant()
    job = caller.job([caller.document("a.txt", "Alpha.")])

    cancelled = caller.post(f"/v1/jobs/{job['id']}/cancel").json()

    assert cancelled["status"] == JobStatus.CANCELLED and cancelled["finished_at"] is not None
    with api.database.session() as session:
        stored = session.get(Job, job["id"])
        assert stored is not None
        assert stored.status is JobStatus.CANCELLED  # read back as the enum, not as text
        assert (stored.lease_owner, stored.lease_until) == (None, None)  # the reconciler leaves it be

"""What the worker learns about a model: its limits from the provider's models endpoint (served by the
emulator, read by the official SDK), its calibration across jobs; and a rejection re-planned at most once.
The catalogue follows the installed SDK: its deprecated models are marked and warned about, its retired ones
refused for new jobs (naming the replacement) and kept readable for old ones."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, datetime
from typing import Any, get_args

import pytest
from anthropic.resources.messages.messages import DEPRECATED_MODELS  # type: ignore[attr-defined]  # not exported
from anthropic.types import Model
from openai.types import ChatModel
from sqlalchemy import select

from emulator import EmulatorServer
from models.catalogue import CATALOGUE, lifecycle_warning, retired_refusal
from models.db import Database
from models.errors import InvalidInput
from models.history import append_messages
from models.jobs import create_job, steps_of
from models.options import JobOptions
from models.tables import Job, JobKind, JobStatus, ModelFacts, Notice
from models.tenants import create_tenant
from plimsoll.notices import new_chat_notice
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_api import Api, serve_api
from tests.support_worker import new_job, run_to_end, services
from worker.errors import TooLong
from worker.providers import AnthropicProvider
from worker.providers.base import Reply


def test_a_models_first_step_learns_its_limits_and_later_jobs_are_held_to_them(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    emulator_reset.configure(limit=50_000)
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    job_id = new_job(database, {"a.txt": "Alpha."}, model="claude-sonnet-5-5")  # the catalogue says 200,000
    with database.session() as session:
        assert session.get_one(Job, job_id).budget == 160_000
    run_to_end(job_id, services(database, provider, []))

    with database.session() as session:
        facts = session.get_one(ModelFacts, (emulator_reset.base_url, "claude-sonnet-5-5"))
        assert (facts.context_limit, facts.max_output_tokens) == (50_000, 16_000)
        job = session.get_one(Job, job_id)
        assert (job.status, job.hard_limit, job.budget) == (JobStatus.SUCCEEDED, 50_000, 34_000)
        tenant, _ = create_tenant(session, name="limits")
        with pytest.raises(InvalidInput, match="between 1,000 and 34,000 tokens"):
            create_job(
                session,
                tenant_id=tenant.id,
                instruction="Go.",
                options=JobOptions(model="claude-sonnet-5-5", budget=100_000),
            )


class AlwaysTooLong:
    """A model that rejects every request as too long, stating twice the budget as its size."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send(self, *, messages: list[dict[str, Any]], **_: Any) -> Reply:
        self.sent.append(len(messages))
        raise TooLong("prompt is too long: 40000 tokens > 200000 maximum", provider="test", tokens=40_000)


def rounds(count: int, chars: int) -> list[dict[str, Any]]:
    """``count`` stored tool rounds, each reading a result of ``chars`` characters."""
    messages: list[dict[str, Any]] = []
    for n in range(count):
        call = {"type": "tool_use", "id": f"t{n}", "name": "read_document", "input": {"name": f"{n}.txt"}}
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"Line {n}. " * (chars // 8)}
        messages += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    return messages


def test_a_step_plans_again_at_most_once_then_the_job_needs_a_new_chat(database: Database) -> None:
    model = AlwaysTooLong()
    job_id = new_job(database, {"a.txt": "Alpha."}, budget=20_000)
    with database.session() as session:
        append_messages(session, session.get_one(Job, job_id), rounds(8, 8_000), step=1)
    outcomes = run_to_end(job_id, services(database, model, []))

    assert [o.action for o in outcomes] == ["finished"]
    assert len(model.sent) == 2  # the request, then one smaller one; never the same one again
    with database.session() as session:
        job = session.get_one(Job, job_id)
        [step] = steps_of(session, job_id)
        notices = list(session.scalars(select(Notice.text).where(Notice.job_id == job_id)))
    assert job.status == JobStatus.NEEDS_NEW_CHAT
    assert step.rejected_tokens == 40_000 and step.rejected_estimate is not None
    assert step.stop_reason == "TooLong"
    assert notices == [new_chat_notice(job_id)]


@pytest.fixture
def api(database: Database) -> Iterator[Api]:
    with serve_api(database) as api:
        yield api


def sdk_day(text: str) -> date:
    """The SDK's way of writing a day ("November 30th, 2026") as a date."""
    return datetime.strptime(re.sub(r"(\d)(st|nd|rd|th),", r"\1,", text), "%B %d, %Y").date()


def test_the_catalogue_follows_the_installed_sdk() -> None:
    """A model the SDK lists carries the SDK's retirement day; one it no longer lists must be retired here
    ("retired, refuse it", which passes). Only a model neither the SDK knows nor the catalogue retires fails
    ("unknown: add it, or retire it")."""
    listed = set(get_args(get_args(Model)[0]))
    unknown: list[str] = []
    for spec in CATALOGUE.values():
        if spec.provider != "anthropic" or spec.name.startswith("plimsoll-"):
            continue
        if spec.name in listed:
            said = DEPRECATED_MODELS.get(spec.name)
            assert spec.retires == (sdk_day(said) if said else None), f"{spec.name}: the SDK says {said}"
        elif not spec.retired():
            unknown.append(spec.name)
        if spec.replacement is not None:
            assert spec.replacement in listed and spec.replacement not in DEPRECATED_MODELS, spec.replacement
    assert not unknown, f"the installed SDK does not know {unknown}: fix the name, or retire it with a replacement"
    current = [name for name in listed if name not in DEPRECATED_MODELS and name.startswith("claude-sonnet-5")]
    assert any(name in CATALOGUE for name in current)
    openai_listed = set(get_args(ChatModel))
    assert all(
        s.name in openai_listed for s in CATALOGUE.values() if s.provider == "openai" and "emulator" not in s.name
    )


def test_a_deprecated_model_is_warned_about_and_a_retired_one_refused_naming_its_replacement() -> None:
    spec = CATALOGUE["claude-opus-4-5"]
    assert spec.retires == date(2027, 1, 22)
    before, on_the_day = date(2027, 1, 21), date(2027, 1, 22)
    assert lifecycle_warning(spec, before) == (
        "claude-opus-4-5 is deprecated: the provider stops serving it on January 22, 2027. "
        "Choose a current model, e.g. claude-opus-4-8."
    )
    assert retired_refusal(spec, before) is None
    assert lifecycle_warning(spec, on_the_day) == (
        "claude-opus-4-5 was retired on January 22, 2027: the provider no longer serves it."
    )
    assert retired_refusal(spec, on_the_day) == (
        "claude-opus-4-5 was retired on January 22, 2027: the provider no longer serves it. Use claude-opus-4-8 "
        "instead (or set allow_retired_model, --allow-retired-model, to try it anyway)."
    )
    assert lifecycle_warning(CATALOGUE["claude-sonnet-5-5"]) is None


def test_a_job_on_a_retired_model_is_refused_unless_allowed_and_stays_readable(api: Api) -> None:
    caller = api.tenant()
    body = {"instruction": "Read.", "model": "claude-sonnet-4-5", "document_ids": [caller.document("a.txt", "A.")]}
    for route in ("/v1/jobs/check", "/v1/jobs"):
        refused = caller.post(route, json=body)
        assert refused.status_code == 422, refused.text
        assert "claude-sonnet-4-5 was retired on November 30, 2026" in refused.json()["detail"]
        assert "Use claude-sonnet-4-6 instead" in refused.json()["detail"]
    assert caller.get("/v1/jobs").json()["total"] == 0

    allowed = caller.post("/v1/jobs", json={**body, "allow_retired_model": True})
    assert allowed.status_code == 201, allowed.text
    job = caller.get(f"/v1/jobs/{allowed.json()['id']}").json()
    assert job["model"] == "claude-sonnet-4-5"
    assert job["warnings"] == ["claude-sonnet-4-5 was retired on November 30, 2026: the provider no longer serves it."]


def test_a_subagent_follows_its_main_job_onto_a_retired_model(database: Database) -> None:
    with database.session() as session:
        tenant, _ = create_tenant(session, name="retired")
        main = create_job(
            session,
            tenant_id=tenant.id,
            instruction="Go.",
            options=JobOptions(model="claude-sonnet-4-5", allow_retired_model=True),
        )
        child = create_job(
            session,
            tenant_id=tenant.id,
            instruction="Part.",
            options=JobOptions(model=main.model),
            kind=JobKind.SUBAGENT,
            parent=main,
        )
        assert child.model == "claude-sonnet-4-5"
        session.rollback()

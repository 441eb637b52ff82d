"""What the worker learns about a model: its limits from the provider's models endpoint (served by the
emulator, read by the official SDK), its calibration across jobs; and a rejection re-planned at most once.
The catalogue follows the installed SDK: its deprecated models are marked, and a job on one is warned about."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from anthropic.resources.messages.messages import DEPRECATED_MODELS
from anthropic.types import Model
from openai.types import ChatModel
from sqlalchemy import select

from emulator import EmulatorServer
from models.catalogue import CATALOGUE
from models.db import Database
from models.errors import InvalidInput
from models.history import append_messages
from models.jobs import create_job, steps_of
from models.tables import Job, JobStatus, ModelFacts, Notice
from models.tenants import create_tenant
from plimsoll.notices import new_chat_notice
from tests.fixtures_emulator import TEST_API_KEY
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
        facts = session.get_one(ModelFacts, "claude-sonnet-5-5")
        assert (facts.context_limit, facts.max_output_tokens) == (50_000, 16_000)
        job = session.get_one(Job, job_id)
        assert (job.status, job.hard_limit, job.budget) == (JobStatus.SUCCEEDED, 50_000, 34_000)
        tenant, _ = create_tenant(session, name="limits")
        with pytest.raises(InvalidInput, match="between 1,000 and 34,000 tokens"):
            create_job(session, tenant_id=tenant.id, instruction="Go.", model="claude-sonnet-5-5", budget=100_000)


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


def test_the_catalogue_marks_what_the_installed_sdk_deprecates() -> None:
    listed = set(get_args(get_args(Model)[0]))
    for spec in CATALOGUE.values():
        if spec.provider == "anthropic" and not spec.name.startswith("plimsoll-"):
            assert spec.name in listed, f"{spec.name} is not a model the installed SDK knows"
            assert spec.retires == DEPRECATED_MODELS.get(spec.name), spec.name
    current = [name for name in listed if name not in DEPRECATED_MODELS and name.startswith("claude-sonnet-5")]
    assert any(name in CATALOGUE for name in current)
    openai_listed = set(get_args(ChatModel))
    assert all(
        s.name in openai_listed for s in CATALOGUE.values() if s.provider == "openai" and "emulator" not in s.name
    )


def test_a_job_on_a_deprecated_model_is_warned_about(database: Database) -> None:
    from api.views import job_view

    with database.session() as session:
        job = session.get_one(Job, new_job(database, {"a.txt": "Alpha."}, model="claude-sonnet-4-5"))
        warnings = job_view(session, job).warnings
    assert warnings == [
        "claude-sonnet-4-5 is deprecated: the provider stops serving it on November 30th, 2026. Choose a current model."
    ]

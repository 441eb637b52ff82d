"""Who answers a job: the bundled emulator or a real provider, by the rules of models/endpoints.py, with the default
settings (the suite's own opt-in, PLIMSOLL_REAL_MODELS_ON_EMULATOR, is taken away here). Every job records its
endpoint, every view of it says "emulator" where the emulator answered, and nothing learned at one endpoint is
used at another."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import pytest
from sqlalchemy import select

from emulator import EmulatorConfig, EmulatorServer
from models.catalogue import model_spec
from models.db import Database
from models.endpoints import Endpoint, NoRoute, api_key_for, endpoint_for, routes
from models.settings import Settings
from models.tables import Job, JobStatus, ModelFacts
from testbed.stack import environment
from tests.support import DEFAULT_ROUTING
from tests.support_api import serve_api
from tests.support_worker import run_to_end
from worker.admission import Ticket
from worker.names import RATE_LIMIT_KEYS
from worker.services import make_services

REAL_KEY = "sk-ant-api03-" + "k" * 24
SONNET = "claude-sonnet-5-5"  # the catalogue: a 200,000-token window


def settings(**values: Any) -> Settings:
    """Settings from these values alone: no environment, no .env."""
    with patch.dict(os.environ, {}, clear=True):
        return Settings(_env_file=None, **values)


@contextmanager
def routed(**values: str) -> Iterator[None]:
    """The service's settings (the environment, as in production) with the default routing and ``values``."""
    with environment(DEFAULT_ROUTING | values):
        yield


def test_a_real_model_without_a_key_is_refused_naming_the_variable_to_set() -> None:
    bundled = "http://127.0.0.1:8765"
    with pytest.raises(NoRoute, match=r"no Anthropic key is set: set ANTHROPIC_API_KEY \(or PLIMSOLL_ANTHROPIC_API"):
        endpoint_for(model_spec(SONNET), settings(emulator_url=bundled))
    with pytest.raises(NoRoute, match="set OPENAI_API_KEY"):
        endpoint_for(model_spec("gpt-5.5"), settings(emulator_url=bundled))
    with pytest.raises(NoRoute, match="set PLIMSOLL_EMULATOR_URL"):
        endpoint_for(model_spec("plimsoll-emulator"), settings())


def test_the_sdks_own_variables_route_a_real_model_and_the_plimsoll_names_win(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith(("PLIMSOLL_", "ANTHROPIC_", "OPENAI_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-" + "o" * 30)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://proxy.example/v1/")
    from_sdk_names = Settings(_env_file=None)
    anthropic = endpoint_for(model_spec(SONNET), from_sdk_names)
    assert anthropic == Endpoint("anthropic", "https://api.anthropic.com", emulator=False)
    assert api_key_for(anthropic, from_sdk_names) == REAL_KEY
    assert endpoint_for(model_spec("gpt-5.5"), from_sdk_names).base_url == "https://proxy.example/v1"

    monkeypatch.setenv("PLIMSOLL_ANTHROPIC_API_KEY", "sk-ant-plimsoll-" + "p" * 20)
    monkeypatch.setenv("PLIMSOLL_OPENAI_BASE_URL", "https://other.example/v1")
    both = Settings(_env_file=None)
    assert api_key_for(endpoint_for(model_spec(SONNET), both), both).startswith("sk-ant-plimsoll-")
    assert endpoint_for(model_spec("gpt-5.5"), both).base_url == "https://other.example/v1"
    shown = {route.provider: route for route in routes(both, env_file="/nonexistent")}
    assert (shown["Anthropic"].key, shown["Anthropic"].key_from) == ("sk-ant-…pppp", "PLIMSOLL_ANTHROPIC_API_KEY")
    assert (shown["OpenAI"].endpoint, shown["OpenAI"].endpoint_from) == (
        "https://other.example/v1",
        "PLIMSOLL_OPENAI_BASE_URL",
    )
    assert REAL_KEY not in repr(shown) and "pppppppppp" not in repr(shown), "a key is never shown whole"


def test_a_real_model_reaches_the_emulator_only_where_the_operator_asks_and_the_emulator_never_gets_a_real_key() -> (
    None
):
    bundled = "http://127.0.0.1:8765/"
    asked = settings(emulator_url=bundled, real_models_on_emulator=True, anthropic_api_key=REAL_KEY)
    on_emulator = endpoint_for(model_spec(SONNET), asked)
    assert on_emulator == Endpoint("anthropic", "http://127.0.0.1:8765", emulator=True)
    assert api_key_for(on_emulator, asked) == "emulator"
    assert endpoint_for(model_spec("gpt-5.5"), asked).base_url == "http://127.0.0.1:8765/v1"

    pointed = settings(emulator_url=bundled, anthropic_base_url="http://127.0.0.1:8765")
    assert endpoint_for(model_spec(SONNET), pointed).emulator
    overridden = settings(emulator_url=bundled, models={SONNET: {"base_url": "emulator"}})
    assert endpoint_for(model_spec(SONNET, overridden.models), overridden).emulator
    own = settings(anthropic_api_key=REAL_KEY, models={SONNET: {"base_url": "http://gpu-box:8000"}})
    assert endpoint_for(model_spec(SONNET, own.models), own) == Endpoint("anthropic", "http://gpu-box:8000", False)
    assert endpoint_for(model_spec("plimsoll-emulator"), asked).emulator


def test_a_job_records_its_endpoint_and_every_view_says_emulator_where_the_emulator_answered(
    database: Database, emulator: EmulatorServer
) -> None:
    with routed(PLIMSOLL_EMULATOR_URL=emulator.base_url), serve_api(database) as api:
        caller = api.tenant()
        document = caller.document(f"a-{uuid.uuid4().hex[:6]}.txt", "Alpha.")
        refused = caller.post("/v1/jobs", json={"instruction": "Go.", "document_ids": [document], "model": SONNET})
        assert refused.status_code == 422
        assert "set ANTHROPIC_API_KEY" in refused.json()["detail"]

        created = caller.job([document], model="plimsoll-emulator")
        host = emulator.base_url.removeprefix("http://")
        assert (created["endpoint"], created["emulator"]) == (host, True)
        assert caller.get("/v1/jobs").json()["items"][0]["emulator"] is True
        check = caller.post("/v1/jobs/check", json={"instruction": "Go.", "document_ids": [document]}).json()
        assert (check["endpoint"], check["emulator"]) == (host, True)

    with routed(PLIMSOLL_EMULATOR_URL=emulator.base_url, ANTHROPIC_API_KEY=REAL_KEY), serve_api(database) as api:
        caller = api.tenant()
        document = caller.document(f"b-{uuid.uuid4().hex[:6]}.txt", "Beta.")
        real = caller.job([document], model=SONNET)
        assert (real["endpoint"], real["emulator"], real["provider"]) == ("api.anthropic.com", False, "anthropic")


def test_what_the_emulator_taught_about_a_model_never_applies_at_the_real_endpoint(database: Database) -> None:
    with (
        EmulatorServer(EmulatorConfig(limit=1_000_000)) as bundled,
        # stands in for api.anthropic.com, whose tokenizer counts more than the emulator's for the same text
        EmulatorServer(EmulatorConfig(limit=200_000, count_scale=1.3)) as real_api,
    ):
        with routed(PLIMSOLL_EMULATOR_URL=bundled.base_url, PLIMSOLL_REAL_MODELS_ON_EMULATOR="true"):
            first = _run(database, bundled)
        real_key = {"ANTHROPIC_API_KEY": REAL_KEY, "ANTHROPIC_BASE_URL": real_api.base_url}
        with routed(PLIMSOLL_EMULATOR_URL=bundled.base_url, **real_key):
            with serve_api(database) as api:
                caller = api.tenant()
                document = caller.document(f"c-{uuid.uuid4().hex[:6]}.txt", "Gamma.")
                check = caller.post(
                    "/v1/jobs/check",
                    json={"instruction": "Go.", "document_ids": [document], "model": SONNET, "budget": 900_000},
                )
                assert check.status_code == 422, "the emulator's 1,000,000 window must not be the real API's"
                assert "184,000" in check.json()["detail"]
            second = _run(database, real_api)

    with database.session() as session:
        jobs = {job.id: job for job in session.scalars(select(Job).where(Job.id.in_([first, second])))}
        assert (jobs[first].emulator, jobs[first].hard_limit, jobs[first].status) == (
            True,
            1_000_000,
            JobStatus.SUCCEEDED,
        )
        assert (jobs[second].emulator, jobs[second].hard_limit, jobs[second].status) == (
            False,
            200_000,
            JobStatus.SUCCEEDED,
        )
        assert jobs[second].endpoint == real_api.base_url
        facts = {
            (f.endpoint, f.model): f for f in session.scalars(select(ModelFacts).where(ModelFacts.model == SONNET))
        }
        assert facts[bundled.base_url, SONNET].context_limit == 1_000_000
        assert facts[real_api.base_url, SONNET].context_limit == 200_000
        assert facts[bundled.base_url, SONNET].calibration != facts[real_api.base_url, SONNET].calibration


def _run(database: Database, answering: EmulatorServer) -> int:
    """A job on claude-sonnet-5-5 made through the API and run to its end by the worker's step, as the settings of
    the environment route it; its requests must reach ``answering``."""
    with serve_api(database) as api:
        caller = api.tenant()
        document = caller.document(f"d-{uuid.uuid4().hex[:6]}.txt", "Delta.")
        job_id = int(caller.job([document], model=SONNET)["id"])
    before = answering.stats()["requests"]
    run_to_end(job_id, make_services(lambda *_: None, settings=Settings(database_url=database.url), database=database))
    assert answering.stats()["requests"] > before
    return job_id


def test_rate_limits_learned_from_headers_are_kept_per_endpoint() -> None:
    emulator = Ticket(provider="anthropic", model=SONNET, job_id=1, step=0, endpoint="127.0.0.1:8765")
    real = Ticket(provider="anthropic", model=SONNET, job_id=1, step=0, endpoint="api.anthropic.com")
    assert not set(emulator.keys()) & set(real.keys())
    assert real.keys()[0] == f"{RATE_LIMIT_KEYS}{{anthropic/claude-sonnet@api.anthropic.com}}:limits"

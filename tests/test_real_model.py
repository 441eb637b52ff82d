"""Real providers by configuration alone: `make up` (scripts/up-settings.sh) sends a provider's jobs to its real
API whenever a real key is set without a base URL, to the emulator otherwise, and says which at start. The
block of docs/real-models.md ("With a real model") runs as written, with the emulator standing in for
api.anthropic.com at a base URL of its own (not make up's), so the code path of a real key is the one exercised."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from emulator import EmulatorServer
from models.db import Database
from models.settings import Settings, get_settings
from models.tables import Job, JobStatus
from tests.support_worker import run_to_end, submit
from worker.services import make_services

ROOT = Path(__file__).resolve().parent.parent
REAL_KEY = "sk-ant-test-" + "x" * 20


def up_settings(**environment: str) -> dict[str, str]:
    """The environment scripts/up-settings.sh leaves, and the banner's model lines, from a clean shell."""
    script = (
        'source scripts/up-settings.sh; env; echo "ANTHROPIC_MODEL=$(model_of ANTHROPIC https://api.anthropic.com)"'
    )
    clean = {"PATH": os.environ["PATH"], **environment}
    run = subprocess.run(["bash", "-c", script], cwd=ROOT, env=clean, capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)


def test_without_a_key_both_providers_go_to_the_emulator() -> None:
    settings = up_settings()
    assert settings["PLIMSOLL_ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8765"
    assert settings["PLIMSOLL_OPENAI_BASE_URL"] == "http://127.0.0.1:8765/v1"
    assert settings["ANTHROPIC_MODEL"] == "http://127.0.0.1:8765 (the emulator)"
    assert up_settings(PLIMSOLL_ANTHROPIC_API_KEY="emulator")["PLIMSOLL_ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8765"


def test_a_real_key_without_a_base_url_goes_to_the_real_api_and_says_so() -> None:
    settings = up_settings(PLIMSOLL_ANTHROPIC_API_KEY=REAL_KEY)
    assert "PLIMSOLL_ANTHROPIC_BASE_URL" not in settings  # the SDK's default: api.anthropic.com
    assert settings["ANTHROPIC_MODEL"] == (
        "https://api.anthropic.com (the real API: PLIMSOLL_ANTHROPIC_API_KEY is set)"
    )
    assert settings["PLIMSOLL_OPENAI_BASE_URL"] == "http://127.0.0.1:8765/v1"  # no OpenAI key: the emulator


def test_a_base_url_set_is_kept() -> None:
    settings = up_settings(PLIMSOLL_ANTHROPIC_API_KEY=REAL_KEY, PLIMSOLL_ANTHROPIC_BASE_URL="http://proxy:9000")
    assert settings["PLIMSOLL_ANTHROPIC_BASE_URL"] == "http://proxy:9000"
    assert settings["ANTHROPIC_MODEL"] == "http://proxy:9000 (PLIMSOLL_ANTHROPIC_BASE_URL)"


def real_model_block() -> dict[str, str]:
    page = (ROOT / "docs" / "real-models.md").read_text()
    block = re.search(r"```sh\n(.*?)```", page, re.DOTALL)
    assert block, "docs/real-models.md lost its block"
    return dict(re.findall(r"^export (PLIMSOLL_\w+)=(\S+)", block.group(1), re.MULTILINE))


def test_the_real_model_block_runs_a_job_through_the_real_key_path(
    database: Database, emulator_reset: EmulatorServer, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    exported = real_model_block()
    assert exported["PLIMSOLL_ANTHROPIC_API_KEY"] == "sk-ant-..."
    exported["PLIMSOLL_ANTHROPIC_API_KEY"] = REAL_KEY
    # make up's settings leave the base URL alone; here the emulator stands in for api.anthropic.com.
    assert "PLIMSOLL_ANTHROPIC_BASE_URL" not in up_settings(**exported)
    for name, value in exported.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PLIMSOLL_ANTHROPIC_BASE_URL", emulator_reset.base_url)
    get_settings.cache_clear()
    request.addfinalizer(get_settings.cache_clear)
    settings = Settings(database_url=database.url)
    assert settings.default_model == exported["PLIMSOLL_DEFAULT_MODEL"]

    job_id = submit(database, {f"real-{uuid.uuid4().hex[:6]}.txt": "Alpha."}, enqueue=False, model=None)
    run_to_end(job_id, make_services(lambda *_: None, settings=settings, database=database))

    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert (job.status, job.model, job.provider) == (JobStatus.SUCCEEDED, "claude-sonnet-5-5", "anthropic")
    assert emulator_reset.stats()["requests"] >= 2

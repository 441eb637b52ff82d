"""Real providers by configuration alone. `make up` (scripts/up-settings.sh) starts the emulator for its own
models and sends a real model to its provider's API only with a key (the SDK's variable or Plimsoll's), and its
banner says where each provider's jobs go. The "With a real key" block of docs/real-models.md runs as written up
to the network: the routes it prints, the job it records; then a second emulator stands in for api.anthropic.com
at a base URL of its own, so the code path of a real key is the one exercised to the end."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

from emulator import EmulatorConfig, EmulatorServer
from models.db import Database
from models.settings import Settings
from models.tables import Job, JobStatus
from testbed.stack import environment
from tests.support import DEFAULT_ROUTING
from tests.support_api import serve_api
from tests.support_worker import run_to_end
from worker.services import make_services

ROOT = Path(__file__).resolve().parent.parent
REAL_KEY = "sk-ant-test-" + "x" * 20
VENV_BIN = str(ROOT / ".venv" / "bin")


def up_routes(**environment: str) -> tuple[dict[str, str], str]:
    """The environment scripts/up-settings.sh leaves, and the `plimsoll routes` table make up's banner prints,
    from a clean shell."""
    script = "source scripts/up-settings.sh; env; echo ROUTES; plimsoll routes"
    clean = {"PATH": f"{VENV_BIN}:{os.environ['PATH']}", **environment}
    run = subprocess.run(["bash", "-c", script], cwd=ROOT, env=clean, capture_output=True, text=True, check=True)
    settings, table = run.stdout.split("ROUTES\n", 1)
    return dict(line.split("=", 1) for line in settings.splitlines() if "=" in line), table


def test_without_a_key_make_up_routes_the_emulators_models_to_it_and_refuses_real_ones() -> None:
    settings, table = up_routes()
    assert settings["PLIMSOLL_EMULATOR_URL"] == "http://127.0.0.1:8765"
    assert not {"PLIMSOLL_ANTHROPIC_BASE_URL", "PLIMSOLL_OPENAI_BASE_URL"} & set(settings)
    assert "emulator   http://127.0.0.1:8765 (PLIMSOLL_EMULATOR_URL)" in table
    assert "Anthropic's models are refused: set ANTHROPIC_API_KEY" in table
    assert "OpenAI's models are refused: set OPENAI_API_KEY" in table


def test_a_key_in_the_sdks_own_variable_goes_to_the_real_api_and_the_banner_says_so() -> None:
    _, table = up_routes(ANTHROPIC_API_KEY=REAL_KEY)
    assert re.search(
        r"Anthropic +https://api.anthropic.com \(the SDK's default\) +sk-ant-…xxxx \(ANTHROPIC_API_KEY\)", table
    )
    assert REAL_KEY not in table
    _, table = up_routes(PLIMSOLL_ANTHROPIC_API_KEY=REAL_KEY, ANTHROPIC_BASE_URL="http://proxy:9000")
    assert re.search(r"http://proxy:9000 \(ANTHROPIC_BASE_URL\) +sk-ant-…xxxx \(PLIMSOLL_ANTHROPIC_API_KEY\)", table)


def real_key_block() -> str:
    page = (ROOT / "docs" / "real-models.md").read_text()
    section = page.split("## With a real key", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block, "docs/real-models.md lost its 'With a real key' block"
    return block.group(1)


def test_the_real_key_block_runs_up_to_the_network_then_through_a_stand_in(database: Database) -> None:
    block = real_key_block()
    exported = dict(re.findall(r"^export (\w+)=(\S+)", block, re.MULTILINE))
    assert exported["ANTHROPIC_API_KEY"] == "sk-ant-..."
    script = block.replace("sk-ant-...", REAL_KEY)
    clean = {"PATH": f"{VENV_BIN}:{os.environ['PATH']}", "HOME": os.environ.get("HOME", "/root")}
    shown = subprocess.run(["bash", "-euc", script], cwd=ROOT, env=clean, capture_output=True, text=True, check=True)
    assert re.search(
        r"https://api.anthropic.com \(the SDK's default\) +sk-ant-…xxxx \(ANTHROPIC_API_KEY\)", shown.stdout
    )

    real = {**DEFAULT_ROUTING, **exported, "ANTHROPIC_API_KEY": REAL_KEY}
    with environment(real), serve_api(database) as api:  # the network is needed from here on
        caller = api.tenant()
        job = caller.job([caller.document(f"real-{uuid.uuid4().hex[:6]}.txt", "Alpha.")])
        assert (job["model"], job["endpoint"], job["emulator"]) == ("claude-sonnet-5-5", "api.anthropic.com", False)

    with (
        EmulatorServer(EmulatorConfig()) as stand_in,
        environment({**real, "ANTHROPIC_BASE_URL": stand_in.base_url}),
        serve_api(database) as api,
    ):
        caller = api.tenant()
        job_id = caller.job([caller.document(f"real-{uuid.uuid4().hex[:6]}.txt", "Alpha.")])["id"]
        run_to_end(
            job_id, make_services(lambda *_: None, settings=Settings(database_url=database.url), database=database)
        )
        with database.session() as session:
            ran = session.get_one(Job, job_id)
            assert (ran.status, ran.model, ran.emulator) == (JobStatus.SUCCEEDED, "claude-sonnet-5-5", False)
        assert stand_in.stats()["requests"] >= 2

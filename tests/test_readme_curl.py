"""The curl block of docs/api-cli.md and the README's block that provokes the too-long notice, run as written
(bash, curl, jq) against the real stack: the API under uvicorn, PostgreSQL, a Celery worker and the emulator; their
chapters made by `plimsoll samples chapters`, as the documents say."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator import EmulatorServer
from models.db import Database
from models.tenants import create_tenant
from testbed.stack import api_server

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.usefixtures("celery_worker", "emulator_reset"),
    pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="the block needs curl and jq"),
]


def block_after(words: str, document: str) -> str:
    text = (ROOT / document).read_text()
    section = text.split(words, 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block, f"{document} lost its block after {words!r}"
    return block.group(1)


def run_block(block: str, url: str, key: str, folder: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PLIMSOLL_API_URL": url, "PLIMSOLL_API_KEY": key}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.replace(".venv/bin/", f"{ROOT}/.venv/bin/")],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture
def stack(database: Database, database_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The API's URL and a tenant's key; the README's sample chapters in the working folder."""
    with database.session() as session:
        _, key = create_tenant(session, name=f"readme-{uuid.uuid4().hex[:8]}")
    samples = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "plimsoll"), "samples", "chapters"], cwd=tmp_path, capture_output=True
    )
    assert samples.returncode == 0, samples.stderr
    with api_server(database_url) as url:
        yield url, key


def test_the_curl_block_uploads_submits_watches_reads_notices_and_continues(
    stack: tuple[str, str], tmp_path: Path
) -> None:
    run = run_block(block_after("The same journey with curl", "docs/api-cli.md"), *stack, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    answers = [json.loads(part) for part in re.split(r"(?<=})\n(?=\{)", run.stdout.strip()) if part.startswith("{")]
    finished, continued = answers[0], answers[-1]
    assert finished["status"] == "succeeded" and "NOTE 01-ru.txt" in finished["final_answer"], run.stdout
    assert continued["continued_from"] and continued["status"] in ("queued", "running", "succeeded"), run.stdout


def test_the_readme_block_that_provokes_the_too_long_notice(
    stack: tuple[str, str], tmp_path: Path, emulator_reset: EmulatorServer, allow_reproductions: None
) -> None:
    # The block runs on the service of `make up`, which allows the legacy strategy (scripts/up-settings.sh).
    block = block_after("To see that notice on purpose", "README.md").replace(
        "http://127.0.0.1:8765", emulator_reset.base_url
    )
    run = run_block(block, *stack, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "This conversation is too long for the model to process at once." in run.stdout
    assert "continues job" in run.stderr
    # The new chat finished with a note of every chapter, and none of what the hand-over must not carry (the
    # provider's rejection, whose `max_tokens` the agent once took for a document's name).
    chapters = sorted(path.name for path in (tmp_path / "chapters").glob("*.txt"))
    assert len(chapters) == 6 and all(f"NOTE {name}:" in run.stdout for name in chapters), run.stdout
    assert "max_tokens" not in run.stdout and "unreadable" not in run.stdout, run.stdout

"""Notices name the cause the person can act on: a job stopped for repeating itself under a budget that cannot hold
its results with its notes says so and names a budget that would, and the notice of a budget too small for the
first message names one that fits. Both run on the real stack (the API under uvicorn, a Celery worker, PostgreSQL,
the emulator) through the command line; each named budget is read from the notice and the job submitted again
with it, and that job succeeds."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.stack import api_server
from models.db import Database
from models.tenants import create_tenant

ROOT = Path(__file__).resolve().parent.parent
PLIMSOLL = str(ROOT / ".venv" / "bin" / "plimsoll")
NAMED = re.compile(r"budget of ([\d,]+) tokens or more")

pytestmark = pytest.mark.usefixtures("celery_worker", "emulator_reset")


@pytest.fixture
def cli(database: Database, database_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The command line's environment against the real stack, the README's sample chapters in its folder."""
    with database.session() as session:
        _, key = create_tenant(session, name=f"budgets-{uuid.uuid4().hex[:8]}")
    assert plimsoll({}, tmp_path, "samples", "chapters").returncode == 0
    with api_server(database_url) as url:
        yield {**os.environ, "PLIMSOLL_API_URL": url, "PLIMSOLL_API_KEY": key}


def plimsoll(environment: dict[str, str], folder: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PLIMSOLL, *arguments], cwd=folder, env=environment or None, capture_output=True, text=True, timeout=240
    )


def chapters(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in (folder / "chapters").glob("*.txt"))


def test_a_job_repeating_itself_under_too_small_a_budget_names_one_that_holds_it(
    cli: dict[str, str], tmp_path: Path
) -> None:
    # The trial: the README's quick start first (the emulator's model is then calibrated), then
    # --budget 1500 on the six chapters, which ended "called read_document with the same input 4 times".
    instruction = "Check every chapter against the notes"
    first = plimsoll(cli, tmp_path, "submit", *chapters(tmp_path), "--instruction", instruction, "--wait")
    assert first.returncode == 0, first.stderr
    small = plimsoll(cli, tmp_path, "submit", *chapters(tmp_path), "-i", instruction, "--budget", "1500", "--wait")
    assert small.returncode == 1, small.stdout + small.stderr
    notices = plimsoll(cli, tmp_path, "notices").stdout
    assert "called read_document with the same input 4 times" in notices, notices
    assert "The cause is its budget of 1,500 tokens per request" in notices, notices
    named = int(NAMED.findall(notices)[-1].replace(",", ""))
    assert named > 1_500

    again = plimsoll(cli, tmp_path, "submit", *chapters(tmp_path), "-i", instruction, "--budget", str(named), "--wait")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "succeeded" in again.stdout + again.stderr
    assert all(f"NOTE {Path(name).name}" in again.stdout for name in chapters(tmp_path)), again.stdout


def test_a_budget_too_small_for_the_first_message_names_the_smallest_that_fits(
    cli: dict[str, str], tmp_path: Path
) -> None:
    # The case: --budget 1000 and a long instruction; the first message fits, but not with a result.
    for n in range(3):
        (tmp_path / f"{n}.txt").write_text(f"Text number {n}. " * 100)
    files = [f"{n}.txt" for n in range(3)]
    instruction = "Check each document carefully and note the dates. " * 8
    small = plimsoll(cli, tmp_path, "submit", *files, "-i", instruction, "--budget", "1000", "--wait")
    assert small.returncode == 1, small.stdout + small.stderr
    notices = plimsoll(cli, tmp_path, "notices").stdout
    assert "This job's budget of 1,000 tokens per request is too small for its first message" in notices, notices
    named = int(NAMED.findall(notices)[-1].replace(",", ""))
    assert named > 1_000

    again = plimsoll(cli, tmp_path, "submit", *files, "-i", instruction, "--budget", str(named), "--wait")
    assert again.returncode == 0, again.stdout + again.stderr
    assert all(f"NOTE {name}" in again.stdout for name in files), again.stdout

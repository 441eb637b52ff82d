"""The operator's service commands as real processes: ``migrate`` on a new PostgreSQL database, ``worker`` (with
``--beat``) and ``beat`` on Redis running the reconciler against it, and ``demo`` on its embedded defaults."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from alembic.script import ScriptDirectory
from sqlalchemy import text

from models.db import make_engine
from models.migrate import alembic_config
from testbed.stack import POSTGRES_URL, REDIS_URL, fresh_database
from tests.support import wait_until

ROOT = Path(__file__).resolve().parent.parent
QUEUE_PREFIX = "cli-test-"  # each test's step queue: no other test's worker takes these tasks


@pytest.fixture(scope="module", autouse=True)
def forget_own_queues() -> Iterator[None]:
    """What the worker and beat leave in Redis for their queues (the queues, their bindings, the scheduler's lock)
    goes with the module; the suite's other keys in the same database stay."""
    yield
    with redis.Redis.from_url(REDIS_URL) as client:
        for key in client.scan_iter(f"*{QUEUE_PREFIX}*"):
            client.delete(key)


@pytest.fixture(scope="module")
def empty_database() -> Iterator[str]:
    """A database with no schema at all (fresh_database migrates; this one is emptied again)."""
    with fresh_database(POSTGRES_URL, prefix="plimsoll_cli") as url:
        engine = make_engine(url)
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE"))
            connection.execute(text("CREATE SCHEMA public"))
        engine.dispose()
        yield url


def environment(database_url: str, **more: str) -> dict[str, str]:
    return os.environ | {
        "PLIMSOLL_DATABASE_URL": database_url,
        "PLIMSOLL_BROKER_URL": REDIS_URL,
        "PLIMSOLL_STEP_QUEUE": f"{QUEUE_PREFIX}{uuid.uuid4().hex[:8]}",
        "PLIMSOLL_RECONCILE_EVERY_SECONDS": "1",
        **more,
    }


def plimsoll(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "cli", *args]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_lines(process: subprocess.Popen[str], *wanted: str, seconds: float = 60) -> str:
    """The process's output until every ``wanted`` text has appeared; then it is stopped as Ctrl-C would."""
    seen: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: seen.extend(process.stdout or []), daemon=True)
    reader.start()

    def printed() -> bool:
        assert process.poll() is None, "".join(seen)
        return all(w in "".join(seen) for w in wanted)

    try:
        wait_until(printed, seconds, f"printed {wanted}")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        reader.join(5)
    return "".join(seen)


def test_migrate_brings_an_empty_database_to_the_newest_schema(empty_database: str, tmp_path: Path) -> None:
    outcome = subprocess.run(
        [sys.executable, "-m", "cli", "migrate", "--json"], cwd=tmp_path, env=environment(empty_database),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert outcome.returncode == 0, outcome.stderr
    assert "The database is up to date." in outcome.stderr
    engine = make_engine(empty_database)
    with engine.connect() as connection:
        version = connection.scalar(text("SELECT version_num FROM alembic_version"))
    engine.dispose()
    assert version == ScriptDirectory.from_config(alembic_config(empty_database)).get_current_head()
    assert json.loads(outcome.stdout) == {"revision": version}


def migrate(database_url: str, cwd: Path) -> None:
    """The schema a round needs: the module's database is empty until a test migrates it, and pytest-xdist may
    run any of its tests first, or alone."""
    subprocess.run([sys.executable, "-m", "cli", "migrate"], cwd=cwd, env=environment(database_url),
                   check=True, capture_output=True, timeout=120)  # fmt: skip


@pytest.mark.worker
def test_worker_with_beat_runs_the_reconciler(empty_database: str, tmp_path: Path) -> None:
    migrate(empty_database, tmp_path)
    worker = plimsoll(  # at DEBUG: a round that takes nothing back (no job here) says so only there
        "worker", "--concurrency", "1", "--beat", "--hostname", "journey@%h", "--loglevel", "debug",
        env=environment(empty_database), cwd=tmp_path,
    )  # fmt: skip

    log = wait_for_lines(worker, "ready.", "reconciler round done")  # beat runs it in place (worker/scheduler.py)

    assert worker.returncode == 0, log
    assert "beat: Starting..." in log
    assert f"journey@{socket.gethostname()} ready." in log  # its own node name: two on one machine differ


@pytest.mark.parametrize("command", [("worker",), ("beat",), ("tenant", "list"), ("tenant", "create", "acme")])
def test_without_a_database_setting_the_service_commands_refuse_to_start(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    bare = {k: v for k, v in os.environ.items() if not k.startswith("PLIMSOLL_")}
    outcome = subprocess.run(
        [sys.executable, "-m", "cli", *command], cwd=tmp_path, env=bare, capture_output=True, text=True, timeout=60
    )
    assert outcome.returncode == 1, outcome.stderr
    assert "needs a database: set PLIMSOLL_DATABASE_URL" in outcome.stderr
    assert not (tmp_path / "var").exists()  # no SQLite file made where it ran


@pytest.mark.worker
def test_beat_alone_runs_the_reconciler_on_schedule(empty_database: str, tmp_path: Path) -> None:
    migrate(empty_database, tmp_path)
    beat = plimsoll("beat", "--loglevel", "debug", env=environment(empty_database), cwd=tmp_path)  # as above

    log = wait_for_lines(beat, "reconciler round done")

    assert "beat: Starting..." in log
    assert (tmp_path / "celerybeat-schedule").exists() or any(tmp_path.glob("celerybeat-schedule*"))


@pytest.mark.parametrize("as_json", [False, True])
def test_demo_runs_on_the_embedded_defaults(tmp_path: Path, as_json: bool) -> None:
    outcome = subprocess.run(
        [sys.executable, "-m", "cli", "demo", "--folder", str(tmp_path / "var"), "--chapters", "2",
         "--chars", "1000", "--budget", "10000", *(["--json"] if as_json else [])],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("PLIMSOLL_")},
    )  # fmt: skip

    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    if as_json:
        report = json.loads(outcome.stdout)
        assert (report["status"], report["chapters"], report["chapters_read"]) == ("succeeded", 2, 2)
        assert "2/2" in outcome.stderr  # the progress bar, out of the way of the JSON
    else:
        assert "chapters read and noted correctly" in outcome.stdout
        assert "2 of 2" in outcome.stdout
        table = outcome.stdout[outcome.stdout.index("│ job ") :].splitlines()  # the first row, as docs/running.md shows
        assert "Plimsoll demo" not in outcome.stdout and "succeeded" in table[0]
    assert (tmp_path / "var").is_dir()


def test_routes_says_where_each_providers_jobs_go_and_never_shows_a_key_whole() -> None:
    key = "sk-ant-api03-" + "r" * 30
    environment = {
        "PATH": os.environ["PATH"],
        "ANTHROPIC_API_KEY": key,
        "PLIMSOLL_OPENAI_BASE_URL": "http://127.0.0.1:8765/v1",
        "PLIMSOLL_EMULATOR_URL": "http://127.0.0.1:8765",
    }
    command = [sys.executable, "-m", "cli", "routes", "--json"]
    run = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, check=True)
    routes = {route["provider"]: route for route in json.loads(run.stdout)}
    assert routes["Anthropic"] == {
        "provider": "Anthropic",
        "endpoint": "https://api.anthropic.com",
        "endpoint_from": "the SDK's default",
        "key": "sk-ant-…rrrr",
        "key_from": "ANTHROPIC_API_KEY",
    }
    assert (routes["OpenAI"]["endpoint_from"], routes["OpenAI"]["key"]) == (
        "PLIMSOLL_OPENAI_BASE_URL: the emulator",
        "emulator",
    )
    assert (routes["emulator"]["endpoint"], routes["emulator"]["endpoint_from"]) == (
        "http://127.0.0.1:8765",
        "PLIMSOLL_EMULATOR_URL",
    )
    assert key not in run.stdout

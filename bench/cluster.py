"""The one launcher of the Celery processes the benchmarks run as a real fleet (``bench.fleet``,
``bench.fleet_recovery``, ``bench.chaos``): prefork workers and beat, as ``plimsoll worker`` and compose start them,
each in a process group of its own under a :class:`~bench.chaos_services.Processes`, its output in a log there."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from celery import Celery

from bench.chaos_services import Processes
from models.settings import Settings
from testbed.stack import REDIS_URL
from worker.celery_app import make_celery

STEP_APP = "worker.celery_app:app"
CELERY = [sys.executable, "-m", "celery", "-A", STEP_APP]


def start_worker(
    processes: Processes,
    *,
    queue: str,
    name: str,
    concurrency: int,
    env: Mapping[str, str],
    cwd: Path,
    log: str,
    events: bool = False,
    app: str = STEP_APP,
) -> subprocess.Popen[bytes]:
    """A worker named ``name`` serving ``queue`` with ``concurrency`` pool children (``events``: -E, for Flower) of
    the Celery ``app`` (the step worker's, or bench.noop_chain's)."""
    pool = ["-P", "prefork", "-c", str(concurrency), *(["-E"] if events else [])]
    args = [sys.executable, "-m", "celery", "-A", app, "worker", "-Q", queue, *pool]
    return processes.spawn([*args, "--loglevel=warning", "-n", name], log=log, env=env, cwd=cwd)


def start_beat(
    processes: Processes, *, env: Mapping[str, str], cwd: Path, loglevel: str = "warning"
) -> subprocess.Popen[bytes]:
    """Celery beat (it runs the reconciler), its schedule file in the run's folder."""
    schedule = processes.root / "beat-schedule"
    return processes.spawn(
        [*CELERY, "beat", "-s", str(schedule), f"--loglevel={loglevel}"], log="beat.log", env=env, cwd=cwd
    )


def sender(queue: str) -> Celery:
    """A Celery app of this process on the workers' broker, REDIS_URL (whatever this process's own settings say:
    under pytest-xdist each worker has a Redis database of its own, and the default app's broker is database 0)."""
    return make_celery(Settings(broker_url=REDIS_URL, step_queue=queue))

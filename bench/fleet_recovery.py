"""The fleet's recovery, for ``python -m bench.fleet``: a worker killed with a backlog of steps queued, and a hung
model call.

- **Kill.** Two Celery workers with different hostnames (prefork) and a beat of its own run jobs against the
  emulator, whose answers take a while, so that the workers hold jobs mid-call. Once at least ``queued`` steps wait
  in the broker's queue, one whole worker instance (its main process and its pool children) is killed with
  SIGKILL. Measured: from the kill until every job it held (its active deliveries, as Celery's ``inspect`` listed
  them just before) has been claimed again by a surviving worker (a new lease owner, or the step done).
- **Hang.** The emulator hangs one model call (nothing sent, the connection held open). Measured: from the
  moment the emulator took the hung request until the job was released (its retry counted, its lease given back)
  and until its step was sent again; with the default settings the idle timeout is 120 s.

Both with the default settings, except what the caller passes (a scaled-down test may lower the idle timeout).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import select

from bench.chaos_services import Processes
from bench.cluster import sender, start_beat, start_worker
from bench.goals import RECOVERY_GOAL_SECONDS
from emulator import EmulatorConfig, EmulatorServer
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.options import JobOptions
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus
from models.tenants import create_tenant
from testbed.stack import REDIS_URL, bundled_emulator, fresh_database, worker_environment
from worker.celery_app import recovery_queue
from worker.names import SCHEDULER_LOCK, STEP_TASK

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "fleet-key"
MODEL = "plimsoll-emulator"
HANG_SLACK_SECONDS = 5.0  # to give the call up and store that it failed, after the idle time


@dataclass(frozen=True)
class KillRun:
    queued: int  # steps waiting in the broker when the worker is killed, at least
    latency_seconds: float = 3.0  # each model answer takes this long, so that the workers hold jobs mid-call
    workers: int = 2
    processes: int = 2
    timeout_seconds: float = 300.0


@dataclass(frozen=True)
class KillResult:
    queued_at_kill: int
    unclaimed: int  # jobs whose step it had taken but not claimed yet (their message is lost with it)
    held: int  # jobs the killed worker held (that stayed as they were past one answer's latency after the kill)
    recovered: int  # of those, claimed again by a surviving worker
    seconds: float  # from the kill until the last of them was claimed again
    documented: float  # lease + reconcile interval, as the README states it

    @property
    def met(self) -> bool:
        return self.held > 0 and self.recovered == self.held and self.seconds <= RECOVERY_GOAL_SECONDS


@dataclass(frozen=True)
class HangResult:
    idle_seconds: float
    released: float | None  # from the hung request to the job given back with its retry counted
    resent: float | None  # from the hung request to the step's next request
    finished: str  # the job's state at the end
    # From sending the step to the job given back: at least the idle timeout, however late the hang was seen.
    released_after_send: float | None = None

    @property
    def met(self) -> bool:
        return (
            self.released is not None
            and self.released <= self.idle_seconds + HANG_SLACK_SECONDS
            and self.finished == JobStatus.SUCCEEDED
        )


def measure_kill(run: KillRun) -> KillResult:
    config = EmulatorConfig(latency_seconds=run.latency_seconds)
    with bundled_emulator(config) as emulator, fresh_database(prefix="plimsoll_fleet_kill") as url:
        database = Database(url)
        try:
            return _kill(run, emulator, database, url)
        finally:
            database.dispose()


def _kill(run: KillRun, emulator: EmulatorServer, database: Database, url: str) -> KillResult:
    queue = f"plimsoll-fleet-kill-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS_URL)
    ids = _many_jobs(database, run.queued + 4 * run.workers * run.processes)
    with fleet(emulator, url, queue, workers=run.workers, processes=run.processes, beat=True) as (processes, names):
        app = sender(queue)
        for job_id in ids:
            app.send_task(STEP_TASK, (job_id, 0), queue=queue)
        victim, victim_name = processes[0], names[0]
        owners = _held_when_busy(app, database, victim_name, time.monotonic() + run.timeout_seconds)
        # A job it had taken but not claimed yet (its lease has no owner) is a step message lost with the worker:
        # the reconciler queues it again on the step queue, behind the backlog (reported, not timed here).
        unclaimed = sorted(job for job, (owner, _) in owners.items() if owner is None)
        owners = {job: state for job, state in owners.items() if state[0] is not None}
        queued = int(client.llen(queue))
        killed = time.monotonic()
        os.killpg(victim.pid, signal.SIGKILL)
        claimed = _wait_claimed_again(database, owners, killed + run.timeout_seconds)
    client.close()
    # What the killed worker really held stays as it was past one answer's latency (a delivery of it that was only
    # skipping a job another worker held, or a job a live worker held, moves on sooner).
    stuck = {job for job, at in claimed.items() if at - killed > run.latency_seconds + 2}
    stuck |= set(owners) - set(claimed)  # never claimed again
    seconds = max((claimed.get(job, killed + run.timeout_seconds) - killed for job in stuck), default=0.0)
    settings = Settings()
    return KillResult(
        queued_at_kill=queued,
        unclaimed=len(unclaimed),
        held=len(stuck),
        recovered=len(stuck & set(claimed)),
        seconds=seconds,
        documented=settings.lease_seconds + settings.reconcile_every_seconds,
    )


def _many_jobs(database: Database, count: int) -> list[int]:
    """``count`` one-document jobs of one tenant (their steps are the backlog)."""
    with database.session() as session:
        owner, _ = create_tenant(session, name=f"backlog-{uuid.uuid4().hex[:6]}")
        document = add_document(session, tenant_id=owner.id, name="notes.txt", content="A note.\n" * 50)
        jobs = [
            create_job(
                session,
                tenant_id=owner.id,
                instruction="Read the notes and say what they are about.",
                document_ids=[document.id],
                kind=JobKind.SUBAGENT,
                options=JobOptions(model=MODEL),
            )
            for _ in range(count)
        ]
        return [job.id for job in jobs]


def _held_when_busy(app: Any, database: Database, name: str, deadline: float) -> dict[int, tuple[str | None, int]]:
    """The jobs whose steps the worker ``name`` is running, with their lease owners and steps, once it has claimed
    one of them (a step it has taken but not claimed yet is not running: on a busy machine that takes a while)."""
    while time.monotonic() < deadline:
        active = (app.control.inspect(destination=[name], timeout=2.0).active() or {}).get(name) or []
        jobs = [job for job in (_job_of(task) for task in active) if job is not None]
        owners = _owners(database, jobs)
        if any(owner is not None for owner, _ in owners.values()):
            return owners
        time.sleep(0.2)
    raise TimeoutError(f"{name} never held a job")


def _job_of(task: Mapping[str, Any]) -> int | None:
    """The job of an active task, whether Celery lists its arguments as given or as shown (``job 3, step 1``)."""
    args = task.get("args")
    if isinstance(args, (list, tuple)) and args:
        return int(args[0])
    if isinstance(args, str):
        digits = args.removeprefix("(").removeprefix("[").removeprefix("job ").split(",")[0].strip()
        return int(digits) if digits.isdigit() else None
    return None


def _owners(database: Database, ids: list[int]) -> dict[int, tuple[str | None, int]]:
    with database.session() as session:
        rows = session.execute(select(Job.id, Job.lease_owner, Job.step).where(Job.id.in_(ids))).all()
    return {job_id: (owner, step) for job_id, owner, step in rows}


def _wait_claimed_again(
    database: Database, owners: Mapping[int, tuple[str | None, int]], deadline: float
) -> dict[int, float]:
    """When each job was claimed again: another lease owner than at the kill, or its step done."""
    claimed: dict[int, float] = {}
    while len(claimed) < len(owners) and time.monotonic() < deadline:
        with database.session() as session:
            rows = session.execute(
                select(Job.id, Job.lease_owner, Job.step, Job.status).where(Job.id.in_(list(owners)))
            ).all()
        moment = time.monotonic()
        for job_id, owner, step, status in rows:
            was_owner, was_step = owners[job_id]
            again = (owner is not None and owner != was_owner) or step > was_step or JobStatus(status).finished
            if again and job_id not in claimed:
                claimed[job_id] = moment
        time.sleep(0.25)
    return claimed


def measure_hang(idle_seconds: float | None = None) -> HangResult:
    """One job; its first model call hangs (for far longer than the idle timeout)."""
    idle = idle_seconds if idle_seconds is not None else Settings().request_timeout_seconds
    with bundled_emulator() as emulator, fresh_database(prefix="plimsoll_fleet_hang") as url:
        database = Database(url)
        queue = f"plimsoll-fleet-hang-{uuid.uuid4().hex[:8]}"
        extra = {"PLIMSOLL_REQUEST_TIMEOUT_SECONDS": str(idle_seconds)} if idle_seconds is not None else {}
        try:
            job_id = _many_jobs(database, 1)[0]
            emulator.configure(faults={"script": ["hang"], "hang_seconds": 10 * idle})
            with fleet(emulator, url, queue, workers=2, processes=2, beat=False, extra=extra):
                sent = time.monotonic()
                sender(queue).send_task(STEP_TASK, (job_id, 0), queue=queue)
                deadline = time.monotonic() + 10 * idle + 120
                hung = _when(lambda: _emulator_count(emulator, hung=True) >= 1, deadline)
                released = _when(lambda: _job(database, job_id).retries >= 1, deadline)
                resent = _when(lambda: _emulator_count(emulator, hung=False) >= 1, deadline)
                _when(lambda: JobStatus(_job(database, job_id).status).finished, deadline)
                finished = str(_job(database, job_id).status)
        finally:
            database.dispose()
    return HangResult(
        idle_seconds=idle,
        released=released - hung if released is not None and hung is not None else None,
        resent=resent - hung if resent is not None and hung is not None else None,
        finished=finished,
        released_after_send=released - sent if released is not None else None,
    )


def _emulator_count(emulator: EmulatorServer, *, hung: bool) -> int:
    log = emulator.stats()["log"]
    return sum(1 for record in log if record["route"] == "messages" and (record["fault"] == "hang") == hung)


def _job(database: Database, job_id: int) -> Job:
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


def _when(condition: Any, deadline: float) -> float | None:
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(0.2)
    return None


@contextmanager
def fleet(
    emulator: EmulatorServer,
    url: str,
    queue: str,
    *,
    workers: int,
    processes: int,
    beat: bool,
    extra: Mapping[str, str] | None = None,
) -> Iterator[tuple[list[Any], list[str]]]:
    """``workers`` Celery workers with their own hostnames on ``queue`` (and a beat of its own, which runs the
    reconciler); yields the workers' processes and their names."""
    env = {**worker_environment(url, queue, emulator.base_url, API_KEY), **(extra or {})}
    group = Processes()
    started, names = [], []
    try:
        for slot in range(workers):
            name = f"kill{slot}-{queue}@{os.uname().nodename}"
            log = f"worker{slot}.log"
            started.append(
                start_worker(group, queue=queue, name=name, concurrency=processes, env=env, cwd=ROOT, log=log)
            )
            names.append(name)
        if beat:
            start_beat(group, env=env, cwd=ROOT, loglevel="info")
        yield started, names
    finally:
        group.close()
        client = redis.Redis.from_url(REDIS_URL)
        client.delete(queue, recovery_queue(queue), f"{SCHEDULER_LOCK}:{queue}")
        client.close()

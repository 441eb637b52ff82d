"""``python -m bench.webhooks [--scaled] [--write]``: webhooks to a receiver that is down for the first part of the
run (full: 10 minutes; ``--scaled``: 20 s), with a worker killed by SIGKILL and PostgreSQL restarted meanwhile, and
a second worker killed just after the receiver comes back, in the middle of the catch-up. Goals: every ended job
delivered; one ``webhook-id`` per event (repeats only as retries of that id); delivered within 10 s of the receiver
coming back at the 95th percentile. (The event streams' benchmark is bench/events.py, another's; this one is
webhooks alone.)

Everything is real and separate: a PostgreSQL cluster of the run's own (bench/chaos_services.py: restarting it
disturbs nobody), two prefork Celery workers and beat (the sweep) on a queue of the run's own, and the receiver a
process of its own (testbed/webhook_receiver.py) that checks every signature with the ``standardwebhooks``
library, not running at all while it is down (connections refused). The jobs' ends are recorded by this process
through ``models.events.record`` at a steady rate over the down time, each in its job's transaction as a step
records it: the outbox is what is measured, not the model.

Baseline, side by side: a fixed retry schedule per delivery, as Svix and Standard Webhooks' reference deliver
(at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h), computed for the same events and the same moment the receiver
came back: when each would have been delivered. ``--write`` writes ``bench/results/webhooks.md`` stating the
commit (from a clean tree)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.chaos_services import Postgres, Processes, wait_for_port
from bench.cluster import sender, start_beat, start_worker
from bench.goals import Goal, render_goals
from bench.provenance import header, keep
from bench.report import table
from models.db import Database
from models.events import EventType, record
from models.jobs import create_job
from models.migrate import upgrade
from models.tables import Job, JobStatus, WebhookAttempt, WebhookDelivery
from models.tenants import create_tenant
from models.webhooks import add_endpoint, set_announcer
from testbed.stack import REDIS_URL, environment, free_port
from worker.names import WEBHOOK_DELIVER_TASK

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
GOAL_SECONDS = 10.0
BASELINE_SCHEDULE = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)  # Svix's, each after the last
STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.NEEDS_NEW_CHAT, JobStatus.INCOMPLETE)


@dataclass(frozen=True)
class Run:
    jobs: int
    down_seconds: float
    drain_seconds: float  # how long to wait for the last deliveries after the receiver is back

    @property
    def scaled(self) -> bool:
        return self.down_seconds < 600


FULL = Run(jobs=400, down_seconds=600.0, drain_seconds=120.0)
SCALED = Run(jobs=40, down_seconds=20.0, drain_seconds=40.0)


@dataclass
class Outcomes:
    run: Run
    events: dict[int, float] = field(default_factory=dict)  # event id -> when it was recorded (time.time())
    back_at: float = 0.0  # the receiver listening again
    killed: list[str] = field(default_factory=list)  # what the chaos did, in order
    postgres_restarted: bool = False
    received: list[dict[str, Any]] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    endpoint_id: int = 0
    failures: list[str] = field(default_factory=list)  # jobs this run could not end (a fault of the benchmark)

    def first_delivered(self) -> dict[int, float]:
        """Event id -> when the receiver first took it (a verified 200)."""
        first: dict[int, float] = {}
        for got in sorted(self.received, key=lambda r: r["at"]):
            event_id = got["data"].get("event_id")
            if got["verified"] and got["answered"] == 200 and event_id is not None:
                first.setdefault(int(event_id), got["at"])
        return first

    def ids_per_event(self) -> dict[int, set[str]]:
        ids: dict[int, set[str]] = defaultdict(set)
        for got in self.received:
            if got["data"].get("event_id") is not None:
                ids[int(got["data"]["event_id"])].add(got["webhook_id"])
        return ids

    def delays(self) -> list[float]:
        """For each delivered event: seconds from the receiver coming back (or from the event, if later)."""
        first = self.first_delivered()
        return sorted(max(0.0, at - max(self.back_at, self.events[e])) for e, at in first.items() if e in self.events)

    def baseline_delays(self) -> list[float]:
        """The same, under the baseline's fixed schedule per delivery."""
        delays = []
        for created in self.events.values():
            at = created
            for wait in BASELINE_SCHEDULE:
                at += wait
                if at >= self.back_at:
                    delays.append(at - max(self.back_at, created))
                    break
        return sorted(delays)


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, round(share * len(values) + 0.5) - 1))]


def run(config: Run) -> Outcomes:
    outcomes = Outcomes(config)
    with ExitStack() as stack:
        processes = Processes()
        stack.callback(processes.close)
        # The jobs are only recorded as ended, never run: an emulator's address lets them be created.
        stack.enter_context(
            environment({"PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE": "true", "PLIMSOLL_EMULATOR_URL": "http://127.0.0.1:9"})
        )
        postgres = Postgres(processes)
        postgres.start()
        upgrade(postgres.url)
        database = Database(postgres.url)
        stack.callback(database.dispose)
        queue = f"webhooks-{uuid.uuid4().hex[:10]}"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PLIMSOLL_DATABASE_URL": postgres.url,
            "PLIMSOLL_BROKER_URL": REDIS_URL,
            "PLIMSOLL_LIMITER_URL": REDIS_URL,
            "PLIMSOLL_QUEUE": "celery",
            "PLIMSOLL_STEP_QUEUE": queue,
            "PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE": "true",
        }
        workers = [
            start_worker(
                processes, queue=queue, name=f"w{n}-{queue}@%h", concurrency=2, env=env, cwd=ROOT, log=f"w{n}.log"
            )
            for n in (1, 2)
        ]
        start_beat(processes, env=env, cwd=ROOT)
        app = sender(queue)
        _wait_ready(app, 2)

        def announce(ids: list[int]) -> None:
            for delivery_id in ids:
                app.send_task(WEBHOOK_DELIVER_TASK, (delivery_id,), priority=0)

        set_announcer(announce)
        stack.callback(set_announcer, None)

        port = free_port()
        secrets = processes.root / "secrets.json"
        log = processes.root / "received.jsonl"
        with database.session() as session:
            tenant, _key = create_tenant(session, name=f"bench-webhooks-{uuid.uuid4().hex[:8]}")
            endpoint = add_endpoint(
                session, tenant_id=tenant.id, url=f"http://127.0.0.1:{port}/hook", event_types=["job.ended"]
            )
            outcomes.endpoint_id = endpoint.id
            secrets.write_text(json.dumps({"/hook": endpoint.secret}))
            tenant_id = tenant.id

        began = time.monotonic()
        producer = threading.Thread(target=_end_jobs, args=(database, tenant_id, config, outcomes), daemon=True)
        producer.start()
        _at(began + 0.4 * config.down_seconds)
        processes.kill_group(workers[0])  # the worker and its pool children, SIGKILL
        outcomes.killed.append("worker 1 killed (SIGKILL) while the receiver was down")
        workers.append(
            start_worker(processes, queue=queue, name=f"w3-{queue}@%h", concurrency=2, env=env, cwd=ROOT, log="w3.log")
        )
        _at(began + 0.6 * config.down_seconds)
        postgres.stop()  # an immediate shutdown, as a crash
        time.sleep(min(5.0, 0.1 * config.down_seconds))
        postgres.start()
        outcomes.postgres_restarted = True
        producer.join()
        _at(began + config.down_seconds)
        _wait_ready(app, 2)  # the replacement worker booted: one survives the next kill
        receiver = processes.spawn(
            [sys.executable, "-m", "testbed.webhook_receiver", str(port), str(secrets), str(log)],
            log="receiver.log",
            env=env,
            cwd=ROOT,
        )
        wait_for_port(port, 30, receiver)
        outcomes.back_at = time.time()
        time.sleep(1.0)
        processes.kill_group(workers[1])  # in the middle of the catch-up
        outcomes.killed.append("worker 2 killed (SIGKILL) 1 s after the receiver came back")
        deadline = time.monotonic() + config.drain_seconds
        while time.monotonic() < deadline and len(_read(log)) < len(outcomes.events):
            time.sleep(0.5)
        while time.monotonic() < deadline and _pending(database):
            time.sleep(0.5)
        outcomes.received = _read(log)
        outcomes.statuses, outcomes.attempts = _stored(database)
    return outcomes


def _wait_ready(app: Any, count: int, timeout: float = 120.0) -> None:
    """Until ``count`` workers answer a ping (a worker boots in seconds, or tens of them on a busy machine)."""
    deadline = time.monotonic() + timeout
    while len(app.control.ping(timeout=1.0)) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} workers answer after {timeout:g} s")


def _at(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def _end_jobs(database: Database, tenant_id: int, config: Run, outcomes: Outcomes) -> None:
    """config.jobs jobs ended over the first 90 % of the down time, one at a time, each recorded in its own
    transaction (retried while PostgreSQL is being restarted)."""
    spacing = 0.9 * config.down_seconds / config.jobs
    began = time.monotonic()
    for n in range(config.jobs):
        _at(began + n * spacing)
        give_up = time.monotonic() + 60
        while True:
            try:
                with database.session() as session:
                    status = STATUSES[n % len(STATUSES)]
                    job = create_job(session, tenant_id=tenant_id, instruction="Read.")
                    job.status = status
                    session.flush()
                    event = record(session, job, EventType.ENDED, {"status": status.value})
                    event_id = event.id
                outcomes.events[event_id] = time.time()
                break
            except Exception as error:  # PostgreSQL restarting: the same job is ended again once it is back
                if time.monotonic() > give_up:
                    outcomes.failures.append(f"job {n}: {type(error).__name__}")
                    return
                time.sleep(0.2)


def _read(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _pending(database: Database) -> bool:
    try:
        with database.session() as session:
            return bool(session.scalar(select(func.count()).where(WebhookDelivery.status == "pending")))
    except Exception:
        return True


def _stored(database: Database) -> tuple[dict[str, int], dict[str, int]]:
    with database.session() as session:
        statuses = dict(
            session.execute(select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)).all()
        )
        attempts = dict(
            session.execute(select(WebhookAttempt.outcome, func.count()).group_by(WebhookAttempt.outcome)).all()
        )
        assert session.scalar(select(func.count(Job.id))) is not None
    return {str(k): int(v) for k, v in statuses.items()}, {str(k): int(v) for k, v in attempts.items()}


def goals(outcomes: Outcomes) -> list[Goal]:
    ended = len(outcomes.events)
    delivered = len(outcomes.first_delivered().keys() & outcomes.events.keys())
    twice = sum(1 for ids in outcomes.ids_per_event().values() if len(ids) > 1)
    p95 = percentile(outcomes.delays(), 0.95)
    return [
        Goal(
            "every ended job delivered",
            ended == outcomes.run.jobs and delivered == ended,
            f"{delivered} of {ended}" + (f" ({'; '.join(outcomes.failures)})" if outcomes.failures else ""),
        ),
        Goal("one webhook-id per event", ended > 0 and twice == 0, f"{twice} events with more than one id"),
        Goal(
            f"delivered within {GOAL_SECONDS:g} s of the receiver coming back, 95th percentile",
            p95 <= GOAL_SECONDS,
            f"{p95:.1f} s",
        ),
    ]


def render(outcomes: Outcomes) -> str:
    config = outcomes.run
    command = "python -m bench.webhooks" + (" --scaled" if config.scaled else " --write")
    ours, theirs = outcomes.delays(), outcomes.baseline_delays()
    answered = [r["webhook_id"] for r in outcomes.received if r["answered"] == 200]
    repeats = len(answered) - len(set(answered))
    rows = [
        [name, f"{percentile(values, 0.5):.1f}", f"{percentile(values, 0.95):.1f}", f"{max(values, default=0):.1f}"]
        for name, values in (("Plimsoll (endpoint probed, then flushed)", ours), ("baseline: fixed schedule", theirs))
    ]
    lines = [
        "# Webhooks through a receiver outage, a worker killed and PostgreSQL restarted",
        "",
        header(command),
        "",
        f"{len(outcomes.events)} jobs ended over the first {0.9 * config.down_seconds:g} s of a "
        f"{config.down_seconds:g} s receiver outage (nothing listening); {'; '.join(outcomes.killed)}; "
        f"PostgreSQL {'restarted (immediate shutdown)' if outcomes.postgres_restarted else 'not restarted'} at 60 % "
        "of the outage.",
        "",
        "Seconds from the receiver coming back until each event was delivered:",
        "",
        table(["", "p50", "p95", "max"], rows),
        "",
        table(
            ["stored", "count"],
            [
                *([f"deliveries {k}", v] for k, v in sorted(outcomes.statuses.items())),
                *([f"attempts {k}", v] for k, v in sorted(outcomes.attempts.items())),
                ["requests the receiver took", len(outcomes.received)],
                ["of them repeats of an id already answered (at-least-once)", repeats],
            ],
        ),
        "",
        "## Goals",
        "",
        render_goals(goals(outcomes)),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.webhooks", description=__doc__)
    parser.add_argument("--scaled", action="store_true", help="the scaled-down run the tests make (~20 s outage)")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS / 'webhooks.md'}")
    args = parser.parse_args(argv)
    outcomes = run(SCALED if args.scaled else FULL)
    report = render(outcomes)
    print(report)
    if args.write:
        keep(report, "webhooks.md")
    if not all(goal.met for goal in goals(outcomes)):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

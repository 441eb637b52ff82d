"""Chaos: N concurrent jobs, many with subagents, run by real Celery workers against the emulator while the
harness kill -9's pool children and worker main processes, restarts Redis (no persistence) and stops PostgreSQL,
and the emulator answers 20 % of model requests with 429, 529, 500 or a dropped connection. Then the faults stop
and the harness waits, bounded, for every job to end, and checks every job from the database.

    python -m bench.chaos [--broker redis|rabbitmq|both] [--jobs 40] [--workers 2] [--seconds 90] [--seed 1]

It prints the figures, marks each goal of issue 8 met or NOT MET, and writes bench/results/chaos.md. PostgreSQL
and Redis are its own, on spare ports; on RabbitMQ it uses the shared server (never restarted) with a queue of
its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from bench.chaos_checks import Submitted, check_jobs, unfinished_jobs
from bench.chaos_cluster import Cluster
from bench.chaos_report import render, results_markdown
from bench.chaos_result import CODE_DIR, ChaosConfig, ChaosResult, FaultRecord
from bench.chaos_services import Emulator, Postgres, Processes, Redis, SentrySink
from bench.paid import paid
from bench.provenance import provenance
from demo.chapters import chapters
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.migrate import upgrade
from models.options import JobOptions
from models.tenants import create_tenant
from testbed.stack import environment

RESULTS = CODE_DIR / "bench" / "results" / "chaos.md"
RABBITMQ_URL = os.environ.get("PLIMSOLL_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
INSTRUCTION = "Check each chapter against the notes and report one fact of each."
DELEGATE_GROUP = 3  # a job with 6 documents hands them to 2 subagents; one with 3 reads them itself
JOB_BUDGET = 20_000
EMULATOR_LIMIT = 40_000  # above every job's budget plus the reply's max_tokens (16,000)
# After the chaos, the model's limit shrinks below what Plimsoll learned of it: the jobs then submitted get a
# too-long rejection at their first request (as in tests/test_worker_e2e.py).
SHRUNK_LIMIT = 2_000
TOO_LONG_WAIT_SECONDS = 60.0


_STOP = threading.Event()  # set by SIGTERM or SIGINT: the loops end and everything started is stopped


def _stop(signum: int, _frame: object) -> None:
    _STOP.set()
    raise SystemExit(128 + signum)


def _check_stop() -> None:
    # A signal can arrive inside a database call, which turns it into an error the loops retry; this ends them.
    if _STOP.is_set():
        raise SystemExit(1)


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start of the fault window
    kind: str
    pause: float = 0.0  # how long the killed thing stays down
    slot: int = 0


def plan_faults(config: ChaosConfig, rng: random.Random) -> list[Fault]:
    """The process faults of a run, at seeded random moments inside the window, scaled to its length."""
    window = config.seconds

    def moments(count: int) -> list[float]:
        return [rng.uniform(0.1 * window, 0.8 * window) for _ in range(count)]

    faults = [Fault(at, "kill -9 pool child") for at in moments(max(2, round(window / 10)))]
    faults += [
        Fault(at, "kill -9 worker main process", rng.uniform(3, 6), rng.randrange(config.workers))
        for at in moments(max(1, round(window / 30)))
    ]
    if config.broker == "redis":
        faults += [Fault(at, "restart Redis (no persistence)", rng.uniform(3, 6)) for at in moments(1)]
    faults += [Fault(at, "stop PostgreSQL", rng.uniform(10, 15)) for at in moments(max(1, round(window / 90)))]
    return sorted(faults, key=lambda f: f.at)


def job_plan(config: ChaosConfig, rng: random.Random) -> list[dict[str, str]]:
    """The documents of each job: even jobs 6 (2 subagents), odd ones 3 (read by the job itself)."""
    pool = [*chapters(12, chars=3_000), *chapters(12, chars=6_000)]
    picked = [rng.sample(pool, 2 * DELEGATE_GROUP if i % 2 == 0 else DELEGATE_GROUP) for i in range(config.jobs)]
    return [{c.name: c.text for c in chosen} for chosen in picked]


def run_chaos(config: ChaosConfig, log: bool = True) -> ChaosResult:
    def say(text: str) -> None:
        if log:
            print(f"[chaos {config.broker}] {text}", flush=True)

    # One generator per purpose: the fault schedule stays the same whatever the job plan draws.
    jobs_rng, faults_rng = random.Random(f"{config.seed}:jobs"), random.Random(f"{config.seed}:faults")
    processes = Processes()
    started = time.monotonic()
    sink = SentrySink()
    stack = contextlib.ExitStack()
    try:
        stack.callback(processes.close, keep_logs=config.keep_logs)
        stack.callback(sink.close)
        postgres = Postgres(processes)
        postgres.start()
        upgrade(postgres.url)
        database = Database(postgres.url)
        stack.callback(database.dispose)
        redis = Redis(processes)
        if config.broker == "redis":
            redis.start()
        broker = redis.url if config.broker == "redis" else RABBITMQ_URL
        emulator = Emulator(processes, config.code_dir, _emulator_args(config))
        stack.callback(emulator.close)
        step_queue = f"chaos-{uuid.uuid4().hex[:10]}"
        env = {
            **os.environ,
            "PLIMSOLL_DATABASE_URL": postgres.url,
            "PLIMSOLL_BROKER_URL": broker,
            "PLIMSOLL_QUEUE": "celery",
            "PLIMSOLL_STEP_QUEUE": step_queue,
            "PLIMSOLL_LEASE_SECONDS": str(config.lease_seconds),
            "PLIMSOLL_RECONCILE_EVERY_SECONDS": str(config.reconcile_every_seconds),
            "PLIMSOLL_EMULATOR_URL": emulator.base_url,
            "PLIMSOLL_ANTHROPIC_BASE_URL": emulator.base_url,
            "PLIMSOLL_ANTHROPIC_API_KEY": "chaos",
            "PLIMSOLL_SENTRY_DSN": sink.dsn,
            "PLIMSOLL_SENTRY_ENVIRONMENT": "chaos",
        }
        stack.enter_context(environment({"PLIMSOLL_EMULATOR_URL": emulator.base_url}))  # the jobs made here
        cluster = Cluster(processes, config.code_dir, env, config.workers)
        stack.callback(cluster.close)
        if config.broker == "rabbitmq":
            stack.callback(_delete_rabbitmq_queue, cluster.queue)
        cluster.wait_ready(90)
        result = ChaosResult(config=config, queue=cluster.queue, code=provenance(config.code_dir).short)
        say(f"services up in {time.monotonic() - started:.0f} s; queue {cluster.queue}; logs in {processes.root}")

        window_start = time.monotonic()
        submitter = threading.Thread(
            target=_submit_all,
            args=(database, cluster, job_plan(config, jobs_rng), config, window_start, result),
            daemon=True,
        )
        submitter.start()
        _inject(plan_faults(config, faults_rng), faults_rng, cluster, postgres, redis, window_start, result, say)
        remaining = config.seconds - (time.monotonic() - window_start)
        time.sleep(max(0.0, remaining))
        emulator.configure(faults={"rate": 0.0})
        result.last_fault = max(time.monotonic() - window_start, *(f.ended for f in result.faults))
        say(f"faults stopped at {result.last_fault:.0f} s; waiting up to {config.settle_seconds:.0f} s")
        submitter.join()
        result.all_ended_at = _wait_until_all_ended(database, window_start + result.last_fault + config.settle_seconds)
        if result.all_ended_at is not None:
            result.all_ended_at -= window_start
        _too_long_phase(database, cluster, emulator, config, result)
        result.worker_exits = cluster.supervisor_restarts
        result.checks = check_jobs(database, result.submitted)
        result.paid = paid(database)
        time.sleep(2)  # the SDK sends events from a background thread
        result.sentry = sink.snapshot()
        stats = emulator.stats()
        result.emulator_requests = int(stats["requests"])
        result.emulator_rejections = dict(stats["rejections"])
        result.wall_seconds = round(time.monotonic() - started, 1)
        return result
    finally:
        stack.close()


def _emulator_args(config: ChaosConfig) -> list[str]:
    return [
        "--latency",
        str(config.latency),
        "--delegate-group",
        str(DELEGATE_GROUP),
        "--limit",
        str(EMULATOR_LIMIT),
        "--fault-rate",
        str(config.fault_rate),
        "--fault-kinds",
        "429,529,500,drop",
        "--retry-after",
        "1",
        "--seed",
        str(config.seed),
    ]


def _submit_all(
    database: Database,
    cluster: Cluster,
    plan: list[dict[str, str]],
    config: ChaosConfig,
    window_start: float,
    result: ChaosResult,
) -> None:
    """Jobs arrive spread over the first 70 % of the window, so that faults meet jobs at every stage. A client
    retries while the database is down; the step is enqueued (and retried while the broker is down) after."""
    spacing = 0.7 * config.seconds / max(1, len(plan))
    for index, texts in enumerate(plan):
        time.sleep(max(0.0, window_start + index * spacing - time.monotonic()))
        _submit(database, cluster, texts, result)


def _submit(
    database: Database, cluster: Cluster, texts: dict[str, str], result: ChaosResult, too_long: bool = False
) -> None:
    job_id = _create(database, texts, deadline=time.monotonic() + 60)
    if job_id is None:
        result.submit_failures += 1
        return
    result.submitted.append(Submitted(job_id, texts, too_long))
    if not cluster.enqueue(job_id):
        result.submit_failures += 1


def _too_long_phase(
    database: Database, cluster: Cluster, emulator: Emulator, config: ChaosConfig, result: ChaosResult
) -> None:
    """Jobs the model now rejects as too long: each must end needs_new_chat with one notice, never retried."""
    if config.too_long_jobs <= 0:
        return
    emulator.configure(limit=SHRUNK_LIMIT)
    texts = {c.name: c.text for c in chapters(3, chars=6_000, languages=("en",))}
    first = len(result.submitted)
    for _ in range(config.too_long_jobs):
        _submit(database, cluster, texts, result, too_long=True)
    ids = [s.job_id for s in result.submitted[first:]]
    _wait_until_all_ended(database, time.monotonic() + TOO_LONG_WAIT_SECONDS, ids)
    emulator.configure(limit=EMULATOR_LIMIT)


def _create(database: Database, texts: dict[str, str], deadline: float) -> int | None:
    while True:
        try:
            with database.session() as session:
                tenant, _ = create_tenant(session, name=f"chaos-{uuid.uuid4().hex[:10]}")
                ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
                job = create_job(
                    session,
                    tenant_id=tenant.id,
                    instruction=INSTRUCTION,
                    document_ids=ids,
                    options=JobOptions(budget=JOB_BUDGET),
                )
                return job.id
        except SQLAlchemyError:
            _check_stop()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)


def _inject(
    faults: list[Fault],
    rng: random.Random,
    cluster: Cluster,
    postgres: Postgres,
    redis: Redis,
    window_start: float,
    result: ChaosResult,
    say: Callable[[str], None],
) -> None:
    """Each fault in turn, at its moment (or as soon as the one before is over)."""
    for fault in faults:
        time.sleep(max(0.0, window_start + fault.at - time.monotonic()))
        began = time.monotonic() - window_start
        if fault.kind == "kill -9 pool child":
            detail = cluster.kill_child(rng)
        elif fault.kind == "kill -9 worker main process":
            detail = cluster.kill_worker(fault.slot, fault.pause)
        elif fault.kind.startswith("restart Redis"):
            redis.kill()
            time.sleep(fault.pause)
            redis.start()
            detail = f"down {fault.pause:.1f} s"
        else:
            postgres.stop()
            time.sleep(fault.pause)
            postgres.start()
            detail = f"down {fault.pause:.1f} s"
        ended = time.monotonic() - window_start
        result.faults.append(FaultRecord(fault.kind, round(began, 1), round(ended, 1), detail))
        say(f"{began:5.1f} s  {fault.kind}: {detail}")


def _wait_until_all_ended(database: Database, deadline: float, ids: list[int] | None = None) -> float | None:
    """The moment every job (subagents included; or only jobs ``ids``) had ended, or None if some had not by
    ``deadline``."""
    while time.monotonic() < deadline:
        _check_stop()
        with contextlib.suppress(SQLAlchemyError):
            if unfinished_jobs(database, ids) == 0:
                return time.monotonic()
        time.sleep(1.0)
    return None


def _delete_rabbitmq_queue(name: str) -> None:
    from kombu.connection import Connection

    with contextlib.suppress(Exception), Connection(RABBITMQ_URL, connect_timeout=5) as connection:  # type: ignore[no-untyped-call]
        connection.default_channel.queue_delete(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=("redis", "rabbitmq", "both"), default="both")
    parser.add_argument("--jobs", type=int, default=ChaosConfig.jobs)
    parser.add_argument("--workers", type=int, default=ChaosConfig.workers)
    parser.add_argument("--seconds", type=float, default=ChaosConfig.seconds, help="length of the fault window")
    parser.add_argument("--settle", type=float, default=ChaosConfig.settle_seconds, help="wait bound after faults")
    parser.add_argument("--seed", type=int, default=ChaosConfig.seed)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (path printed)")
    parser.add_argument("--append", type=Path, help="another run's report to append (e.g. on an older commit)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    base = ChaosConfig(
        jobs=args.jobs,
        workers=args.workers,
        seconds=args.seconds,
        settle_seconds=args.settle,
        seed=args.seed,
        keep_logs=args.keep_logs,
    )
    brokers = ("redis", "rabbitmq") if args.broker == "both" else (args.broker,)
    results = []
    for broker in brokers:
        result = run_chaos(replace(base, broker=broker))
        print(render(result), flush=True)
        results.append(result)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    earlier = args.append.read_text() if args.append else None
    args.output.write_text(results_markdown(results, command=_command(args), earlier=earlier))
    print(f"wrote {args.output}")


def _command(args: argparse.Namespace) -> str:
    return (
        f"python -m bench.chaos --broker {args.broker} --jobs {args.jobs} --workers {args.workers} "
        f"--seconds {args.seconds:g} --settle {args.settle:g} --seed {args.seed}"
        + (f" --append {args.append}" if args.append else "")
    )


if __name__ == "__main__":
    main()

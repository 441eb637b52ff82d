"""``python -m bench.budgets [--scaled] [--write]``: issue 37's money goals measured on a real fleet.

Tenants with day budgets and per-job budgets submit jobs with subagents (six documents: two subagents of three;
three: read by the job itself), run by prefork Celery workers (``bench.chaos_cluster``) against the emulator
with latency, on a PostgreSQL and a Redis of the run's own (``bench.chaos_services``); one worker's main process
is killed with SIGKILL (and started again) and PostgreSQL is restarted (an immediate shutdown) mid-run. Full:
3 tenants, 200 jobs, 2 workers x 4 processes, both faults, every job given 300 s to end; ``--scaled`` (the
test's, ~50 s): 2 tenants, 12 jobs, 1 worker x 2 processes, the PostgreSQL restart but no SIGKILL. A killed
worker leaves the steps it had taken but not started (prefetched, or held for a countdown) in Redis's
``unacked`` hash, which Redis gives back only after the broker's visibility timeout (2 x the request timeout +
600 s); the reconciler counts them as still queued (worker/lease.py ``_still_queued``) and does not queue them
again, so their jobs wait that long. Both scaled runs tried with a kill (one worker: it holds every step taken)
left jobs so and could not end within a minute; the full run keeps the kill, and its report lists any jobs left
so (found by this benchmark, not changed by it).
What is measured, and how (``bench.budgets_report`` judges it):

- Ledger vs billing: every charge is matched by its request id to the emulator's billing log (``GET
  /v1/emulator/billing``), priced at the prices the ledger charges; compared per job (subagents are jobs) and
  per tenant, and billed requests no charge names are counted against the ledger: a request in flight in the
  killed worker is billed, but the worker dies before it charges it.
- Overshoot: each main job's ledger spend (its subagents' included) against its ``max_cost_usd``, each
  tenant-day's against its day budget (the tight one at the moment it was raised, and at the end against the
  raised one).
- False stops: a job stopped for money records, in its error, the worst case it asked for and the spent and held
  amounts the reservation refused it with. It was stopped falsely if its budget less those two still held that
  worst case, or if its main job's final ledger spend plus that worst case fits the budget (the ledger only
  grows, so at the stop there was room).
- Wind-down vs hard stop: pairs of jobs with the same documents and the same tight budget (``PAIRS``: jobs that
  read six documents alone, and jobs that hand twelve to two subagents), one with
  ``wind_down`` and one without (a reproduction the workers allow here); the documents each answer covers are
  the NOTE lines carrying the document's sha256 (``demo.run.notes_matching``); for a pair with subagents, the
  documents its subagents' own answers cover are shown beside: a subagent that ends incomplete reaches its main
  job as "The subagent did not finish" without its answer so far (worker/step/subagents.py
  ``delegate_results``), so a wound-down main job reports only what its succeeded subagents found.
- A tenant's day: the last tenant's day budget holds a few requests only. Once Redis shows it cannot hold one
  more and none of the tenant's jobs holds a lease, the benchmark raises it as the operator does
  (``models.tenants.set_limits``, what ``plimsoll tenant limits --daily-usd`` calls); its jobs must then end,
  none failed, none lost (``bench.chaos_checks``).
- Reservation cost: the workers have no switch that runs them without budgets, so "the same run without budgets"
  is the same steps minus the budget calls a step makes: reading its job's standing (the wind-down's look),
  reserving over three scopes and settling. Those calls are timed here, on the run's Redis under the run's load,
  for a tenant of their own (nothing they hold stands in a job's way).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx
import redis
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from bench.budgets_report import Outcomes, Planned, Waited, goals, render
from bench.chaos_checks import Submitted, check_jobs, unfinished_jobs
from bench.chaos_cluster import Cluster
from bench.chaos_services import Emulator, Postgres, Processes, Redis
from demo.chapters import chapters
from models.budgets import Budgets, Scope, job_scope, namespace_of, spent_in_ledger, tenant_scopes
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.limits import tenant_limits
from models.migrate import upgrade
from models.options import JobOptions
from models.settings import Settings
from models.statuses import UNFINISHED
from models.tables import Charge, Job, JobStatus
from models.tenants import create_tenant, set_limits
from testbed.stack import environment
from worker.broker_view import UNACKED, step_of

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "budgets.md"
INSTRUCTION = "Check each chapter against the notes and report one fact of each."
DELEGATE_GROUP = 6  # more documents than six: subagents of six each; six or fewer: read by the job itself
MAX_OUTPUT_TOKENS = 1_000  # a worst case of a few steps' cost, so that a small budget holds a few steps
GENEROUS_JOB_USD = Decimal("1.00")
GENEROUS_DAY_USD = Decimal("100")
TIMED_RESERVATIONS = 300
# Pairs: (how they read, documents of 1,500 characters, budget in USD). A request's worst case is about 0.015 USD
# (1,000 tokens of reply at 10 USD/Mtok, and its input), a step costs a few thousandths: each budget stops the pair
# a few steps before its task is done.
PAIRS = (("alone", 6, Decimal("0.025")), ("subagents", 12, Decimal("0.04")))
LARGEST_WORST_CASE_USD = Decimal("0.03")  # about the most a request of this workload reserves (the stops show)


@dataclass(frozen=True)
class Scale:
    name: str
    tenants: int  # the last one's day budget is spent mid-run
    jobs: int  # main jobs, pairs included
    pairs: int  # wind-down vs hard-stop pairs at a tight budget (two jobs each)
    workers: int
    processes: int  # pool children per worker
    tight_day_usd: Decimal  # the last tenant's day, until raised
    raised_day_usd: Decimal
    kill_at: float | None  # seconds after the jobs are queued (None: no kill; see the module's docstring)
    postgres_at: float
    latency: float = 0.25
    lease_seconds: int = 10
    reconcile_seconds: int = 2
    recheck_seconds: int = 3  # PLIMSOLL_BUDGET_RECHECK_SECONDS: a waiting step looks again this soon
    store_retry_seconds: int = 20  # a dead step's hold lives its call's deadline plus this plus a lease
    wait_seconds: float = 90.0  # bound on the wait for every job to end


FULL = Scale(
    "full", tenants=3, jobs=200, pairs=10, workers=2, processes=4,
    tight_day_usd=Decimal("0.10"), raised_day_usd=GENEROUS_DAY_USD, kill_at=40.0, postgres_at=70.0,
    wait_seconds=300.0,
)  # fmt: skip
SCALED = Scale(
    "scaled", tenants=2, jobs=12, pairs=2, workers=1, processes=2,
    tight_day_usd=Decimal("0.05"), raised_day_usd=GENEROUS_DAY_USD, kill_at=None, postgres_at=10.0,
)  # fmt: skip


def plan_jobs(scale: Scale) -> list[tuple[int, str, dict[str, str], Decimal]]:
    """(tenant index, role, documents, budget) per main job: the pairs (tenant 0), alternately reading alone and
    with subagents, then ordinary jobs round the tenants, even ones with eight documents (two subagents), odd ones
    with three."""
    pool = [*chapters(12, chars=3_000), *chapters(12, chars=6_000)]
    planned: list[tuple[int, str, dict[str, str], Decimal]] = []
    for n in range(scale.pairs):
        how, documents, usd = PAIRS[n % len(PAIRS)]
        texts = {c.name: c.text for c in chapters(documents, chars=1_500)}
        planned += [(0, f"{role} ({how})", texts, usd) for role in ("wind-down", "hard stop")]
    for n in range(scale.jobs - 2 * scale.pairs):
        size = 8 if n % 2 == 0 else 3
        start = (5 * n) % (len(pool) - size)
        texts = {c.name: c.text for c in pool[start : start + size]}
        planned.append(((n + 1) % scale.tenants, "ordinary", texts, GENEROUS_JOB_USD))
    return planned


def run(scale: Scale, *, keep_logs: bool = False) -> Outcomes:
    outcomes = Outcomes(scale_name=scale.name, workers=scale.workers, processes=scale.processes)
    started = time.monotonic()
    with ExitStack() as stack:
        processes = Processes()
        stack.callback(processes.close, keep_logs=keep_logs)
        if keep_logs:
            print(f"logs in {processes.root}", flush=True)
        postgres = Postgres(processes)
        postgres.start()
        upgrade(postgres.url)
        database = Database(postgres.url)
        stack.callback(database.dispose)
        broker = Redis(processes)
        broker.start()
        emulator = Emulator(processes, ROOT, _emulator_args(scale))
        stack.callback(emulator.close)
        env = _environment(scale, postgres.url, broker.url, emulator.base_url)
        stack.enter_context(environment({k: env[k] for k in ("PLIMSOLL_EMULATOR_URL", "PLIMSOLL_ALLOW_REPRODUCTIONS")}))
        cluster = Cluster(processes, ROOT, env, scale.workers, concurrency=scale.processes)
        stack.callback(cluster.close)
        cluster.wait_ready(120)
        budgets = budgets_on(database, broker.url)
        outcomes.tenants = _tenants(database, scale)
        outcomes.planned = _submit(database, scale, outcomes.tenants)
        began = time.monotonic()
        for job in outcomes.planned:
            cluster.enqueue(job.job_id)
        _drive(scale, outcomes, database, budgets, cluster, postgres, began)
        outcomes.ended_all = _wait_until_ended(database, began + scale.wait_seconds)
        outcomes.run_seconds = time.monotonic() - began
        _collect(outcomes, database, emulator)
        outcomes.stranded = _stranded(database, broker.url, cluster.queue)
    outcomes.wall_seconds = time.monotonic() - started
    return outcomes


def _emulator_args(scale: Scale) -> list[str]:
    """Latency; six documents in two subagents; every job's reply (subagents' too) at most MAX_OUTPUT_TOKENS."""
    args = {"--latency": scale.latency, "--delegate-group": DELEGATE_GROUP, "--max-output-tokens": MAX_OUTPUT_TOKENS}
    return [str(part) for pair in args.items() for part in pair]


def _environment(scale: Scale, database_url: str, broker_url: str, emulator_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PLIMSOLL_DATABASE_URL": database_url,
        "PLIMSOLL_BROKER_URL": broker_url,
        "PLIMSOLL_LIMITER_URL": broker_url,  # the budgets' Redis, which this process reads too (not the tests')
        "PLIMSOLL_QUEUE": "celery",
        "PLIMSOLL_STEP_QUEUE": f"budgets-{uuid.uuid4().hex[:10]}",
        "PLIMSOLL_LEASE_SECONDS": str(scale.lease_seconds),
        "PLIMSOLL_RECONCILE_EVERY_SECONDS": str(scale.reconcile_seconds),
        "PLIMSOLL_BUDGET_RECHECK_SECONDS": str(scale.recheck_seconds),
        "PLIMSOLL_STORE_RETRY_SECONDS": str(scale.store_retry_seconds),
        "PLIMSOLL_EMULATOR_URL": emulator_url,
        "PLIMSOLL_ALLOW_REPRODUCTIONS": "true",  # the hard-stop half of each pair: wind_down=false
    }


def budgets_on(database: Database, redis_url: str) -> Budgets:
    with database.session() as session:
        namespace = namespace_of(session)  # the workers' (the same database address)

    def ledger(scope: Scope) -> Decimal:
        with database.session() as session:
            return spent_in_ledger(session, scope)

    return Budgets(redis.Redis.from_url(redis_url), namespace, ledger)


def _tenants(database: Database, scale: Scale) -> list[tuple[int, Decimal]]:
    """Each tenant's id and day budget: the last one's tight, the others' generous."""
    made = []
    with database.session() as session:
        for n in range(scale.tenants):
            tenant, _ = create_tenant(session, name=f"budgets-{n}-{uuid.uuid4().hex[:8]}")
            day = scale.tight_day_usd if n == scale.tenants - 1 else GENEROUS_DAY_USD
            set_limits(session, tenant_id=tenant.id, limits={"daily_usd": day})
            made.append((tenant.id, day))
    return made


def _submit(database: Database, scale: Scale, tenants: list[tuple[int, Decimal]]) -> list[Planned]:
    planned = []
    with database.session() as session:
        for index, role, texts, usd in plan_jobs(scale):
            tenant_id = tenants[index][0]
            ids = [add_document(session, tenant_id=tenant_id, name=n, content=t).id for n, t in texts.items()]
            options = JobOptions(max_cost_usd=usd, wind_down=not role.startswith("hard stop"))
            job = create_job(session, tenant_id=tenant_id, instruction=INSTRUCTION, document_ids=ids, options=options)
            job.max_output_tokens = MAX_OUTPUT_TOKENS
            planned.append(Planned(job.id, tenant_id, role, texts, usd))
    return planned


def _drive(
    scale: Scale,
    outcomes: Outcomes,
    database: Database,
    budgets: Budgets,
    cluster: Cluster,
    postgres: Postgres,
    began: float,
) -> None:
    """The run's events, each once, as their moment comes: the reservations timed, the worker killed, PostgreSQL
    restarted, the tight day raised once its jobs wait."""
    watch = DayWatch(scale, outcomes, database, budgets)

    def timed() -> bool:
        outcomes.reservation_ms.extend(time_reservations(database, budgets))
        return True

    pending: dict[str, Callable[[], bool]] = {
        "timing": lambda: _elapsed(began) >= scale.postgres_at / 2 and timed(),
        "postgres": lambda: _elapsed(began) >= scale.postgres_at and _restart(postgres, outcomes, began),
        "raise": lambda: watch(began),
    }
    if scale.kill_at is not None:
        kill_at = scale.kill_at
        pending["kill"] = lambda: _elapsed(began) >= kill_at and _kill(cluster, outcomes, began)
    deadline = began + scale.wait_seconds
    while pending and time.monotonic() < deadline:
        for name, happened in list(pending.items()):
            with contextlib.suppress(SQLAlchemyError):  # PostgreSQL restarting: the event waits
                if happened():
                    del pending[name]
        if "raise" in pending and _unfinished(database, outcomes.tenants[-1][0]) == 0:
            break  # the tight tenant's jobs all ended without waiting: nothing to raise (a goal NOT MET)
        time.sleep(0.5)


def _elapsed(began: float) -> float:
    return time.monotonic() - began


def _kill(cluster: Cluster, outcomes: Outcomes, began: float) -> bool:
    at = _elapsed(began)
    cluster.kill_worker(0, pause=2.0)
    outcomes.faults.append(f"{at:.0f} s: worker 0's main process killed with SIGKILL, started again 2 s later")
    return True


def _restart(postgres: Postgres, outcomes: Outcomes, began: float) -> bool:
    at = _elapsed(began)
    postgres.stop()
    time.sleep(3.0)
    postgres.start()
    outcomes.faults.append(f"{at:.0f} s: PostgreSQL stopped (immediate shutdown) and started 3 s later")
    return True


def _unfinished(database: Database, tenant_id: int) -> int:
    with database.session() as session:
        ids = list(session.scalars(select(Job.id).where(Job.tenant_id == tenant_id)))
    return unfinished_jobs(database, ids)


class DayWatch:
    """Raises the tight tenant's day once its jobs wait on it: for ``calm`` seconds none of them held a lease,
    nothing was held in the day's budget and its spend did not move (a waiting step looks again sooner)."""

    def __init__(self, scale: Scale, outcomes: Outcomes, database: Database, budgets: Budgets) -> None:
        self.scale, self.outcomes, self.database, self.budgets = scale, outcomes, database, budgets
        self.calm = scale.recheck_seconds + 3.0
        self.since: tuple[float, Decimal] | None = None  # when the calm began, at what spend

    def __call__(self, began: float) -> bool:
        tenant_id, limit = self.outcomes.tenants[-1]
        with self.database.session() as session:
            day = tenant_scopes(tenant_id, tenant_limits(session, tenant_id, Settings()), datetime.now(UTC))[0]
            jobs = list(session.execute(select(Job.status, Job.lease_owner).where(Job.tenant_id == tenant_id)))
        standing = self.budgets.standing(day)
        running = [owner for status, owner in jobs if not JobStatus(status).finished]
        room = limit - standing.spent - standing.held
        if not running or any(running) or standing.held > 0 or room >= LARGEST_WORST_CASE_USD:
            self.since = None
            return False
        if self.since is None or self.since[1] != standing.spent:
            self.since = (time.monotonic(), standing.spent)
            return False
        if time.monotonic() - self.since[0] < self.calm:
            return False
        with self.database.session() as session:
            ledger = spent_in_ledger(session, day)
            set_limits(session, tenant_id=tenant_id, limits={"daily_usd": self.scale.raised_day_usd})
        self.outcomes.waited = Waited(
            at=_elapsed(began), limit=limit, spent=standing.spent, held=standing.held, ledger=ledger,
            jobs=len(running), raised_to=self.scale.raised_day_usd,
        )  # fmt: skip
        return True


def time_reservations(database: Database, budgets: Budgets) -> list[float]:
    """What a step's budget calls take, in ms, ``TIMED_RESERVATIONS`` times: its job's standing, a reservation over
    three scopes, its settling."""
    times = []
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"budgets-timing-{uuid.uuid4().hex[:8]}")
        set_limits(session, tenant_id=tenant.id, limits={"daily_usd": GENEROUS_DAY_USD})
        limits = tenant_limits(session, tenant.id, Settings())
    scopes = [job_scope(tenant.id, 0, GENEROUS_JOB_USD), *tenant_scopes(tenant.id, limits, datetime.now(UTC))]
    for n in range(TIMED_RESERVATIONS):
        ticket = f"timing:{n}"
        start = time.perf_counter()
        budgets.standing(scopes[0])
        if budgets.reserve(ticket, scopes, Decimal("0.01"), hold_seconds=30) is None:
            budgets.settle(ticket, scopes, Decimal("0.001"))
        times.append((time.perf_counter() - start) * 1000)
    return times


def _wait_until_ended(database: Database, deadline: float) -> bool:
    while time.monotonic() < deadline:
        with contextlib.suppress(SQLAlchemyError):
            if unfinished_jobs(database) == 0:
                return True
        time.sleep(1.0)
    return False


def _collect(outcomes: Outcomes, database: Database, emulator: Emulator) -> None:
    response = httpx.get(f"{emulator.base_url}/v1/emulator/billing", timeout=60)
    response.raise_for_status()
    outcomes.billing = response.json()["requests"]
    with database.session() as session:
        outcomes.charges = [
            (c.job_id, c.main_job_id, c.tenant_id, c.kind, c.total_usd, c.request_id, c.created_at)
            for c in session.scalars(select(Charge))
        ]
        outcomes.jobs = {
            job.id: (job.parent_id, job.tenant_id, str(job.status), job.error or "", job.final_answer or "")
            for job in session.scalars(select(Job))
        }
        outcomes.steps = int(session.scalar(select(func.count()).select_from(Charge)) or 0)
    outcomes.checks = check_jobs(database, [Submitted(p.job_id, p.texts, False) for p in outcomes.planned])


def _stranded(database: Database, redis_url: str, queue: str) -> set[int]:
    """Unfinished jobs whose step message sits in the broker's unacked hash (a worker took it and did not ack)."""
    taken = set()
    for envelope in redis.Redis.from_url(redis_url).hvals(UNACKED):
        message, _exchange, routing_key = json.loads(envelope)
        step = step_of(message) if routing_key.startswith(queue) else None
        if step is not None:
            taken.add(step[0])
    with database.session() as session:
        unfinished = set(session.scalars(select(Job.id).where(Job.status.in_(UNFINISHED))))
    return taken & unfinished


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.budgets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scaled", action="store_true", help="the scaled run the tests make")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (path printed)")
    args = parser.parse_args(argv)
    outcomes = run(SCALED if args.scaled else FULL, keep_logs=args.keep_logs)
    report = render(outcomes)
    print(report)
    if args.write:
        RESULTS.write_text(report)
        print(f"wrote {RESULTS}")
    if not all(goal.met for goal in goals(outcomes)):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

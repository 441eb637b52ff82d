"""The fleet's step rate at zero model latency against plain Celery: ``python -m bench.fleet_throughput [--scaled]``.

In one run, on the same Redis broker with the same workers (prefork, the same processes, the step worker's Celery
settings):
- **plain Celery**: chains of no-op tasks (bench/noop_chain.py), as many chains as jobs, as many links as a job
  takes steps, before and after the fleet (the machine is shared: the two are averaged);
- **the model call alone**: the same chains, each task making one call to the same emulator through the step's
  own adapter (the official SDK) with a request of a step's size, and nothing else: no step can go faster;
- **the fleet**: one tenant's burst of jobs against the bundled emulator answering at once, under the default cap
  on a tenant's running jobs, with Celery beat running the reconciler;
- **a backlog**: many jobs on one worker process with a lease shorter than the queue's wait (each reply a few
  hundredths of a second late, so on any machine), so that the reconciler finds queued steps past their deadline.

Each worker process records where its steps' time goes (``plimsoll_step_phase_seconds``: claim, plan, admission,
send, store, enqueue, and the whole task), what its deliveries did (``plimsoll_steps_total``) and, in beat, what
the reconciler queued again; the report reads them from the processes' Prometheus folders. Writes
``bench/results/fleet_throughput.md`` with ``--write`` (from a clean tree: it records the commit).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import func, select, update

from bench.chaos_services import Processes
from bench.cluster import sender, start_beat, start_worker
from bench.goals import Goal, render_goals
from bench.noop_chain import MODEL_CALL_TASK, NOOP_TASK, register, send_chain
from bench.provenance import header, keep
from bench.report import table
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.endpoints import EMULATOR_PATHS
from models.jobs import create_job
from models.options import JobOptions
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus
from models.tenants import create_tenant, set_running_cap
from testbed.stack import REDIS_URL, bundled_emulator, fresh_database, worker_environment
from worker.fairness import priority_lists, step_priority
from worker.lease import deadline
from worker.names import STEP_TASK
from worker.prompts import ROLE
from worker.tenant_cap import take_place
from worker.tools import LIST_DOCUMENTS, READ_DOCUMENT

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
API_KEY = "throughput-key"
MODEL = "plimsoll-emulator"
RATIO_GOAL = 0.5  # the fleet's steps per second against plain Celery's tasks per second
PHASES = ("limits", "claim", "plan", "admission", "send", "store", "enqueue", "task")


@dataclass(frozen=True)
class Workload:
    jobs: int = 30  # the burst, one tenant's, under the default cap
    documents: int = 4  # per job: a job takes documents + 1 steps
    chars: int = 2_000
    workers: int = 2
    processes: int = 2  # per worker
    backlog_jobs: int = 150  # on one worker process, no cap
    backlog_lease_seconds: float = 5.0
    # Each reply of the backlog's run takes this long, so that its queue outlasts the lease on any machine.
    backlog_latency_seconds: float = 0.05
    timeout_seconds: float = 900.0


FULL = Workload()
SCALED = Workload(
    jobs=8, documents=2, backlog_jobs=24, backlog_lease_seconds=3.0, backlog_latency_seconds=0.2, timeout_seconds=300.0
)


@dataclass(frozen=True)
class ChainRun:
    chains: int
    links: int
    wall: float

    @property
    def per_second(self) -> float:
        return self.chains * self.links / self.wall


@dataclass
class FleetRun:
    name: str
    jobs: int
    steps: int  # model calls completed, over all the jobs
    wall: float
    states: dict[str, int]
    phases: dict[str, tuple[int, float]]  # per phase: deliveries timed, seconds in all
    outcomes: dict[str, int]  # deliveries by what they did
    requeued: int  # steps nobody held that the reconciler queued again (their message lost, or only waiting)
    recovered: int  # steps it took back from a delivery past its lease (a worker dead, or a step that slow)
    still_queued: int  # steps past their deadline it left queued, the broker still holding them
    lease_seconds: float
    failures: list[str] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.steps / self.wall if self.wall else 0.0

    @property
    def skipped(self) -> int:
        """Deliveries that ran no step: late or duplicate, or a job over its tenant's cap."""
        return self.outcomes.get("skipped", 0) + self.outcomes.get("waiting_for_slot", 0)


@dataclass
class Result:
    workload: Workload
    chains: list[ChainRun]
    model_calls: ChainRun
    fleet: FleetRun
    backlog: FleetRun

    @property
    def chain_per_second(self) -> float:
        return statistics.mean(c.per_second for c in self.chains)

    @property
    def ratio(self) -> float:
        return self.fleet.per_second / self.chain_per_second

    @property
    def ceiling(self) -> float:
        """The ratio of a chain whose tasks only call the model: the most a step that calls the model can reach."""
        return self.model_calls.per_second / self.chain_per_second


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_throughput", description=__doc__)
    parser.add_argument("--scaled", action="store_true", help="the scaled-down run the tests make")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS / 'fleet_throughput.md'}")
    args = parser.parse_args(argv)
    workload = SCALED if args.scaled else FULL
    report = render(run(workload))
    print(report)
    if args.write:
        keep(report, "fleet_throughput.md")


def run(workload: Workload) -> Result:
    links = workload.documents + 1
    with bundled_emulator() as emulator, fresh_database(prefix="plimsoll_throughput") as url:
        database = Database(url)
        try:
            noop = (NOOP_TASK, ())
            before = chains(workload, links, noop)
            model_calls = chains(workload, links, (MODEL_CALL_TASK, (emulator_url(emulator), step_request(workload))))
            fleet = fleet_run("burst", workload, emulator, database, url)
            after = chains(workload, links, noop)
            backlog = fleet_run("backlog", workload, emulator, database, url, backlog=True)
        finally:
            database.dispose()
    return Result(workload, [before, after], model_calls, fleet, backlog)


def emulator_url(emulator: EmulatorServer) -> str:
    """The emulator's base URL for the Anthropic wire, which its model (MODEL) speaks."""
    return emulator.base_url.rstrip("/") + EMULATOR_PATHS["anthropic"]


def step_request(workload: Workload) -> dict[str, Any]:
    """A request of the size of a job's step halfway through: the instruction, a read call and a chapter."""
    chapter = chapters(1, chars=workload.chars)[0]
    call = {"type": "tool_use", "id": "toolu_1", "name": "read_document", "input": {"name": chapter.name}}
    answer = {"type": "tool_result", "tool_use_id": "toolu_1", "content": chapter.text}
    return {
        "model": MODEL,
        "system": ROLE,
        "messages": [
            {"role": "user", "content": "Check each chapter against the notes and report one fact of each."},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [answer]},
        ],
        "tools": [LIST_DOCUMENTS, READ_DOCUMENT],
        "max_tokens": 1_024,
    }


def chains(workload: Workload, links: int, link: tuple[str, tuple[Any, ...]]) -> ChainRun:
    """``workload.jobs`` chains of ``links`` tasks doing ``link``'s work, at once on the fleet's workers; their
    wall time."""
    queue = f"plimsoll-chain-{uuid.uuid4().hex[:8]}"
    done = f"{queue}:done"
    client = redis.Redis.from_url(REDIS_URL)
    env = worker_environment("postgresql+psycopg://unused@127.0.0.1/unused", queue, "http://unused", API_KEY)
    with closing(Processes()) as processes:
        for slot in range(workload.workers):
            start_worker(
                processes, queue=queue, name=f"noop{slot}-{queue}@%h", concurrency=workload.processes,
                env=env, cwd=ROOT, log=f"noop{slot}.log", app="bench.noop_chain:app",
            )  # fmt: skip
        app = sender(queue)
        register(app)
        send_chain(app, queue=queue, links=2, redis_url=REDIS_URL, key=done, name="warm-up", link=link)
        wait_ended(client, done, 1, time.monotonic() + 120)
        started = time.monotonic()
        for n in range(workload.jobs):
            send_chain(app, queue=queue, links=links, redis_url=REDIS_URL, key=done, name=str(n), link=link)
        wait_ended(client, done, workload.jobs, started + workload.timeout_seconds)
        wall = time.monotonic() - started
    client.delete(done, *priority_lists(queue))
    client.close()
    return ChainRun(workload.jobs, links, wall)


def wait_ended(client: redis.Redis, key: str, chains: int, deadline: float) -> None:
    for _ in range(chains):
        while client.blpop([key], timeout=1) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the no-op chains did not end")


def fleet_run(
    name: str, workload: Workload, emulator: EmulatorServer, database: Database, url: str, *, backlog: bool = False
) -> FleetRun:
    emulator.reset()
    emulator.configure(latency_seconds=workload.backlog_latency_seconds if backlog else 0.0)
    queue = f"plimsoll-throughput-{uuid.uuid4().hex[:8]}"
    jobs = workload.backlog_jobs if backlog else workload.jobs
    lease = workload.backlog_lease_seconds if backlog else Settings().lease_seconds
    env = worker_environment(url, queue, emulator.base_url, API_KEY)
    env["PLIMSOLL_LEASE_SECONDS"] = str(lease)
    env["PLIMSOLL_RECONCILE_EVERY_SECONDS"] = "1" if backlog else env.get("PLIMSOLL_RECONCILE_EVERY_SECONDS", "10")
    metrics = Path(tempfile.mkdtemp(prefix="plimsoll-throughput-metrics-"))
    workers, processes = (1, 1) if backlog else (workload.workers, workload.processes)
    with closing(Processes()) as running:
        folders = []
        for slot in range(workers):
            folder = metrics / f"worker{slot}"
            folder.mkdir()
            folders.append(folder)
            start_worker(
                running, queue=queue, name=f"{name}{slot}-{queue}@%h", concurrency=processes,
                env={**env, "PROMETHEUS_MULTIPROC_DIR": str(folder)}, cwd=ROOT, log=f"worker{slot}.log",
            )  # fmt: skip
        (metrics / "beat").mkdir()
        start_beat(running, env={**env, "PROMETHEUS_MULTIPROC_DIR": str(metrics / "beat")}, cwd=ROOT)
        app = sender(queue)
        [warm_up] = submit(database, workload, 1, cap=None)
        send(app, database, queue, warm_up)
        wait_all(database, [warm_up], time.monotonic() + 300)
        counted = read_metrics([*folders, metrics / "beat"])  # the warm-up's, taken off below
        ids = submit(database, workload, jobs, cap=0 if backlog else None)
        sent = datetime.now(UTC)
        started = time.monotonic()
        for job_id in ids:
            with database.session() as session:  # as the API queues a first step (api/routes/jobs.py)
                # Made in one transaction with the others: its deadline as if it had just been made.
                session.execute(update(Job).where(Job.id == job_id).values(lease_until=deadline(lease)))
                placed = take_place(session, job_id, Settings())
            if placed:
                send(app, database, queue, job_id)
        wait_all(database, ids, started + workload.timeout_seconds)
        with database.session() as session:
            steps = int(session.scalar(select(func.sum(Job.step)).where(Job.id.in_(ids))) or 0)
        totals = settled_metrics([*folders, metrics / "beat"], counted, steps)
    shutil.rmtree(metrics, ignore_errors=True)
    measured = {key: value - counted.get(key, 0.0) for key, value in totals.items()}
    with database.session() as session:
        last = session.scalar(select(func.max(Job.finished_at)).where(Job.id.in_(ids)))
        states = dict(
            session.execute(select(Job.status, func.count()).where(Job.id.in_(ids)).group_by(Job.status)).all()
        )
        errors = session.scalars(select(Job.error).where(Job.id.in_(ids), Job.status == JobStatus.FAILED)).all()
    wall = ((last if last.tzinfo else last.replace(tzinfo=UTC)) - sent).total_seconds() if last else 0.0
    return FleetRun(
        name=name,
        jobs=jobs,
        steps=steps,
        wall=wall,
        states={str(state): count for state, count in states.items()},
        phases={
            phase: (
                int(measured.get(("plimsoll_step_phase_seconds_count", phase), 0)),
                measured.get(("plimsoll_step_phase_seconds_sum", phase), 0.0),
            )
            for phase in PHASES
        },
        outcomes={label: int(value) for (metric, label), value in measured.items() if metric == "plimsoll_steps_total"},
        requeued=int(measured.get(("plimsoll_reconciler_requeued_total", "unheld"), 0)),
        recovered=int(measured.get(("plimsoll_reconciler_requeued_total", "held"), 0)),
        still_queued=int(measured.get(("plimsoll_reconciler_still_queued_total", ""), 0)),
        lease_seconds=lease,
        failures=sorted({(error or "")[:120] for error in errors}),
    )


def submit(database: Database, workload: Workload, count: int, *, cap: int | None) -> list[int]:
    """``count`` jobs of one new tenant (its cap on running jobs: ``cap``, None for the default), each over
    documents of its own (no prompt-cache prefix shared between jobs)."""
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"throughput-{uuid.uuid4().hex[:8]}")
        set_running_cap(session, tenant_id=tenant.id, cap=cap)
        ids = []
        for n in range(count):
            texts = {c.name: f"job {n}\n{c.text}" for c in chapters(workload.documents, chars=workload.chars)}
            documents = [add_document(session, tenant_id=tenant.id, name=k, content=t).id for k, t in texts.items()]
            job = create_job(
                session,
                tenant_id=tenant.id,
                instruction="Check each chapter against the notes and report one fact of each.",
                document_ids=documents,
                kind=JobKind.SUBAGENT,  # no delegation: the steps are the job's own
                options=JobOptions(model=MODEL),
            )
            ids.append(job.id)
        return ids


def send(app: Celery, database: Database, queue: str, job_id: int) -> None:
    """A job's first step, with the priority the API's enqueue gives it (worker/fairness.py)."""
    with database.session() as session:
        priority = step_priority(session, job_id)
    app.send_task(STEP_TASK, (job_id, 0), queue=queue, priority=priority)


def wait_all(database: Database, ids: list[int], deadline: float) -> None:
    while time.monotonic() < deadline:
        with database.session() as session:
            statuses = session.scalars(select(Job.status).where(Job.id.in_(ids))).all()
        if all(JobStatus(status).finished for status in statuses):
            return
        time.sleep(0.2)


def settled_metrics(
    folders: list[Path], counted: dict[tuple[str, str], float], steps: int, *, seconds: float = 10.0
) -> dict[tuple[str, str], float]:
    """The metrics once every step's delivery has timed its parts (at most ``seconds`` on): a task records them
    after its step's commit, so the last one may still be recording when its job is seen finished."""
    timed = ("plimsoll_step_phase_seconds_count", "task")
    until = time.monotonic() + seconds
    while (totals := read_metrics(folders)).get(timed, 0.0) - counted.get(timed, 0.0) < steps:
        if time.monotonic() > until:
            break
        time.sleep(0.1)
    return totals


def read_metrics(folders: list[Path]) -> dict[tuple[str, str], float]:
    """The workers' and beat's counters and histogram sums, by (sample, its one label's value)."""
    values: dict[tuple[str, str], float] = {}
    for folder in folders:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(folder))  # type: ignore[no-untyped-call]
        for metric in registry.collect():
            for sample in metric.samples:
                if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                    continue
                label = next((v for k, v in sample.labels.items() if k in ("phase", "outcome", "held")), "")
                values[sample.name, label] = values.get((sample.name, label), 0.0) + sample.value
    return values


def goals(result: Result) -> list[Goal]:
    fleet = result.fleet
    return [
        Goal(
            f"steps per second at zero model latency ≥ {RATIO_GOAL}× a plain Celery chain of no-op tasks on the same "
            "broker, same run",
            result.ratio >= RATIO_GOAL,
            f"{fleet.per_second:.1f} against {result.chain_per_second:.1f}: {result.ratio:.2f}× (a task that only "
            f"calls the model: {result.ceiling:.2f}×)",
        ),
        Goal(
            "0 jobs failed",
            all(run.states == {"succeeded": run.jobs} for run in (fleet, result.backlog)),
            "; ".join(", ".join(f"{k} {v}" for k, v in sorted(run.states.items())) for run in (fleet, result.backlog)),
        ),
        Goal(
            "jobs waiting behind their tenant's cap are not delivered before their turn (0 deliveries over the cap)",
            fleet.outcomes.get("waiting_for_slot", 0) == 0,
            f"{fleet.outcomes.get('waiting_for_slot', 0)} deliveries over the cap",
        ),
        Goal(
            "behind a backlog longer than the lease, no waiting step queued again",
            result.backlog.requeued == 0,
            f"{result.backlog.requeued} queued again; {result.backlog.still_queued} left in their place",
        ),
    ]


def phase_rows(run: FleetRun) -> list[list[str]]:
    """Per step delivery: the mean milliseconds in each phase, and each phase's share of the whole task."""
    count, task = run.phases["task"]
    if not count:
        return []
    claim = run.phases["claim"][1]
    plan = run.phases["plan"][1]
    shown = {
        "limits (a first step learns the model's limits)": run.phases["limits"][1],
        "claim (lock, gates; one transaction with the plan)": claim - plan,
        "plan (outlines loaded, request planned, bodies loaded)": plan,
        "admission (rate limits reserved in Redis)": run.phases["admission"][1],
        "send (the emulator's reply over HTTP)": run.phases["send"][1],
        "store (reply and tool results, one transaction)": run.phases["store"][1],
        "enqueue (next step: its priority read, then sent)": run.phases["enqueue"][1],
    }
    rows = [[name, f"{seconds / count * 1000:.1f}", f"{seconds / task:.0%}"] for name, seconds in shown.items()]
    rest = task - sum(shown.values())
    rows.append(["rest of the step (between the parts)", f"{rest / count * 1000:.1f}", f"{rest / task:.0%}"])
    rows.append([f"whole task ({count} deliveries)", f"{task / count * 1000:.1f}", "100%"])
    return rows


def render(result: Result) -> str:
    w = result.workload
    fleet, backlog = result.fleet, result.backlog
    scaled = w == SCALED
    rate_rows = [
        [f"plain Celery, {'before' if n == 0 else 'after'} the fleet", f"{c.chains} chains × {c.links} no-op tasks",
         f"{c.wall:.2f}", f"{c.per_second:.1f}"]
        for n, c in enumerate(result.chains)
    ]  # fmt: skip
    calls = result.model_calls
    rate_rows.append(
        [
            "the model call alone (the step's adapter, the same emulator; nothing stored)",
            f"{calls.chains} chains × {calls.links} tasks of one call",
            f"{calls.wall:.2f}",
            f"{calls.per_second:.1f}",
        ]
    )
    rate_rows.append(
        [
            "Plimsoll fleet",
            f"{fleet.jobs} jobs, {fleet.steps} steps ({fleet.steps / fleet.jobs:.1f} a job)",
            f"{fleet.wall:.2f}",
            f"{fleet.per_second:.1f}",
        ]
    )
    delivery_rows = [
        [
            run.name,
            f"{run.jobs} jobs on {w.workers if run is fleet else 1} × {w.processes if run is fleet else 1} processes, "
            f"lease {run.lease_seconds:g} s",
            str(sum(run.outcomes.values())),
            str(run.outcomes.get("continued", 0) + run.outcomes.get("finished", 0)),
            str(run.outcomes.get("waiting_for_slot", 0)),
            str(run.outcomes.get("skipped", 0)),
            str(run.requeued),
            str(run.recovered),
            str(run.still_queued),
            f"{run.per_second:.1f}",
        ]
        for run in (fleet, backlog)
    ]
    lines = [
        "# The fleet's step rate against plain Celery",
        "",
        header("python -m bench.fleet_throughput" + (" --scaled" if scaled else " --write")),
        "",
        f"Same run, same Redis broker, same workers ({w.workers} × {w.processes} prefork processes, the step "
        f"worker's Celery settings): {w.jobs} chains of no-op tasks before and after the fleet, and one tenant's "
        f"{w.jobs} jobs of {w.documents} documents of {w.chars:,} characters against the emulator answering at once "
        "(the default cap on running jobs, admission on, beat running the reconciler).",
        "",
        table(["run", "work", "wall s", "steps (tasks) per s"], rate_rows),
        "",
        f"Ratio: {fleet.per_second:.1f} / {result.chain_per_second:.1f} = **{result.ratio:.2f}×**. A step makes "
        f"one model call, so no step can go faster than the chains that make only that call: "
        f"{calls.per_second:.1f} / {result.chain_per_second:.1f} = **{result.ceiling:.2f}×**.",
        "",
        "## Where a step's time goes (the burst, mean per delivery, as the worker processes timed it)",
        "",
        table(["part", "ms", "share of the task"], phase_rows(fleet)),
        "",
        "## Deliveries, and what the reconciler queued again",
        "",
        table(
            [
                "run",
                "jobs",
                "deliveries",
                "ran a step",
                "over the cap",
                "skipped (late or duplicate)",
                "queued again (unheld)",
                "taken back (past its lease)",
                "left queued (broker holds it)",
                "steps per s",
            ],
            delivery_rows,
        ),
        "",
        "## Goals",
        "",
        render_goals(goals(result)),
    ]
    for run in (fleet, backlog):
        if run.failures:
            lines += ["", f"Failures ({run.name}): " + "; ".join(run.failures)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

"""Event streams and cheap polling, against the API as a real uvicorn process on PostgreSQL:
``python -m bench.events [--scaled] [--write]``.

- **Follow.** Clients follow running jobs' event streams while a writer plays the workers: every job takes a step
  (its record and its event, committed as a step commits them) every ``step_every`` seconds, from several threads
  so that commits interleave. Measured: from each event's commit to its arrival at each client, and the API
  process's CPU time (/proc) per client. Baseline: the same clients polling ``GET /v1/jobs/{id}`` every second, as
  ``plimsoll watch`` did, the step counted as arrived at the first poll that shows it.
- **Disconnects.** Clients cut their connection after a few events, over and over, and each time resume with
  ``Last-Event-ID``; at the end every client's events are compared with the job's stored ones.
- **Polling.** ``GET /v1/jobs/{id}`` timed on jobs at step 10 and step 1,000 (a read call and its page per step),
  in one run, alternating; baseline: the same jobs as a job from before ``jobs.reads`` (its view reads the history).
- **Idempotency.** Concurrent ``POST /v1/jobs`` over a few idempotency keys; the jobs created are counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import redis
from httpx_sse import aconnect_sse
from sqlalchemy import select, update

from bench.goals import Goal, render_goals
from bench.provenance import header, keep
from bench.report import table
from models.db import Database
from models.documents import add_document
from models.events import EventType, record
from models.history import append_messages
from models.jobs import create_job, end_job
from models.tables import Event, Job, JobStatus, Step
from models.tenants import create_tenant
from testbed.stack import REDIS_URL, bundled_emulator, free_port, fresh_database
from worker.step.records import record_step

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
LATENCY_GOAL = 0.5  # s from commit to client, at the 95th percentile
VIEW_RATIO_GOAL = 1.2
POLL_EVERY = 1.0  # plimsoll watch's interval before streams
WRITERS = 4  # threads committing steps, so that commits interleave
BUSY = 503  # the API's database pool busy: a client asks again


@dataclass(frozen=True)
class Workload:
    clients: int
    jobs: int
    follow_seconds: float
    step_every: float
    disconnects: int
    resuming_clients: int
    posts: int
    keys: int
    view_steps: tuple[int, int] = (10, 1_000)
    timings: int = 60


FULL = Workload(
    clients=200,
    jobs=50,
    follow_seconds=30.0,
    step_every=1.0,
    disconnects=1_000,
    resuming_clients=20,
    posts=10_000,
    keys=100,
)
SCALED = Workload(
    clients=20,
    jobs=5,
    follow_seconds=6.0,
    step_every=0.5,
    disconnects=50,
    resuming_clients=5,
    posts=500,
    keys=10,
    timings=30,
)


@dataclass
class Follow:
    latencies: list[float]
    cpu_seconds: float
    seconds: float
    clients: int
    lost: int = 0
    twice: int = 0
    busy: int = 0  # polls answered 503 (the API's database pool busy) or not within the timeout: asked again

    def percentile(self, share: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("inf")

    @property
    def cpu_per_client(self) -> float:
        """API CPU seconds per client per minute followed."""
        return self.cpu_seconds / self.clients / (self.seconds / 60)


@dataclass
class Resumes:
    disconnects: int
    lost: int
    twice: int
    events: int
    busy: int  # reconnections answered 503, tried again


@dataclass
class Views:
    steps: tuple[int, int]
    kept: tuple[float, float]  # median seconds of GET /v1/jobs/{id} at each, reads kept
    history: tuple[float, float]  # the same jobs as from before: the view reads the history

    @staticmethod
    def ratio(pair: tuple[float, float]) -> float:
        return pair[1] / pair[0]


@dataclass
class Posts:
    sent: int
    keys: int
    created: int
    answers: Counter[int] = field(default_factory=Counter)


@dataclass
class Result:
    follow: Follow
    polling: Follow
    resumes: Resumes
    views: Views
    posts: Posts


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (/proc/<pid>/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def api_process(url: str, queue: str) -> Iterator[tuple[str, int]]:
    """``uvicorn api.app:app`` in a process of its own on the database ``url``; yields its base URL and pid."""
    port = free_port()
    env = os.environ | {
        "PLIMSOLL_DATABASE_URL": url,
        "PLIMSOLL_BROKER_URL": REDIS_URL,
        "PLIMSOLL_LIMITER_URL": REDIS_URL,
        "PLIMSOLL_STEP_QUEUE": queue,  # steps queued by POST /v1/jobs wait there: no worker takes them
        "PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY": "0",  # the benchmark's clients share one key
    }
    command = [sys.executable, "-m", "uvicorn", "api.app:app", "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # importing the app takes a while on a busy machine
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code < 500:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the API did not start")
            time.sleep(0.2)
        yield base, process.pid
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:  # still serving requests that queued while it fell behind
            process.kill()
            process.wait()
        redis.Redis.from_url(REDIS_URL).delete(queue)


class Writer:
    """Plays the workers: each job takes a step every ``every`` seconds, from ``WRITERS`` threads."""

    def __init__(self, database: Database, jobs: list[int], every: float) -> None:
        self.database, self.jobs, self.every = database, jobs, every
        self.committed: dict[int, float] = {}  # event id -> when its commit returned
        self.step_committed: dict[tuple[int, int], float] = {}  # (job, step) -> the same
        self.steps = dict.fromkeys(jobs, 0)
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._work, args=(jobs[i::WRITERS],), daemon=True) for i in range(WRITERS)
        ]

    def __enter__(self) -> Writer:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _work(self, jobs: list[int]) -> None:
        offset = random.random() * self.every
        while not self.stop.wait(offset):
            started = time.monotonic()
            for job_id in jobs:
                self.step(job_id)
            offset = max(0.0, self.every - (time.monotonic() - started))

    def step(self, job_id: int) -> None:
        number = self.steps[job_id] + 1
        with self.database.session() as session:
            job = session.get_one(Job, job_id, with_for_update=True)
            job.step = number
            record_step(session, job, a_step(job_id, number))
            event_id = session.scalar(select(Event.id).where(Event.job_id == job_id).order_by(Event.id.desc()))
        now = time.time()
        self.steps[job_id] = number
        self.step_committed[job_id, number] = now
        if event_id is not None:
            self.committed[event_id] = now


def end_jobs(database: Database, jobs: list[int]) -> None:
    """Every job ends, as its last step would end it: its ended event its last."""
    with database.session() as session:
        for job_id in jobs:
            end_job(session, session.get_one(Job, job_id, with_for_update=True), JobStatus.SUCCEEDED)


def a_step(job_id: int, number: int) -> Step:
    return Step(
        job_id=job_id,
        step=number,
        stage="fits",
        planning_budget=38_000,
        calibration_factor=1.0,
        estimated_tokens=30_000,
        reported_input_tokens=31_000,
        cache_read_tokens=20_000,
        messages_sent=9,
        cleared=[],
        dropped=0,
        stop_reason="tool_use",
    )


def tenant_and_jobs(database: Database, jobs: int) -> tuple[str, list[int], int]:
    """A tenant with ``jobs`` running jobs over one document: its key, the jobs, the document."""
    with database.session() as session:
        tenant, key = create_tenant(session, name=f"events-{uuid.uuid4().hex[:8]}")
        document = add_document(session, tenant_id=tenant.id, name="a.txt", content="Alpha. " * 100)
        created = []
        for _ in range(jobs):
            job = create_job(session, tenant_id=tenant.id, instruction="Read.", document_ids=[document.id])
            job.status = JobStatus.RUNNING
            record(session, job, EventType.STATUS, {"status": "running"})
            created.append(job.id)
        return key, created, document.id


def latest_ids(database: Database, jobs: list[int]) -> dict[int, int]:
    with database.session() as session:
        return {
            job_id: session.scalar(select(Event.id).where(Event.job_id == job_id).order_by(Event.id.desc())) or 0
            for job_id in jobs
        }


def stored_ids(database: Database, job_id: int, after: int) -> list[int]:
    with database.session() as session:
        query = select(Event.id).where(Event.job_id == job_id, Event.id > after).order_by(Event.id)
        return list(session.scalars(query))


async def follow_stream(http: httpx.AsyncClient, job_id: int, after: int, arrivals: list[tuple[int, float]]) -> None:
    """Follow the job's stream from ``after`` to its end, noting each event's id and when it came."""
    async with aconnect_sse(http, "GET", f"/v1/jobs/{job_id}/events", params={"after": after}) as source:
        source.response.raise_for_status()
        async for message in source.aiter_sse():
            if message.data:  # not a keep-alive ping, which httpx-sse passes on with the last event's id
                arrivals.append((int(message.id), time.time()))


def lost_and_twice(received: list[int], stored: list[int]) -> tuple[int, int]:
    counts = Counter(received)
    return len(set(stored) - set(counts)), sum(n - 1 for n in counts.values() if n > 1)


def run_follow(base: str, pid: int, database: Database, workload: Workload) -> Follow:
    key, jobs, _ = tenant_and_jobs(database, workload.jobs)
    starts = latest_ids(database, jobs)
    followed = [jobs[i % len(jobs)] for i in range(workload.clients)]
    arrivals: list[list[tuple[int, float]]] = [[] for _ in followed]

    async def clients() -> None:
        limits = httpx.Limits(max_connections=workload.clients + 10)
        timeout = httpx.Timeout(30.0, read=120.0)
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": key}, limits=limits, timeout=timeout) as http:
            tasks = [
                asyncio.create_task(follow_stream(http, job, starts[job], got))
                for job, got in zip(followed, arrivals, strict=True)
            ]
            await asyncio.sleep(1.0)  # every client connected before the first step
            writer = Writer(database, jobs, workload.step_every)
            cpu_before, began = cpu_seconds(pid), time.monotonic()
            with writer:
                await asyncio.sleep(workload.follow_seconds)
            cpu, seconds = cpu_seconds(pid) - cpu_before, time.monotonic() - began
            await asyncio.to_thread(end_jobs, database, jobs)
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            result.extend([cpu, seconds, writer])

    result: list[Any] = []
    asyncio.run(clients())
    cpu, seconds, writer = result
    latencies, lost, twice = [], 0, 0
    for job, got in zip(followed, arrivals, strict=True):
        latencies += [at - writer.committed[event] for event, at in got if event in writer.committed]
        missing, extra = lost_and_twice([event for event, _ in got], stored_ids(database, job, starts[job]))
        lost, twice = lost + missing, twice + extra
    return Follow(latencies, cpu, seconds, workload.clients, lost, twice)


def run_polling(base: str, pid: int, database: Database, workload: Workload) -> Follow:
    """The baseline: each client asks for its job every second and sees a step when the view shows it."""
    key, jobs, _ = tenant_and_jobs(database, workload.jobs)
    followed = [jobs[i % len(jobs)] for i in range(workload.clients)]
    seen: list[list[tuple[int, int, float]]] = [[] for _ in followed]  # (job, step, when first seen)
    busy: list[int] = []  # a job per poll answered 503 or not at all
    stop = asyncio.Event()

    async def poll(http: httpx.AsyncClient, job_id: int, got: list[tuple[int, int, float]]) -> None:
        await asyncio.sleep(random.random() * POLL_EVERY)
        shown = 0
        while not stop.is_set():
            try:
                answer = await http.get(f"/v1/jobs/{job_id}")
            except httpx.TimeoutException:
                answer = None
            if answer is None or answer.status_code == BUSY:  # the API falls behind: asked again at the next poll
                busy.append(job_id)
            else:
                steps = answer.raise_for_status().json()["progress"]["steps_done"]
                now = time.time()
                got.extend((job_id, n, now) for n in range(shown + 1, steps + 1))
                shown = steps
            await asyncio.sleep(POLL_EVERY)

    async def clients() -> None:
        limits = httpx.Limits(max_connections=workload.clients + 10)
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": key}, limits=limits, timeout=60) as http:
            tasks = [asyncio.create_task(poll(http, job, got)) for job, got in zip(followed, seen, strict=True)]
            writer = Writer(database, jobs, workload.step_every)
            cpu_before, began = cpu_seconds(pid), time.monotonic()
            with writer:
                await asyncio.sleep(workload.follow_seconds)
            cpu, seconds = cpu_seconds(pid) - cpu_before, time.monotonic() - began
            stop.set()
            await asyncio.gather(*tasks)
            result.extend([cpu, seconds, writer])

    result: list[Any] = []
    asyncio.run(clients())
    cpu, seconds, writer = result
    latencies = [
        at - writer.step_committed[job, n] for got in seen for job, n, at in got if (job, n) in writer.step_committed
    ]
    return Follow(latencies, cpu, seconds, workload.clients, busy=len(busy))


def run_resumes(base: str, database: Database, workload: Workload) -> Resumes:
    key, jobs, _ = tenant_and_jobs(database, workload.resuming_clients)
    starts = latest_ids(database, jobs)
    each = workload.disconnects // workload.resuming_clients
    received: dict[int, list[int]] = defaultdict(list)
    done = busy = 0

    async def resuming(http: httpx.AsyncClient, job_id: int) -> None:
        nonlocal done, busy
        last, cuts = starts[job_id], 0
        while True:
            wanted = random.randint(1, 3) if cuts < each else None
            async with aconnect_sse(
                http, "GET", f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": str(last)}
            ) as source:
                if source.response.status_code == BUSY:  # still answering the polling baseline's backlog
                    busy += 1
                    await asyncio.sleep(float(source.response.headers.get("Retry-After", 1)))
                    continue  # as a client does: again after the last event received, not counted as a cut
                source.response.raise_for_status()
                got = 0
                async for message in source.aiter_sse():
                    if not message.data:  # a keep-alive ping
                        continue
                    last = int(message.id)
                    received[job_id].append(last)
                    got += 1
                    if wanted is not None and got == wanted:
                        break  # leaving the block closes the connection mid-stream: a forced disconnect
                else:
                    if cuts < each:
                        raise RuntimeError(f"job {job_id}'s stream ended after {cuts} of its {each} disconnects")
                    return  # the stream ended with the job
            cuts += 1
            if cuts == each:
                done += 1

    async def clients() -> None:
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": key}, timeout=60) as http:
            tasks = [asyncio.create_task(resuming(http, job)) for job in jobs]
            with Writer(database, jobs, 0.05):
                while done < len(jobs):
                    failed = [task for task in tasks if task.done() and task.exception()]
                    if failed:
                        failed[0].result()  # a client's error ends the run rather than leaving it waiting
                    await asyncio.sleep(0.1)
            await asyncio.to_thread(end_jobs, database, jobs)
            await asyncio.wait_for(asyncio.gather(*tasks), 60)

    asyncio.run(clients())
    lost = twice = events = 0
    for job in jobs:
        stored = stored_ids(database, job, starts[job])
        missing, extra = lost_and_twice(received[job], stored)
        lost, twice, events = lost + missing, twice + extra, events + len(stored)
    return Resumes(each * len(jobs), lost, twice, events, busy)


def job_at_step(database: Database, tenant_id: int, document_id: int, steps: int) -> int:
    """A job at step ``steps``: each step a read_document call, its page, and its record."""
    page = "Alpha beta gamma delta. " * 80
    with database.session() as session:  # committed at once: its first event is not held back
        job_id = create_job(session, tenant_id=tenant_id, instruction="Read.", document_ids=[document_id]).id
    history: list[dict[str, Any]] = []
    for number in range(1, steps + 1):
        call = {
            "type": "tool_use",
            "id": f"t{number}",
            "name": "read_document",
            "input": {"name": "a.txt", "offset": number * len(page)},
        }
        result = {"type": "tool_result", "tool_use_id": f"t{number}", "content": page}
        history += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    with database.session() as session:
        job = session.get_one(Job, job_id)
        append_messages(session, job, history, step=steps)
        session.add_all([a_step(job_id, number) for number in range(1, steps + 1)])
        job.step, job.status = steps, JobStatus.RUNNING
    return job_id


def time_views(base: str, key: str, jobs: list[int], timings: int) -> list[float]:
    """The median time of GET /v1/jobs/{id} of each job, asked in turn."""
    times: dict[int, list[float]] = defaultdict(list)
    with httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=60) as http:
        for job_id in jobs:
            http.get(f"/v1/jobs/{job_id}").raise_for_status()  # warm
        for _ in range(timings):
            for job_id in jobs:
                began = time.perf_counter()
                http.get(f"/v1/jobs/{job_id}").raise_for_status()
                times[job_id].append(time.perf_counter() - began)
    return [statistics.median(times[job_id]) for job_id in jobs]


def run_views(base: str, database: Database, workload: Workload) -> Views:
    with database.session() as session:
        tenant, key = create_tenant(session, name=f"views-{uuid.uuid4().hex[:8]}")
        document = add_document(session, tenant_id=tenant.id, name="a.txt", content="Alpha. " * 100_000)
        tenant_id, document_id = tenant.id, document.id
    jobs = [job_at_step(database, tenant_id, document_id, n) for n in workload.view_steps]
    kept = time_views(base, key, jobs, workload.timings)
    with database.session() as session:  # the same jobs as from before jobs.reads: their view reads the history
        session.execute(update(Job).where(Job.id.in_(jobs)).values(reads=None))
    history = time_views(base, key, jobs, workload.timings)
    return Views(workload.view_steps, (kept[0], kept[1]), (history[0], history[1]))


CONNECTIONS = 100  # the POSTs' client connections: the requests in flight at once


def run_posts(base: str, database: Database, workload: Workload) -> Posts:
    key, _, document_id = tenant_and_jobs(database, 0)
    run_id = uuid.uuid4().hex[:8]
    answers: Counter[int] = Counter()
    created: set[int] = set()

    async def post(http: httpx.AsyncClient, index: int) -> None:
        headers = {"Idempotency-Key": f"{run_id}-{index % workload.keys}"}
        body = {"instruction": f"Read, {index % workload.keys}.", "document_ids": [document_id]}
        for _ in range(50):  # as the client does: again under the same key on no answer or while the first runs
            try:
                answer = await http.post("/v1/jobs", json=body, headers=headers)
            except httpx.TransportError:
                answers[0] += 1  # no answer (shown as 0)
                await asyncio.sleep(0.1)
                continue
            answers[answer.status_code] += 1
            if answer.status_code == 409 and "retry-after" in answer.headers:
                await asyncio.sleep(0.1)
                continue
            if answer.status_code == 201:
                created.add(answer.json()["id"])
            return

    async def clients() -> None:
        # At most CONNECTIONS in flight, as many as the pool has: thousands of requests waiting on httpx's pool
        # cost the client more CPU than the API spends answering them.
        slots = asyncio.Semaphore(CONNECTIONS)

        async def in_a_slot(http: httpx.AsyncClient, index: int) -> None:
            async with slots:
                await post(http, index)

        limits = httpx.Limits(max_connections=CONNECTIONS)
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": key}, limits=limits, timeout=120) as http:
            await asyncio.gather(*(in_a_slot(http, i) for i in range(workload.posts)))

    asyncio.run(clients())
    with database.session() as session:
        tenant_id = session.scalar(select(Job.tenant_id).where(Job.id.in_(created)).limit(1))
        count = len(list(session.scalars(select(Job.id).where(Job.tenant_id == tenant_id))))
    return Posts(workload.posts, workload.keys, count, answers)


def timed(phase: str, part: Callable[..., T], *arguments: Any) -> T:
    """Run one part, saying on stderr how long it took."""
    began = time.monotonic()
    done = part(*arguments)
    print(f"bench.events: {phase} took {time.monotonic() - began:.1f} s", file=sys.stderr)
    return done


def run(workload: Workload) -> Result:
    # The jobs are the emulator's model's (the default), though no step of theirs is sent: the writer plays them.
    with (
        bundled_emulator(),
        fresh_database(prefix="plimsoll_events") as url,
        api_process(url, f"plimsoll-events-{uuid.uuid4().hex[:8]}") as (base, pid),
    ):
        database = Database(url)
        try:
            follow = timed("follow", run_follow, base, pid, database, workload)
            polling = timed("polling", run_polling, base, pid, database, workload)
            resumes = timed("disconnects", run_resumes, base, database, workload)
            views = timed("views", run_views, base, database, workload)
            posts = timed("posts", run_posts, base, database, workload)
        finally:
            database.dispose()
    return Result(follow, polling, resumes, views, posts)


def goals(result: Result, workload: Workload) -> list[Goal]:
    follow, resumes, views, posts = result.follow, result.resumes, result.views, result.posts
    return [
        Goal(
            f"{workload.clients} clients on {workload.jobs} running jobs: an event reaches its client within "
            f"{LATENCY_GOAL} s of its commit at the 95th percentile",
            follow.percentile(0.95) <= LATENCY_GOAL,
            f"p95 {follow.percentile(0.95) * 1000:.0f} ms; API CPU {follow.cpu_per_client * 1000:.1f} ms per client "
            "per minute",
        ),
        Goal(
            f"{resumes.disconnects:,} forced disconnects resumed with Last-Event-ID: 0 events lost, 0 twice",
            resumes.lost == 0 and resumes.twice == 0 and follow.lost == 0 and follow.twice == 0,
            f"{resumes.lost} lost, {resumes.twice} twice of {resumes.events:,}",
        ),
        Goal(
            f"GET /v1/jobs/{{id}} costs the same at step {views.steps[0]:,} and step {views.steps[1]:,} "
            f"(ratio ≤ {VIEW_RATIO_GOAL})",
            views.ratio(views.kept) <= VIEW_RATIO_GOAL,
            f"ratio {views.ratio(views.kept):.2f}",
        ),
        Goal(
            f"{posts.sent:,} concurrent POST /v1/jobs over {posts.keys} idempotency keys create exactly "
            f"{posts.keys} jobs",
            posts.created == posts.keys,
            f"{posts.created} created",
        ),
    ]


def render(workload: Workload, result: Result) -> str:
    follow, polling, views = result.follow, result.polling, result.views
    command = "python -m bench.events" + (" --scaled" if workload == SCALED else " --write")

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.1f}"

    return (
        "\n".join(
            [
                "# Event streams and cheap polling",
                "",
                header(command),
                "",
                f"The API: one uvicorn process on PostgreSQL. {workload.clients} clients on {workload.jobs} running "
                f"jobs, "
                f"each job a step every {workload.step_every} s from {WRITERS} writer threads, for "
                f"{workload.follow_seconds:.0f} s; CPU: the API process's user + system time (/proc) over that time.",
                "",
                table(
                    [
                        "clients following jobs",
                        "event streams (SSE)",
                        f"baseline: GET /v1/jobs/{{id}} every {POLL_EVERY:.0f} s",
                    ],
                    [
                        ["commit to client, median ms", ms(follow.percentile(0.5)), ms(polling.percentile(0.5))],
                        [
                            "commit to client, 95th percentile ms",
                            ms(follow.percentile(0.95)),
                            ms(polling.percentile(0.95)),
                        ],
                        ["events (steps) measured", len(follow.latencies), len(polling.latencies)],
                        [
                            "API CPU ms per client per minute",
                            f"{follow.cpu_per_client * 1000:.1f}",
                            f"{polling.cpu_per_client * 1000:.1f}",
                        ],
                        ["API CPU s in all", f"{follow.cpu_seconds:.2f}", f"{polling.cpu_seconds:.2f}"],
                        ["polls answered 503 or not in 60 s (the API behind)", follow.busy, polling.busy],
                    ],
                ),
                "",
                table(
                    ["GET /v1/jobs/{id}, median ms", f"step {views.steps[0]:,}", f"step {views.steps[1]:,}", "ratio"],
                    [
                        [
                            "progress kept as steps commit (jobs.reads)",
                            ms(views.kept[0]),
                            ms(views.kept[1]),
                            f"{views.ratio(views.kept):.2f}",
                        ],
                        [
                            "baseline: read from the history",
                            ms(views.history[0]),
                            ms(views.history[1]),
                            f"{views.ratio(views.history):.2f}",
                        ],
                    ],
                ),
                "",
                f"Disconnects: {result.resumes.disconnects:,} forced, {result.resumes.events:,} events stored for the "
                f"resuming clients' jobs, {result.resumes.lost} lost, {result.resumes.twice} twice; the followers: "
                f"{follow.lost} lost, {follow.twice} twice. Reconnections answered 503 (the API still behind the "
                f"polling baseline) and tried again: {result.resumes.busy:,}.",
                "",
                f"POST /v1/jobs: {result.posts.sent:,} requests over {result.posts.keys} keys, answers "
                + ", ".join(f"{status} × {n:,}" for status, n in sorted(result.posts.answers.items()))
                + f"; {result.posts.created} jobs created.",
                "",
                "## Goals",
                "",
                render_goals(goals(result, workload)),
            ]
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.events", description=__doc__)
    parser.add_argument("--scaled", action="store_true", help="the scaled-down run the tests make")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS / 'events.md'}")
    args = parser.parse_args(argv)
    workload = SCALED if args.scaled else FULL
    report = render(workload, run(workload))
    print(report)
    if args.write:
        keep(report, "events.md")


if __name__ == "__main__":
    main()

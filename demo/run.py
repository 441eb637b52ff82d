"""The embedded demo: a subagent checks 40 long multilingual chapters under a budget far below their total.

No services needed: a SQLite file, the in-process worker and the emulator started in this process, counting
with a real tokenizer and enforcing a hard context limit, as a real model would.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from demo.chapters import chapters
from emulator import EmulatorConfig, EmulatorServer
from models.db import Database
from models.documents import add_document
from models.history import documents_read
from models.jobs import create_job, steps_of
from models.migrate import upgrade
from models.options import JobOptions
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus, Step
from models.tenants import create_tenant
from models.usage import cost_vs_uncached
from vocab import load_encoding
from worker.inprocess import InProcessWorker
from worker.services import make_services

INSTRUCTION = (
    "Check each of these chapters against the notes: read them one by one and, for each, note its length, "
    "its fingerprint and how it begins. Then report on all of them."
)
STAGES = ("as_is", "cleared_results", "user_turns", "tool_rounds")
_NOTE = re.compile(r"^NOTE (?P<name>\S+): \d+ chars, sha256 (?P<sha>[0-9a-f]{12}), starts", re.MULTILINE)


def notes_matching(answer: str, texts: Mapping[str, str]) -> set[str]:
    """The documents whose note in ``answer`` (the emulator agent's report) carries the sha256 prefix of their
    text: proof that the agent really read them, not a guess. A document read in pages gets the same note (the
    agent carries SHA-256's state from page to page), so this holds however the document was paged."""
    notes = {m["name"]: m["sha"] for m in _NOTE.finditer(answer)}
    return {n for n, text in texts.items() if notes.get(n) == hashlib.sha256(text.encode()).hexdigest()[:12]}


@dataclass(frozen=True)
class Progress:
    step: int
    chapters_read: int
    last_request: int | None  # real tokens, as the emulator counted them
    cleared: int
    stage: str | None


@dataclass(frozen=True)
class DemoReport:
    status: str
    chapters: int
    chapters_read: int  # chapters whose note in the final report matches their content
    total_tokens: int  # all chapters together, as the emulator counts them
    budget: int
    limit: int
    requests: int
    max_request: int  # real tokens
    max_estimate: int
    cleared_at_most: int  # results sent as the note in one request
    stage_reached: str
    cache_read_share: float
    cost_vs_uncached: float  # input cost at Anthropic's cache prices over what it would have cost uncached
    budget_use: float  # real input tokens / budget, averaged over the requests that had to clear results
    seconds: float
    overhead_ms_per_step: float


def run_demo(
    folder: Path,
    *,
    count: int = 40,
    chars: int = 45_000,
    budget: int = 400_000,
    limit: int = 1_000_000,
    calibration_floor: float | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> DemoReport:
    """Run the demo in ``folder`` (a fresh SQLite database there) and report what happened."""
    started = time.monotonic()
    database_file = folder / "demo.sqlite3"
    database_file.unlink(missing_ok=True)
    url = f"sqlite:///{database_file}"
    upgrade(url)
    database = Database(url)
    texts = {c.name: c.text for c in chapters(count, chars=chars)}
    with EmulatorServer(EmulatorConfig(limit=limit)) as emulator:
        settings = Settings(database_url=url, queue="inprocess", emulator_url=emulator.base_url)
        if calibration_floor is not None:
            settings = settings.model_copy(update={"calibration_floor": calibration_floor})
        worker = InProcessWorker(lambda enqueue: make_services(enqueue, settings=settings, database=database))
        try:
            job_id = _submit(database, texts, budget, settings)
            worker.submit(job_id)
            while not worker.wait_until_idle(timeout=0.25):
                if on_progress:
                    on_progress(_progress(database, job_id))
        finally:
            worker.stop()
        if on_progress:
            on_progress(_progress(database, job_id))
        requests = emulator.stats()["requests"]
    encoding = load_encoding(EmulatorConfig().tokenizer)
    total = sum(len(encoding.encode(text, disallowed_special=())) for text in texts.values())
    report = _report(database, job_id, texts, total=total, requests=requests, limit=limit)
    database.dispose()
    return DemoReport(**{**report.__dict__, "seconds": round(time.monotonic() - started, 1)})


def _submit(database: Database, texts: dict[str, str], budget: int, settings: Settings) -> int:
    with database.session() as session:
        tenant, _ = create_tenant(session, name="demo")
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        job = create_job(
            session,
            tenant_id=tenant.id,
            instruction=INSTRUCTION,
            document_ids=ids,
            options=JobOptions(model="plimsoll-emulator", budget=budget),
            kind=JobKind.SUBAGENT,
            settings=settings,
        )
        return job.id


def _progress(database: Database, job_id: int) -> Progress:
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        last = session.scalar(select(Step).where(Step.job_id == job_id).order_by(Step.step.desc()).limit(1))
        names = [d.name for d in job.documents]
        return Progress(
            step=job.step,
            chapters_read=len(documents_read(session, job_ids=[job_id], names=names)),
            last_request=last.reported_input_tokens if last else None,
            cleared=len(last.cleared) if last else 0,
            stage=last.stage if last else None,
        )


def _report(
    database: Database, job_id: int, texts: dict[str, str], *, total: int, requests: int, limit: int
) -> DemoReport:
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        steps = steps_of(session, job_id)
        read = len(notes_matching(job.final_answer or "", texts))
        total_input = job.total_input_tokens
        return DemoReport(
            status=job.status if job.status != JobStatus.FAILED else f"failed: {job.error}",
            chapters=len(texts),
            chapters_read=read,
            total_tokens=total,
            budget=job.budget,
            limit=limit,
            requests=requests,
            max_request=max((s.reported_input_tokens or 0 for s in steps), default=0),
            max_estimate=max((s.estimated_tokens for s in steps), default=0),
            cleared_at_most=max((len(s.cleared) for s in steps), default=0),
            stage_reached=max((s.stage for s in steps), key=STAGES.index, default="as_is"),
            cache_read_share=job.cache_read_tokens / total_input if total_input else 0.0,
            cost_vs_uncached=cost_vs_uncached(job) if total_input else 0.0,
            budget_use=_budget_use(steps, job.budget),
            seconds=0.0,
            overhead_ms_per_step=sum(s.overhead_ms for s in steps) / len(steps) if steps else 0.0,
        )


def _budget_use(steps: list[Step], budget: int) -> float:
    """Real input tokens / budget over the steps that had to clear results: how much of the budget a request
    uses once the conversation has outgrown it (the rest is what the estimate's margin wastes)."""
    uses = [s.reported_input_tokens / budget for s in steps if s.stage != "as_is" and s.reported_input_tokens]
    return sum(uses) / len(uses) if uses else 0.0

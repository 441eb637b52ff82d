"""Time the worker spends in its own code per step, the model's reply excluded: ``python -m bench.worker_overhead``.

A job is given 10, 100 and 1,000 stored messages (tool rounds over 60 real chapters), then takes steps against
the emulator on PostgreSQL (one warm-up step, then seven timed). Each step records its own overhead: planning
from the stored outlines, loading the bodies it sends, storing the reply and the tool results, in their
transactions. The table gives the median at each size, beside the request's size and stage.
"""

from __future__ import annotations

import statistics
import uuid
from typing import Any

from bench.report import table
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.history import append_messages
from models.jobs import create_job, steps_of
from models.options import JobOptions
from models.settings import Settings
from models.tables import Job, JobKind
from models.tenants import create_tenant
from testbed.stack import bundled_emulator, fresh_database
from worker.providers import AnthropicProvider
from worker.step import Services, run_step

SIZES = (10, 100, 1_000)
STEPS = 7


def job_with_history(database: Database, stored: int, texts: dict[str, str]) -> int:
    """A subagent job over ``texts`` whose history already holds ``stored`` messages of tool rounds."""
    names = list(texts)
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"overhead-{uuid.uuid4().hex[:8]}")
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        job = create_job(
            session,
            tenant_id=tenant.id,
            instruction="Read.",
            document_ids=ids,
            kind=JobKind.SUBAGENT,
            options=JobOptions(budget=400_000),
        )
        rounds: list[dict[str, Any]] = []
        for index in range((stored - 1) // 2):
            name = names[index % len(names)]
            tool_id = f"toolu_{index:06d}"
            call = {"type": "tool_use", "id": tool_id, "name": "read_document", "input": {"name": name}}
            rounds.append({"role": "assistant", "content": [{"type": "text", "text": f"Reading {name}."}, call]})
            rounds.append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": texts[name]}]}
            )
        append_messages(session, job, rounds, step=0)
        job.step = len(rounds) // 2
        return job.id


def measure(database: Database, emulator: EmulatorServer, stored: int, texts: dict[str, str]) -> list[str]:
    job_id = job_with_history(database, stored, texts)
    provider = AnthropicProvider(api_key="bench", base_url=emulator.base_url)
    services = Services(
        database=database,
        settings=Settings(database_url=database.url),
        provider_for=lambda job: provider,
        enqueue=lambda job_id, step, delay: None,
        report=lambda error: None,
    )
    for _ in range(STEPS + 1):
        run_step(job_id, services)
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        steps = [s for s in steps_of(session, job_id) if s.reported_input_tokens is not None][1:]  # after a warm-up
    if not steps:
        raise RuntimeError(f"the job ended before its steps could be timed: {job.status} {job.error or ''}")
    overheads = [s.overhead_ms for s in steps]
    return [
        f"{stored:,}",
        f"{statistics.median(overheads):.1f}",
        f"{min(overheads):.1f} – {max(overheads):.1f}",
        f"{statistics.median(s.messages_sent for s in steps):.0f}",
        f"{statistics.median(len(s.cleared) for s in steps):.0f}",
        ", ".join(sorted({s.stage for s in steps})),
    ]


def main() -> None:
    texts = {c.name: c.text for c in chapters(60, chars=12_000, languages=("ru", "en", "zh"))}
    with fresh_database(prefix="plimsoll_bench") as url, bundled_emulator() as emulator:
        database = Database(url)
        rows = [measure(database, emulator, stored, texts) for stored in SIZES]
        database.dispose()
    print("## Time in our code per step (PostgreSQL, the model's reply excluded)\n")
    print(
        table(
            ["stored messages", "median ms", "range ms", "messages sent", "results cleared", "stage"],
            rows,
        )
    )


if __name__ == "__main__":
    main()

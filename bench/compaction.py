"""Compaction against no compaction and a summarize-everything baseline: ``python -m bench.compaction [--scale N]``.

Jobs run step by step through the worker's own code (``worker.step.run_step``) on PostgreSQL, against the
model emulator over HTTP with the official Anthropic SDK; the emulator counts with a real tokenizer and
caches prompts as Anthropic does. Two workloads where stage 1 (clearing old tool results) is not enough:

- **long output**: the instruction asks for a written summary of each document in the agent's own message, so
  every round adds a long assistant message that nothing can clear;
- **many turns**: the person named the documents one per message, over many turns, before the agent began.

Three policies, side by side, on the same jobs: ``off`` (masking, then stages 2 and 3 drop what does not fit:
today's behaviour), ``auto`` (what stages 2 and 3 would drop is summarized first, replaying the cached
prefix) and ``summarize_all`` (LangChain's ``SummarizationMiddleware`` style: past a share of the budget,
everything but the newest 20 messages is summarized by a separate summarizer request).

Cost is input cost at Anthropic's prices relative to uncached input (cache writes 1.25x, reads 0.1x), and in USD
from the ledger (each request charged at the emulator's model's prices, PLIMSOLL_EMULATOR_PRICED_AS); compaction's
share of a job's input cost is its summary requests' input USD over all its requests' input USD. Writes
``bench/results/compaction.md``.
"""

from __future__ import annotations

import argparse
import uuid
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.goals import Goal, render_goals
from bench.provenance import header, keep
from bench.report import table
from demo.chapters import chapters
from demo.run import notes_matching
from models.db import Database
from models.documents import add_document
from models.history import all_messages, append_messages
from models.jobs import create_job, steps_of
from models.ledger import ChargeKind
from models.options import JobOptions
from models.prices import FIVE_MINUTES
from models.settings import Settings
from models.tables import Charge, Document, Job, JobDocument, JobKind, Summary
from models.tenants import create_tenant
from testbed.stack import bundled_emulator, fresh_database
from worker.providers import AnthropicProvider
from worker.step import Services, run_step

POLICIES = ("off", "auto", "summarize_all")
LONG_OUTPUT = "Read every document and write a summary of each document in your own message; then report."
# The agent's answer to each of the person's messages: it restates its plan, as agents do. Nothing in it is
# needed later (the names are in the person's words), so a summary can leave it out.
PLAN = (
    "Understood. I will read it after the documents named before it, one at a time, and for each I will note "
    "its length in characters, the first twelve hex digits of its sha256 and how it starts, so that my report "
    "shows I really read it. When a result of mine is cleared to save space I will rely on my notes instead of "
    "reading it again, and I will keep going until every document you named is done, then report them all."
)
BY_TURNS = "Read each document I name in my messages, one at a time, and note it; then report."


@dataclass(frozen=True)
class Workload:
    name: str
    documents: int
    chars: int
    budget: int
    by_turns: bool  # the documents are named one per message of the person, not in the instruction


def workloads(scale: int) -> tuple[Workload, ...]:
    return (
        Workload("long output", 48 // scale, 1_600, 40_000 // scale, False),
        Workload("many turns", 48 // scale, 1_200, 12_000 // scale, True),
    )


@dataclass(frozen=True)
class Outcome:
    status: str
    covered: int
    documents: int
    read_again: int  # documents read more than once
    read_again_tokens: int  # estimated tokens of the extra reads
    cost: float  # input cost in uncached-token equivalents
    uncached: int  # the same input, uncached
    summary_input: int
    summary_read: int
    input_total: int
    compactions: int
    over_budget: int
    too_long: int
    usd: Decimal  # what the job was billed, from the ledger
    input_usd: Decimal  # its input part (uncached, cache writes, cache reads)
    compaction_input_usd: Decimal  # the input part of its summary requests


def person_turns(names: list[str]) -> list[dict[str, Any]]:
    """The conversation before the agent began: the person named one document per message."""
    messages: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        messages.append({"role": "assistant", "content": PLAN if index else "Understood. Which documents?"})
        messages.append({"role": "user", "content": f"Please read `{name}` as well."})
    return messages


def run_job(database: Database, services: Services, workload: Workload, policy: str, texts: dict[str, str]) -> int:
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"compaction-{uuid.uuid4().hex[:8]}")
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        job = create_job(
            session,
            tenant_id=tenant.id,
            instruction=BY_TURNS if workload.by_turns else LONG_OUTPUT,
            document_ids=[] if workload.by_turns else ids,
            kind=JobKind.SUBAGENT,
            options=JobOptions(budget=workload.budget, compaction=policy, max_steps=12 * workload.documents),
        )
        if workload.by_turns:  # the documents reach the job through the person's messages, not its first one
            job.documents = [
                JobDocument(document_id=d, position=i, name=n) for i, (d, n) in enumerate(zip(ids, texts, strict=False))
            ]
            append_messages(session, job, person_turns(list(texts)), step=0)
        job_id = job.id
    for _ in range(12 * workload.documents + 1):
        if run_step(job_id, services).action == "finished":
            break
    return job_id


def measure(database: Database, job_id: int, texts: dict[str, str]) -> Outcome:
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        steps = steps_of(session, job_id)
        reads: Counter[tuple[str, int]] = Counter()  # (document, offset): the pages of a long one are not re-reads
        for message in all_messages(session, job_id):
            if message.role == "assistant" and isinstance(message.content, list):
                reads.update(
                    (b["input"].get("name", ""), b["input"].get("offset", 0))
                    for b in message.content
                    if b.get("type") == "tool_use" and b.get("name") == "read_document"
                )
        sizes = {d.name: _tokens(session, d.document_id) for d in job.documents}
        compactions = session.query(Summary).filter(Summary.job_id == job_id).count()
        summary_steps = [s for s in steps if s.stage == "compaction" and s.reported_input_tokens is not None]
        sent = [s for s in steps if s.reported_input_tokens is not None]
        return Outcome(
            status=job.status,
            covered=len(notes_matching(job.final_answer or "", texts)),
            documents=len(texts),
            read_again=len({name for (name, _), n in reads.items() if n > 1}),
            read_again_tokens=sum((n - 1) * sizes.get(name, 0) for (name, _), n in reads.items() if n > 1),
            cost=FIVE_MINUTES.cost(
                uncached=job.input_tokens, written=job.cache_write_tokens, read=job.cache_read_tokens
            ),
            uncached=job.total_input_tokens,
            summary_input=sum(s.reported_input_tokens or 0 for s in summary_steps),
            summary_read=sum(s.cache_read_tokens for s in summary_steps),
            input_total=sum(s.reported_input_tokens or 0 for s in sent),
            compactions=compactions,
            over_budget=sum(1 for s in sent if (s.reported_input_tokens or 0) > job.budget),
            too_long=sum(1 for s in steps if s.rejected_tokens is not None or s.stop_reason == "TooLong"),
            **_spent(session, job_id),
        )


def _spent(session: Session, job_id: int) -> dict[str, Decimal]:
    """The job's charges in the ledger: in all, their input, and their summary requests' input."""
    charges = list(session.scalars(select(Charge).where(Charge.job_id == job_id)))

    def input_usd(charge: Charge) -> Decimal:
        return charge.uncached_usd + charge.cache_write_usd + charge.cache_read_usd

    return {
        "usd": sum((c.total_usd for c in charges), Decimal(0)),
        "input_usd": sum((input_usd(c) for c in charges), Decimal(0)),
        "compaction_input_usd": sum((input_usd(c) for c in charges if c.kind == ChargeKind.COMPACTION), Decimal(0)),
    }


def _tokens(session: Any, document_id: int) -> int:
    document = session.get(Document, document_id)
    return document.token_estimate if document else 0


def _share(part: float | Decimal, whole: float | Decimal) -> float:
    return float(part) / float(whole) if whole else 0.0


def goals(results: dict[tuple[str, str], Outcome]) -> list[Goal]:
    names = list(dict.fromkeys(w for w, _ in results))
    auto = {w: results[w, "auto"] for w in names}
    equal = [w for w in names if auto[w].covered == results[w, "summarize_all"].covered]
    return [
        Goal("auto: every document correctly covered", all(o.covered == o.documents for o in auto.values())),
        Goal("auto: no document read twice", all(o.read_again == 0 for o in auto.values())),
        Goal(
            "auto: summary requests read >= 90 % of their input from the cache",
            all(_share(o.summary_read, o.summary_input) >= 0.9 for o in auto.values() if o.summary_input),
        ),
        Goal(
            "auto: compaction <= 5 % of each job's input cost (the ledger)",
            all(_share(o.compaction_input_usd, o.input_usd) <= 0.05 for o in auto.values()),
        ),
        Goal(
            "auto costs no more than off on every workload", all(auto[w].cost <= results[w, "off"].cost for w in names)
        ),
        Goal(
            "auto >= 20 % cheaper than summarize_all where they cover as much",
            all(auto[w].cost <= 0.8 * results[w, "summarize_all"].cost for w in equal),
        ),
        Goal("0 requests over budget", all(o.over_budget == 0 for o in results.values())),
        Goal("0 too-long rejections", all(o.too_long == 0 for o in results.values())),
    ]


def rows(results: dict[tuple[str, str], Outcome]) -> list[list[str]]:
    return [
        [
            workload,
            policy,
            o.status,
            f"{o.covered}/{o.documents}",
            f"{o.read_again}",
            f"{o.read_again_tokens:,}",
            f"{o.cost:,.0f}",
            f"{_share(o.cost, o.uncached):.1%}",
            f"${o.usd:,.4f}",
            f"{_share(o.summary_read, o.summary_input):.1%}" if o.summary_input else "-",
            f"{_share(o.summary_input, o.input_total):.1%}",
            f"{_share(o.compaction_input_usd, o.input_usd):.1%}",
            f"{o.compactions}",
            f"{o.over_budget}",
            f"{o.too_long}",
        ]
        for (workload, policy), o in results.items()
    ]


HEADER = [
    "workload",
    "policy",
    "status",
    "covered",
    "read again",
    "re-read tokens",
    "input cost",
    "cost vs uncached",
    "billed (USD)",
    "summary cache reads",
    "compaction token share",
    "compaction cost share",
    "compactions",
    "over budget",
    "too long",
]


def run(scale: int = 1) -> tuple[str, list[Goal]]:
    """Every workload under every policy; the report (Markdown) and the goals."""
    results: dict[tuple[str, str], Outcome] = {}
    with fresh_database(prefix="plimsoll_bench") as url, bundled_emulator() as emulator:
        database = Database(url)
        provider = AnthropicProvider(api_key="bench", base_url=emulator.base_url)
        services = Services(
            database=database,
            settings=Settings(database_url=url),
            provider_for=lambda job: provider,
            enqueue=lambda job_id, step, delay: None,
            report=lambda error: None,
        )
        for workload in workloads(scale):
            texts = {c.name: c.text for c in chapters(workload.documents, chars=workload.chars)}
            for policy in POLICIES:
                emulator.reset()
                results[workload.name, policy] = measure(
                    database, run_job(database, services, workload, policy, texts), texts
                )
        database.dispose()
    checked = goals(results)
    sizes = ", ".join(
        f"{w.name}: {w.documents} documents of ~{w.chars:,} characters, budget {w.budget:,}" for w in workloads(scale)
    )
    report = "\n\n".join(
        [
            f"## Compaction ({sizes})",
            table(HEADER, rows(results)),
            "### Goals",
            render_goals(checked),
        ]
    )
    return report, checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="divide the number of documents by this")
    arguments = parser.parse_args()
    report, _ = run(arguments.scale)
    command = "python -m bench.compaction" + (f" --scale {arguments.scale}" if arguments.scale != 1 else "")
    text = f"{header(command)}\n\n{report}\n"
    print(text)
    if arguments.scale == 1:
        keep(text, "compaction.md")


if __name__ == "__main__":
    main()

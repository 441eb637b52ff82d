"""A step planned from what its worker process kept of the job (worker/stored_history.py) plans exactly what a
step planned from the database alone does: over random histories grown in random steps, planned by several
processes in a random order, some of them crashing (forgetting everything), with summaries written between
steps (compaction) and the history removed and written again (nothing kept may survive that)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete

from models.db import Database
from models.documents import add_document
from models.history import append_messages
from models.jobs import create_job
from models.options import JobOptions
from models.settings import Settings
from models.tables import Job, JobKind, Message, Summary
from models.tenants import create_tenant
from plimsoll import DoesNotFit, InvalidConversation
from tests.examples import examples
from worker import compaction
from worker.providers import AnthropicProvider
from worker.step import Services
from worker.step.plan import NothingFits, prepare
from worker.step.results import Planned
from worker.stored_history import HistoryCache

WORDS = ("alpha", "бета", "gamma", "数据", "delta", "эпсилон", "zeta")
WORKERS = 3


def services_of(database: Database, histories: HistoryCache) -> Services:
    provider = AnthropicProvider(api_key="test", base_url="http://127.0.0.1:9")  # never called: plans only
    return Services(
        database=database,
        settings=Settings(database_url=database.url),
        provider_for=lambda job: provider,
        enqueue=lambda job_id, step, delay: None,
        report=lambda error: None,
        histories=histories,
    )


def job_of(database: Database, budget: int) -> int:
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"incremental-{uuid.uuid4().hex[:8]}")
        document = add_document(session, tenant_id=tenant.id, name="a.txt", content="Alpha. " * 300)
        job = create_job(
            session,
            tenant_id=tenant.id,
            instruction="Read.",
            document_ids=[document.id],
            kind=JobKind.SUBAGENT,
            options=JobOptions(budget=budget),
        )
        return job.id


Round = tuple[int, int, bool]  # (calls, words per result, text beside the results)
rounds = st.lists(
    st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=1, max_value=900), st.booleans()),
    min_size=1,
    max_size=6,
)
actions = st.lists(
    st.one_of(
        st.tuples(st.just("append"), rounds),
        st.tuples(st.just("plan"), st.integers(min_value=0, max_value=WORKERS - 1)),
        st.tuples(st.just("crash"), st.integers(min_value=0, max_value=WORKERS - 1)),
        st.tuples(st.just("summary"), st.integers(min_value=0, max_value=10_000)),
        st.tuples(st.just("rewrite"), rounds),
        st.tuples(st.just("pending"), st.integers(min_value=1, max_value=2)),
    ),
    min_size=1,
    max_size=14,
)


def messages_of(drawn: list[Round], start: int) -> list[dict[str, Any]]:
    """Tool rounds reading the job's document (results of drawn sizes), or user turns where a round calls nothing."""
    messages: list[dict[str, Any]] = []
    for number, (calls, words, text) in enumerate(drawn, start=start):
        ids = [f"toolu_{number}_{call}" for call in range(calls)]
        uses = [{"type": "tool_use", "id": i, "name": "read_document", "input": {"name": "a.txt"}} for i in ids]
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"Round {number}."}, *uses]})
        body = " ".join(WORDS[(number + w) % len(WORDS)] for w in range(words))
        if not ids:
            messages.append({"role": "user", "content": f"Go on. {body}"})
            continue
        results: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": i, "content": body} for i in ids]
        messages.append({"role": "user", "content": [*results, *([{"type": "text", "text": "Next."}] * text)]})
    return messages


def planned(database: Database, job_id: int, histories: HistoryCache) -> object:
    """What the job's next step would send, planned with what ``histories`` kept; or what stopped the plan."""
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        try:
            chosen = prepare(session, job, services_of(database, histories))
        except NothingFits as nothing:
            return ("nothing fits", nothing.smallest, nothing.carried)
        except (DoesNotFit, InvalidConversation) as error:
            return (type(error).__name__, str(error))
        finally:
            session.rollback()  # a plan only
    assert isinstance(chosen, Planned)
    return (
        chosen.request,
        chosen.chosen,
        chosen.breakpoints,
        chosen.compaction,
        chosen.counted_input,
        chosen.system,
        chosen.tools,
        chosen.max_tokens,
        chosen.planning_budget,
    )


def append(database: Database, job_id: int, messages: list[dict[str, Any]]) -> None:
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        append_messages(session, job, messages, step=job.step)
        job.step += 1


@pytest.mark.usefixtures("emulator")
@given(st.integers(min_value=2_000, max_value=40_000), rounds, actions)
@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a case of database rounds takes minutes
)
def test_a_step_plans_from_what_its_process_kept_exactly_as_from_the_database(
    database: Database, budget: int, first: list[Round], steps: list[tuple[str, Any]]
) -> None:
    job_id = job_of(database, budget)
    append(database, job_id, messages_of(first, 0))
    workers = [HistoryCache() for _ in range(WORKERS)]
    rounds_written = len(first)
    pending = False
    for action, value in [*steps, ("plan", 0), ("plan", 1)]:
        if action == "append" and not pending:
            append(database, job_id, messages_of(value, rounds_written))
            rounds_written += len(value)
        elif action == "pending" and not pending:  # the last round's results are still to come: the step runs them
            messages = messages_of([(value, 5, False)], rounds_written)
            append(database, job_id, messages[:1])
            rounds_written, pending = rounds_written + 1, True
        elif action == "crash":
            workers[value] = HistoryCache()
        elif action == "summary":
            summarize(database, job_id, value)
        elif action == "rewrite":  # the history removed and written again: the kept rows are no longer the job's
            with database.session() as session:
                session.execute(delete(Summary).where(Summary.job_id == job_id))
                session.execute(delete(Message).where(Message.job_id == job_id, Message.seq > 0))
            longer = value * (rounds_written // len(value) + 1)  # past what was kept, so its last row is there
            append(database, job_id, messages_of(longer, rounds_written))
            rounds_written += len(longer)
            pending = False
        elif action == "plan":
            from_scratch = planned(database, job_id, HistoryCache())
            assert planned(database, job_id, workers[value]) == from_scratch


def summarize(database: Database, job_id: int, at: int) -> None:
    """A summary of the messages up to a tool result or user turn (as compaction stores them), after the last."""
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        stored = session.query(Message).filter(Message.job_id == job_id).count()
        if stored < 4:
            return
        last_seq = 2 + 2 * (at % ((stored - 2) // 2))  # even: a user message
        step = job.step + 1000 + session.query(Summary).filter(Summary.job_id == job_id).count()
        text = f"Summary {at}: " + "noted " * (at % 200)
        session.add(
            Summary(
                job_id=job_id, step=step, first_seq=1, last_seq=last_seq, content=text, token_estimate=50 + at % 300
            )
        )


@pytest.mark.usefixtures("emulator")
@given(st.integers(min_value=8_000, max_value=60_000), rounds, st.lists(rounds, min_size=2, max_size=6))
@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
def test_a_request_grown_from_the_one_its_process_built_before_is_the_request_from_scratch(
    database: Database, budget: int, first: list[Round], grown: list[list[Round]]
) -> None:
    """Each step appends rounds and plans on the same process: where the plan and the summary stay as they were
    (batched clearing keeps them for several steps), the request begins with what the last one built. (In a run
    of this test, 14 of its 15 examples took that path at least once.)"""
    job_id = job_of(database, budget)
    append(database, job_id, messages_of(first, 0))
    worker, written = HistoryCache(), len(first)
    for index, drawn in enumerate([[], *grown]):
        append(database, job_id, messages_of(drawn, written))
        written += len(drawn)
        if index % 3 == 2:
            summarize(database, job_id, written)
        assert planned(database, job_id, worker) == planned(database, job_id, HistoryCache())


@pytest.mark.usefixtures("emulator")
def test_a_step_that_plans_as_the_one_before_builds_only_the_new_messages(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    grew = count_calls(monkeypatch, compaction, "request_from")
    job_id = job_of(database, 400_000)  # nothing cleared: every step plans the same
    append(database, job_id, messages_of([(1, 50, False)] * 3, 0))
    worker = HistoryCache()
    for written in (3, 4, 5):
        append(database, job_id, messages_of([(1, 50, False)], written))
        assert planned(database, job_id, worker) == planned(database, job_id, HistoryCache())
    assert len(grew) == 2  # the first plan on this process built it all; each after, the new round alone
    assert [len(built) for built in grew] == [2, 2]


def count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    """What each call of ``module.name`` returned, as the calls happen."""
    returned: list[Any] = []
    original = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        returned.append(original(*args, **kwargs))
        return returned[-1]

    monkeypatch.setattr(module, name, counted)
    return returned

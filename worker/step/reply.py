"""The reply: its usage counted and measured, then what it asks for. A summary ends a compaction step; tool calls
are run (or the agent, repeating itself, is stopped) and delegations start subagents; a reply cut off at the output
limit is asked to go on; otherwise it is the job's answer. The step is recorded and the next one woken."""

from __future__ import annotations

import time
from typing import Any, Literal

from redis.exceptions import RedisError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.history import append_messages, message_bodies
from models.jobs import end_job
from models.model_facts import endpoint_of, observe_model
from models.statuses import CALIBRATED
from models.tables import Job, JobStatus, Message
from worker.lease import release
from worker.providers.base import Reply
from worker.runaway import Repeats, count_calls, fingerprint, with_warning
from worker.step.charges import discarded_here, used_here
from worker.step.claim import current
from worker.step.endings import budget_notice, needed_budget, stop, usd
from worker.step.records import notify, observe, record_step, step_record
from worker.step.results import Decided, Outcome, Planned, Wake
from worker.step.services import Services
from worker.step.subagents import finish_with_parts, over_the_cap, start_subagent, wake_parent, within_caps
from worker.step.summary import compaction_done
from worker.tools import Delegation, result, run_tool

CONTINUE_AFTER_CUT_OFF = "(Your reply was cut off at the output limit. Continue exactly where it stopped.)"
MAX_CONTINUATIONS = 3  # a reply cut off this many times running is taken as the answer, not asked for again


def answered(
    session: Session, *, job_id: int, planned: Planned, reply: Reply, services: Services, started: float
) -> Decided:
    """Store the reply and what follows from it, if the job is still at the step this reply answers. The model's
    calibration, one row that every job of the model shares, is fed last: it stays locked only until the commit
    that follows, not while the step stores its messages (every step of the fleet would wait for it)."""
    job = current(session, job_id, planned.step)
    if isinstance(job, Decided):
        discarded_here(session, job_id, planned)
        return job
    used_here(session, job, planned)
    calibrated = job.strategy in CALIBRATED and planned.chosen.tokens > 0
    if calibrated:
        observe(session, job, estimated=planned.chosen.tokens, reported=reply.usage.total_input, model=False)
    decided = _stored(session, job, planned=planned, reply=reply, services=services, started=started)
    if calibrated:
        observe_model(session, endpoint_of(job), job.model, job.profile, estimated=planned.chosen.tokens,
                      reported=reply.usage.total_input)  # fmt: skip
    return decided


def _stored(
    session: Session, job: Job, *, planned: Planned, reply: Reply, services: Services, started: float
) -> Decided:
    usage = reply.usage
    job.input_tokens += usage.input_tokens
    job.output_tokens += usage.output_tokens
    job.cache_read_tokens += usage.cache_read_tokens
    job.cache_write_tokens += usage.cache_write_tokens
    if planned.compaction is not None:
        return compaction_done(session, job, planned, services, reply=reply)
    step = planned.step + 1
    new_messages: list[dict[str, Any]] = [*planned.carried, {"role": "assistant", "content": reply.content}]
    calls = [block for block in reply.content if block.get("type") == "tool_use"]
    action: Literal["continued", "finished"] = "continued"
    if calls:
        repeats = count_calls(job.tool_calls, calls, limit=services.settings.max_identical_tool_calls)
        job.tool_calls = repeats.counts
        if repeats.over:  # the agent repeated itself and is stopped: the step's event before the job's end
            record_step(session, job, step_record(job, planned, step, reply=reply, seconds=planned.seconds))
            return _repeating(session, job, calls, new_messages, repeats, step=step, services=services)
        wake = _tool_calls(session, job, calls, new_messages, repeats, step=step, services=services)
    elif reply.stop_reason == "max_tokens" and len(_cut_off_answers(session, job)) < MAX_CONTINUATIONS:
        append_messages(session, job, [*new_messages, {"role": "user", "content": CONTINUE_AFTER_CUT_OFF}], step=step)
        wake = [(job.id, step, None)]
    else:
        wake, action = [], "finished"
    job.step, job.attempts, job.rate_limited_since = step, 0, None
    if action == "continued":
        release(job, seconds=services.settings.lease_seconds)
    seconds = planned.seconds + time.perf_counter() - started
    record_step(session, job, step_record(job, planned, step, reply=reply, seconds=seconds))
    if action == "finished":  # after the step's event: the job's ended event is its last
        wake = _answer(session, job, reply, new_messages, step=step, planned=planned, services=services)
    outcome = Outcome(
        job.id,
        action,
        step,
        job.status,
        stage=planned.chosen.stage,
        estimated_tokens=planned.chosen.tokens,
        reported_tokens=usage.total_input,
    )
    return Decided(outcome, wake)


def _tool_calls(
    session: Session,
    job: Job,
    calls: list[dict[str, Any]],
    new_messages: list[dict[str, Any]],
    repeats: Repeats,
    *,
    step: int,
    services: Services,
) -> list[Wake]:
    """Run the reply's tool calls and store their results, waking the job; delegations start subagents instead,
    which wake the job when they end. A call made often warns the agent (worker/runaway.py)."""
    limit = services.settings.max_identical_tool_calls
    outputs = [run_tool(session, job, call) for call in calls]
    delegations = [o for o in outputs if isinstance(o, Delegation)]
    starting = delegations[: within_caps(session, job, delegations, services.settings)]
    outputs = [
        o if not isinstance(o, Delegation) or o in starting else over_the_cap(o.tool_use_id, services.settings)
        for o in outputs
    ]
    if starting:  # the others' results are given with the subagents' (worker/step/subagents.py)
        append_messages(session, job, new_messages, step=step)
        return [(start_subagent(session, job, d).id, 0, None) for d in starting]
    results = [
        with_warning(o, tool=c.get("name", "?"), times=limit) if c["id"] in repeats.warn else o
        for c, o in zip(calls, outputs, strict=True)
        if not isinstance(o, Delegation)
    ]
    append_messages(session, job, [*new_messages, {"role": "user", "content": results}], step=step)
    return [(job.id, step, None)]


def _repeating(
    session: Session,
    job: Job,
    calls: list[dict[str, Any]],
    new_messages: list[dict[str, Any]],
    repeats: Repeats,
    *,
    step: int,
    services: Services,
) -> Decided:
    """The agent made the same call too often: its calls are answered as not run and the job stops, saying so (and
    naming a budget that would hold the results, where the job's could not)."""
    unrun = [result(c["id"], "Not run: the same call was made too often.", error=True) for c in calls]
    append_messages(session, job, [*new_messages, {"role": "user", "content": unrun}], step=step)
    job.step = step
    tool, times = repeats.over[0].get("name", "?"), repeats.counts[fingerprint(repeats.over[0])]
    why = f"stopped: the agent called {tool} with the same input {times} times"
    needed = needed_budget(session, job, services)
    if needed > job.budget:  # results were left out before the agent could use them: the budget's fault
        why += f"; its budget of {job.budget:,} tokens cannot hold its results with its notes ({needed:,} would)"
        return stop(session, job, why, "repeating_budget", tool=tool, times=times, budget=job.budget, needed=needed)
    return stop(session, job, why, "repeating", tool=tool, times=times)


def _answer(
    session: Session,
    job: Job,
    reply: Reply,
    new_messages: list[dict[str, Any]],
    *,
    step: int,
    planned: Planned,
    services: Services,
) -> list[Wake]:
    """The job's answer, in parts if it was cut off at the output limit: the job ends, waking its parent. An
    answer given when the agent was told its budget is nearly spent ends the job ``incomplete``: the task may
    not be done, and the notice says how to go on."""
    earlier = _cut_off_answers(session, job)
    append_messages(session, job, new_messages, step=step)
    answer = "".join([*earlier, _text(reply.content)]).strip()
    if reply.stop_reason == "refusal":
        end_job(session, job, JobStatus.FAILED, error="the model refused the task")
    elif planned.wind_down is not None:
        job.final_answer = answer
        notify(session, job, _wound_down_notice(session, job, planned, services))  # before the end it explains
        end_job(
            session,
            job,
            JobStatus.INCOMPLETE,
            error=f"answered early: its {WOUND_DOWN[planned.wind_down][0]} was nearly spent",
        )
    else:
        job.final_answer = answer
        finish_with_parts(session, job)
    return wake_parent(session, job)


WOUND_DOWN = {  # what was nearly spent, and the option of `plimsoll continue` that gives more
    "money": ("budget in money", "--max-cost-usd"),
    "steps": ("limit of steps", "--max-steps"),
    "tokens": ("limit of input tokens", "--max-input-tokens"),
}


def _wound_down_notice(session: Session, job: Job, planned: Planned, services: Services) -> str:
    what, option = WOUND_DOWN[planned.wind_down or "money"]
    more = {
        "money": usd(job.max_cost_usd * 2),
        "steps": str(job.max_steps * 2),
        "tokens": str(job.max_input_tokens * 2),
    }[planned.wind_down or "money"]
    spent = None
    if services.budgets is not None and planned.spends:
        try:
            spent = services.budgets.standing(planned.spends[0]).spent
        except RedisError:
            spent = None
    return budget_notice(session, job, "wound_down", spent, what=what, option=f"{option} {more}")


def _cut_off_answers(session: Session, job: Job) -> list[str]:
    """The texts of the replies cut off at the output limit at the end of the stored history, oldest first."""
    last = session.scalar(select(func.max(Message.seq)).where(Message.job_id == job.id)) or 0
    bodies = message_bodies(session, job.id, range(max(1, last - 2 * MAX_CONTINUATIONS), last + 1))
    parts: list[str] = []
    while last > 1 and bodies.get(last, {}).get("content") == CONTINUE_AFTER_CUT_OFF and last - 1 in bodies:
        parts.insert(0, _text(bodies[last - 1]["content"]))
        last -= 2
    return parts


def _text(content: list[dict[str, Any]]) -> str:
    return "\n".join(b["text"] for b in content if b.get("type") == "text")

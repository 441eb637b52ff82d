"""The agent's instructions."""

from __future__ import annotations

from models.tables import Job
from plimsoll.notices import AGENT_SAFETY_NET

ROLE = (
    "You are a careful assistant working through a long document task. Use the tools to read the documents "
    "you need, one at a time, and take a short note of what each one says that matters for the task. When "
    "the task is done, answer with a complete report."
)
SUBAGENT_ROLE = (
    "You are a subagent: another agent handed you a bounded task. Do all of it, then answer with a complete "
    "report; your answer is returned to that agent."
)
DELEGATION = (
    "For tasks over many documents you can hand bounded parts to subagents with the delegate tool; each "
    "returns its report as the tool result."
)


def system_prompt(job: Job) -> str:
    parts = [ROLE, SUBAGENT_ROLE if job.parent_id else DELEGATION]
    parts.append(f"Your context budget is {job.budget:,} tokens per request.")
    if job.safety_net:
        parts.append(AGENT_SAFETY_NET)
    return "\n\n".join(parts)

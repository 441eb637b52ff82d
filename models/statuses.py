"""A job's statuses and kinds, in a module that imports no database library (the command line lists them)."""

from __future__ import annotations

import enum


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NEEDS_NEW_CHAT = "needs_new_chat"
    CANCELLED = "cancelled"
    INCOMPLETE = "incomplete"  # it answered, but some of its subagents did not finish

    @property
    def finished(self) -> bool:
        return self not in UNFINISHED


UNFINISHED = (JobStatus.QUEUED, JobStatus.RUNNING)
"""A job in these may still take a step; every other status is an end."""


class JobKind(enum.StrEnum):
    MAIN = "main"
    SUBAGENT = "subagent"

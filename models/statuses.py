"""A job's statuses, kinds and strategies, in a module that imports no database library (the command line
lists them)."""

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


class Strategy(enum.StrEnum):
    """How a job fits its requests: Plimsoll's way, or one of the published failures, reproduced."""

    PLIMSOLL = "plimsoll"  # the three stages, the model's profile, calibration, clearing where the cache is cheapest
    ORIGINAL = "original"  # the three stages, the simple by-script rule, no calibration
    LEGACY = "legacy"  # cut only at user messages, characters / 4 (worker/legacy.py)
    UNBATCHED = "unbatched"  # Plimsoll clearing one result at a time, which breaks the prompt cache at every call


CALIBRATED = (Strategy.PLIMSOLL, Strategy.UNBATCHED)
"""The strategies that learn the model's real count; the reproductions of the published failures run uncorrected."""
REPRODUCTIONS = tuple(strategy for strategy in Strategy if strategy is not Strategy.PLIMSOLL)


class Compaction(enum.StrEnum):
    """The job option ``compaction``: the engine's policies (``plimsoll.compaction.POLICIES``, which create_job
    checks) named where the command line can list them without loading the engine; a test keeps the two equal."""

    AUTO = "auto"  # summarize what stages 2 and 3 would drop (the default)
    OFF = "off"  # drop it
    SUMMARIZE_ALL = "summarize_all"  # the benchmarks' baseline: summarize all but the newest messages

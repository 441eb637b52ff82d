"""One step of a job: claim it, plan the request within the budget, send it, store what came back, hand off.

A step is a plain function of a job id and the step number it is for, so it runs the same under Celery, in the
in-process worker and in tests. It is exactly-once by that number: the claim and the store each lock the job's
row and check that the job is still at that step, so a late or duplicate delivery does nothing, and a second
delivery never calls the model while the first holds the step's lease (worker/lease.py). The next step is queued
only after the store commits; if that enqueue is lost, the job's deadline brings it back through the reconciler.

Its modules follow a step's way through, each importing only those before it (pyproject.toml's contract):
``run`` (the whole way), ``reply`` (what a reply asks for) and ``unanswered`` (a request that failed), ``send``
(admission and the model call), ``claim`` (the claim and its gates), ``summary`` (a compaction step's end),
``endings`` (failures and stops), ``plan``, ``subagents``, ``records`` (step records, notices, calibration), and
``results`` and ``services`` (the types they hand each other).
"""

from worker.step.results import Outcome
from worker.step.run import fail_after_internal_error, run_step
from worker.step.services import Enqueue, Services

__all__ = ["Enqueue", "Outcome", "Services", "fail_after_internal_error", "run_step"]

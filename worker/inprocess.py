"""A worker inside the current process, for the embedded default: no broker, the same steps as under Celery,
and the same reconciler, run on a timer instead of Celery beat.

As under Celery, a step that meets a database outage is tried again with the worker's backoff, at most
``max_transient_retries`` times, and then left to the reconciler. A step that raises anything else (a defect) fails
its job, as under Celery (``worker.step.fail_after_internal_error``): one event to Sentry, through its scrubbing,
a scrubbed traceback in the log, and the thread goes on with the next step.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from worker.lease import reconcile
from worker.outages import DatabaseUnavailable, backoff_wait
from worker.step import Enqueue, Services, fail_after_internal_error, run_step
from worker.tenant_cap import start_parked
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)


class InProcessWorker:
    """Runs steps on a few threads, honouring delays, and reconciles jobs whose deadline passed."""

    def __init__(self, make_services: Callable[[Enqueue], Services], threads: int = 2) -> None:
        self.services = make_services(self.submit)
        self._queue: list[tuple[float, int, int, int | None]] = []  # (due, order, job id, step)
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._busy = 0
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._work, daemon=True, name=f"plimsoll-step-{i}") for i in range(threads)
        ]
        self._threads.append(threading.Thread(target=self._reconcile, daemon=True, name="plimsoll-reconciler"))
        for thread in self._threads:
            thread.start()

    def submit(self, job_id: int, step: int | None = None, delay: float | None = None) -> None:
        with self._condition:
            due = time.monotonic() + (delay or 0.0)
            heapq.heappush(self._queue, (due, next(self._order), job_id, step))
            self._condition.notify()

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Block until no step is queued or running; False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._condition.wait(0.05 if left is None else min(left, 0.05))
        return True

    def stop(self) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    def _work(self) -> None:
        while True:
            with self._condition:
                while not self._stopping and (not self._queue or self._queue[0][0] > time.monotonic()):
                    wait = self._queue[0][0] - time.monotonic() if self._queue else None
                    self._condition.wait(wait)
                if self._stopping:
                    return
                _, _, job_id, step = heapq.heappop(self._queue)
                self._busy += 1
            try:
                self._run(job_id, step)
            finally:
                with self._condition:
                    self._busy -= 1
                    self._condition.notify_all()

    def _run(self, job_id: int, step: int | None) -> None:
        """One step, through database outages; whatever else it raises is reported, never the end of the thread."""
        retrying = Retrying(
            retry=retry_if_exception_type(DatabaseUnavailable),
            wait=backoff_wait,
            stop=stop_after_attempt(self.services.settings.max_transient_retries + 1),
            sleep=self._sleep,
            before_sleep=_log_outage_wait,
            reraise=True,
        )
        try:
            retrying(self._attempt, job_id, step)
        except DatabaseUnavailable:  # the job keeps its deadline: the reconciler queues it once the database is back
            logger.warning("job %s: step %s given up while the database is unavailable", job_id, step)
        except Exception as error:  # a defect: the job fails with one event, and this thread takes the next step
            logger.error(
                "job %s: step %s raised %s; the job fails\n%s",
                job_id, step, type(error).__name__, scrubbed_traceback(error),
            )  # fmt: skip
            try:
                fail_after_internal_error(job_id, step, error, self.services)
            except Exception as failure:  # the database went too: the job keeps its deadline for the reconciler
                logger.warning("job %s: not failed (%s)", job_id, type(failure).__name__)

    def _attempt(self, job_id: int, step: int | None) -> None:
        if not self._stopping:  # a worker that stops tries no more: the reconciler resumes the job
            run_step(job_id, self.services, step=step)

    def _sleep(self, seconds: float) -> None:
        """tenacity's sleep between tries, cut short when the worker stops."""
        with self._condition:
            self._condition.wait_for(lambda: self._stopping, seconds)

    def _reconcile(self) -> None:
        settings = self.services.settings
        while True:
            with self._condition:
                if self._stopping or self._condition.wait_for(lambda: self._stopping, settings.reconcile_every_seconds):
                    return
            try:
                reconcile(self.services.database, lease_seconds=settings.lease_seconds, enqueue=self.submit)
                start_parked(self.services.database, settings, self.submit)
            except Exception as error:  # an outage, most likely: the next round tries again
                logger.warning(
                    "reconciler: %s; trying again in a moment\n%s", type(error).__name__, scrubbed_traceback(error)
                )


def _log_outage_wait(retry_state: RetryCallState) -> None:
    job_id, step = retry_state.args
    logger.warning(
        "job %s: step %s waits %.1f s for the database (try %d)",
        job_id, step, retry_state.upcoming_sleep, retry_state.attempt_number,
    )  # fmt: skip

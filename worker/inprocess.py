"""A worker inside the current process, for the embedded default: no broker, the same steps as under Celery,
and the same reconciler, run on a timer instead of Celery beat."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from worker.lease import reconcile
from worker.outages import DatabaseUnavailable
from worker.routing import JITTER, backoff_delay
from worker.runner import Enqueue, Services, run_step
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)


class InProcessWorker:
    """Runs steps on a few threads, honouring delays, and reconciles jobs whose deadline passed."""

    def __init__(self, make_services: Callable[[Enqueue], Services], threads: int = 2) -> None:
        self.services = make_services(self.submit)
        self._queue: list[tuple[float, int, int, int | None, int]] = []  # (due, order, job id, step, outages)
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

    def submit(self, job_id: int, step: int | None = None, delay: float | None = None, outages: int = 0) -> None:
        with self._condition:
            due = time.monotonic() + (delay or 0.0)
            heapq.heappush(self._queue, (due, next(self._order), job_id, step, outages))
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
                _, _, job_id, step, outages = heapq.heappop(self._queue)
                self._busy += 1
            try:
                run_step(job_id, self.services, step=step)
            except DatabaseUnavailable:
                if outages < self.services.settings.max_transient_retries:  # then the reconciler's deadline
                    self.submit(job_id, step, backoff_delay(outages + 1, None, JITTER), outages + 1)
            finally:
                with self._condition:
                    self._busy -= 1
                    self._condition.notify_all()

    def _reconcile(self) -> None:
        settings = self.services.settings
        while True:
            with self._condition:
                if self._stopping or self._condition.wait_for(lambda: self._stopping, settings.reconcile_every_seconds):
                    return
            try:
                reconcile(self.services.database, lease_seconds=settings.lease_seconds, enqueue=self.submit)
            except Exception as error:  # an outage, most likely: the next round tries again
                logger.warning(
                    "reconciler: %s; trying again in a moment\n%s", type(error).__name__, scrubbed_traceback(error)
                )

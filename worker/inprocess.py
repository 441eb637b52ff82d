"""A worker inside the current process, for the embedded default: no broker, the same steps as under Celery."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from worker.runner import Enqueue, Services, run_step


class InProcessWorker:
    """Runs steps on a few threads, honouring delays (retries) and counting attempts as Celery would."""

    def __init__(self, make_services: Callable[[Enqueue], Services], threads: int = 2) -> None:
        self.services = make_services(self.submit)
        self._queue: list[tuple[float, int, int, int]] = []  # (due, order, job id, attempt)
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._busy = 0
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._work, daemon=True, name=f"plimsoll-step-{i}") for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job_id: int, delay: float | None = None, attempt: int = 1) -> None:
        with self._condition:
            heapq.heappush(self._queue, (time.monotonic() + (delay or 0.0), next(self._order), job_id, attempt))
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
                _, _, job_id, attempt = heapq.heappop(self._queue)
                self._busy += 1
            try:
                outcome = run_step(job_id, self.services, attempt=attempt)
                if outcome.action == "retry":
                    self.submit(job_id, outcome.retry_in, attempt + 1)
            finally:
                with self._condition:
                    self._busy -= 1
                    self._condition.notify_all()

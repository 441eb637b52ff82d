"""The chaos harness's client side of the queue, in a process of its own so that it imports the code under test
with the run's environment (broker, step queue) and nothing cached from the harness's process.

It first prints ``queue <name>``: the queue the Celery app routes steps to, which the workers must consume. Then
it reads job ids, one per line, and enqueues each with ``worker.queue.enqueue_step``, retrying while the broker
is down (as a client would), and answers ``ok <id>`` or ``failed <id> <error type>``.
"""

from __future__ import annotations

import sys
import time

from worker.names import STEP_TASK

RETRY_FOR_SECONDS = 60.0


def step_queue() -> str:
    from worker.celery_app import app

    try:
        route = app.amqp.router.route({}, STEP_TASK, args=(0,), kwargs={})
        return str(route["queue"].name)
    except Exception:  # an app without routes: its default queue
        return str(app.conf.task_default_queue)


def enqueue(job_id: int) -> str:
    from worker.queue import enqueue_step

    deadline = time.monotonic() + RETRY_FOR_SECONDS
    while True:
        try:
            enqueue_step(job_id)
            return f"ok {job_id}"
        except Exception as error:
            if time.monotonic() > deadline:
                return f"failed {job_id} {type(error).__name__}"
            time.sleep(0.5)


def main() -> None:
    print(f"queue {step_queue()}", flush=True)
    for line in sys.stdin:
        if line.strip():
            print(enqueue(int(line)), flush=True)


if __name__ == "__main__":
    main()

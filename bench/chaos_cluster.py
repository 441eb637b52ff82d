"""The Celery side of a chaos run: N worker processes (prefork, 2 children each unless told), beat, and the
enqueuing client, each in its own process group, with the kills the harness injects.

A supervisor thread plays compose's ``restart: unless-stopped``: a worker whose main process exits on its own (a
prefork worker exits, for one, when a pool child dies before it has started) is started again a second later,
and counted."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from bench.chaos_services import Processes, pool_children
from bench.cluster import start_beat, start_worker

POOL_SIZE = 2
SUPERVISOR_RESTART_DELAY = 1.0
CHILD_WAIT_SECONDS = 10.0


class Cluster:
    def __init__(
        self, processes: Processes, code_dir: Path, env: Mapping[str, str], workers: int, concurrency: int = POOL_SIZE
    ) -> None:
        self.processes = processes
        self.concurrency = concurrency  # pool children per worker
        self.code_dir = code_dir
        self.env = {**env, "PYTHONPATH": str(code_dir), "PYTHONUNBUFFERED": "1"}
        self._lock = threading.Lock()  # one job id at a time through the enqueuer's pipes
        self._slots = threading.Lock()  # the worker slots, between the supervisor and the fault injector
        self.enqueuer = processes.spawn(
            [sys.executable, "-m", "bench.chaos_enqueue"], log="enqueue.log", env=self.env, cwd=code_dir, pipes=True
        )
        first = self._read_line()
        if not first.startswith("queue "):
            raise RuntimeError(f"the enqueuer did not start; see {processes.root / 'enqueue.log'}")
        self.queue = first.split(" ", 1)[1]
        self.workers: list[subprocess.Popen[bytes] | None] = [None] * workers
        self.supervisor_restarts = 0
        self._held: set[int] = set()  # slots the fault injector is restarting itself
        self._closing = threading.Event()
        for slot in range(workers):
            self.start_worker(slot)
        self._supervisor = threading.Thread(target=self._supervise, name="chaos-supervisor", daemon=True)
        self._supervisor.start()
        self.beat = start_beat(processes, env=self.env, cwd=code_dir)

    def start_worker(self, slot: int) -> None:
        self.workers[slot] = start_worker(
            self.processes,
            queue=self.queue,
            name=f"chaos{slot}@%h",
            concurrency=self.concurrency,
            env=self.env,
            cwd=self.code_dir,
            log=f"worker{slot}.log",
            events=True,
        )

    def _supervise(self) -> None:
        while not self._closing.wait(0.5):
            for slot, process in enumerate(self.workers):
                with self._slots:
                    exited = slot not in self._held and process is not None and process.poll() is not None
                if exited and process is not None:
                    self.processes.kill_group(process)  # its orphaned pool children, if any
                    time.sleep(SUPERVISOR_RESTART_DELAY)
                    with self._slots:
                        if self._closing.is_set() or slot in self._held:
                            continue
                        self.supervisor_restarts += 1
                        self.start_worker(slot)

    def wait_ready(self, timeout: float) -> None:
        """Until every worker has its pool up."""
        deadline = time.monotonic() + timeout
        while not all(w is not None and len(pool_children(w.pid)) >= self.concurrency for w in self.workers):
            for slot, process in enumerate(self.workers):
                if process is not None and process.poll() is not None:
                    log = self.processes.root / f"worker{slot}.log"
                    raise RuntimeError(f"worker {slot} exited with {process.returncode}; see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers' pools did not start in {timeout} s")
            time.sleep(0.2)

    def enqueue(self, job_id: int) -> bool:
        with self._lock:
            assert self.enqueuer.stdin is not None
            self.enqueuer.stdin.write(f"{job_id}\n".encode())
            self.enqueuer.stdin.flush()
            return self._read_line().startswith("ok ")

    def _read_line(self) -> str:
        assert self.enqueuer.stdout is not None
        return self.enqueuer.stdout.readline().decode().strip()

    def kill_child(self, rng: random.Random) -> str:
        """kill -9 one pool child of a worker picked at random (waiting a little if every pool is restarting)."""
        deadline = time.monotonic() + CHILD_WAIT_SECONDS
        while True:
            pools = {slot: pool_children(w.pid) for slot, w in enumerate(self.workers) if w is not None}
            candidates = sorted(slot for slot, children in pools.items() if children)
            if candidates:
                break
            if time.monotonic() > deadline:
                return "no pool child running"
            time.sleep(0.2)
        slot = rng.choice(candidates)
        with contextlib.suppress(ProcessLookupError):
            os.kill(rng.choice(pools[slot]), signal.SIGKILL)
        return f"worker {slot}"

    def kill_worker(self, slot: int, pause: float) -> str:
        """kill -9 a worker's main process, and start it again ``pause`` seconds later. Its orphaned pool
        children die with it at the restart, as they would with their machine."""
        with self._slots:
            self._held.add(slot)
            process = self.workers[slot]
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        time.sleep(pause)
        if process is not None:
            self.processes.kill_group(process)
        with self._slots:
            self.start_worker(slot)
            self._held.discard(slot)
        return f"worker {slot}"

    def close(self) -> None:
        self._closing.set()
        self._supervisor.join(timeout=5)
        for process in [*self.workers, self.beat, self.enqueuer]:
            if process is not None:
                self.processes.kill_group(process)

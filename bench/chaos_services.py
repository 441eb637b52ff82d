"""Real processes the chaos harness owns and kills: its own PostgreSQL and Redis on spare ports, the emulator,
Celery workers and beat, and a local Sentry endpoint that counts the SDK's events by kind.

Every process is started in a process group of its own and remembered in ``Processes``, which kills them all
(SIGKILL to the group) on ``close()`` and again at interpreter exit, so nothing outlives the harness.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from testbed.stack import free_port

PG_BIN_DIRS = ("/usr/local/bin", *sorted(str(p) for p in Path("/usr/lib/postgresql").glob("*/bin")))


def wait_for_port(port: int, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process {process.args!r} exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


def pool_children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (a Celery worker's pool), read from /proc."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            children.append(int(stat.parent.name))
    return sorted(children)


class Processes:
    """Every subprocess and temporary directory of one run; ``close()`` (or exit) kills and removes them all."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="plimsoll-chaos-"))
        self.root.chmod(0o755)  # PostgreSQL runs as its own user and must reach its data directory
        self._groups: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        atexit.register(self.close)

    def spawn(
        self,
        args: Sequence[str],
        *,
        log: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        user: str | None = None,
        pipes: bool = False,
    ) -> subprocess.Popen[bytes]:
        """Start ``args`` in a new process group, output appended to ``log`` in the run's folder (with
        ``pipes``, stdin and stdout are pipes to this process and only stderr goes to the log)."""
        with (self.root / log).open("ab") as output:
            process = subprocess.Popen(
                list(args),
                stdout=subprocess.PIPE if pipes else output,
                stderr=output if pipes else subprocess.STDOUT,
                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                user=user,
                start_new_session=True,  # a process group of its own: killed whole, never by name
            )
        with self._lock:
            self._groups[process.pid] = process
        return process

    def kill_group(self, process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        with self._lock:
            self._groups.pop(process.pid, None)

    def close(self, keep_logs: bool = False) -> None:
        with self._lock:
            groups = list(self._groups.values())
            self._groups.clear()
        for process in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in groups:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        if keep_logs:
            for path in self.root.iterdir():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                elif path.suffix != ".log":
                    path.unlink(missing_ok=True)
        else:
            shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.close)


def _pg_binary(name: str) -> str:
    for folder in PG_BIN_DIRS:
        candidate = Path(folder) / name
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (looked in {', '.join(PG_BIN_DIRS)} and PATH)")
    return found


class Postgres:
    """A throwaway cluster: trust auth, fsync off, on a spare port. ``stop()`` is an immediate shutdown (as a
    crash would be: recovery runs at the next start)."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.port = free_port()
        self.folder = processes.root / "pg"
        self.folder.mkdir()
        self.user = "postgres" if os.geteuid() == 0 else None  # initdb refuses to run as root
        if self.user:
            shutil.chown(self.folder, self.user)
        subprocess.run(
            [_pg_binary("initdb"), "-D", str(self.folder / "data"), "-A", "trust", "-U", "postgres", "--no-sync"],
            check=True,
            capture_output=True,
            user=self.user,
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        args = [_pg_binary("postgres"), "-D", str(self.folder / "data"), "-p", str(self.port)]
        args += ["-k", str(self.folder), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]
        args += ["-c", "max_connections=200"]
        self.process = self.processes.spawn(args, log="postgres.log", user=self.user)
        deadline = time.monotonic() + 30
        while subprocess.run(
            [_pg_binary("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)], check=False
        ).returncode:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start; see {self.processes.root / 'postgres.log'}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGQUIT)  # immediate shutdown: backends die, no checkpoint
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.processes.kill_group(self.process)
            self.processes.kill_group(self.process)
            self.process = None


class Redis:
    """A Redis without persistence: whatever was queued in it is gone after a restart."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.processes.root)]
        self.process = self.processes.spawn(args, log="redis.log")
        wait_for_port(self.port, 15, self.process)

    def kill(self) -> None:
        if self.process is not None:
            self.processes.kill_group(self.process)
            self.process = None


class Emulator:
    """The model emulator in a process of its own (so its work does not compete with the harness's threads),
    changed at run time through its admin API."""

    def __init__(self, processes: Processes, code_dir: Path, args: Sequence[str]) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "emulator", "--port", str(self.port), "--log-level", "warning", *args]
        env = {**os.environ, "PYTHONPATH": str(code_dir)}
        self.process = processes.spawn(command, log="emulator.log", env=env, cwd=code_dir)
        wait_for_port(self.port, 60, self.process)
        self.admin = httpx.Client(base_url=f"{self.base_url}/v1/emulator", timeout=30)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configure(self, **changes: Any) -> None:
        self.admin.post("config", json=changes).raise_for_status()

    def stats(self) -> dict[str, Any]:
        response = self.admin.get("stats")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def close(self) -> None:
        self.admin.close()


class SentrySink:
    """A local endpoint for the real Sentry SDK (DSN ``http://public@127.0.0.1:PORT/1``): it parses envelopes
    and counts error events by exception type. It keeps nothing else of them."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with contextlib.suppress(Exception):  # a malformed envelope is not counted, never fatal
                    sink.count(_decoded(body, self.headers.get("Content-Encoding", "")))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="sentry-sink", daemon=True)
        self._thread.start()

    @property
    def dsn(self) -> str:
        return f"http://public@127.0.0.1:{self.port}/1"

    def count(self, envelope: bytes) -> None:
        for item_type, payload in _envelope_items(envelope):
            if item_type != "event":
                continue
            event = json.loads(payload)
            values = (event.get("exception") or {}).get("values") or []
            # An event without an exception is a logged error: counted by its logger's name, never its text.
            kind = values[-1].get("type", "?") if values else f"log {event.get('logger', '?')}:{event.get('level')}"
            with self._lock:
                self.kinds[kind] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.kinds)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _decoded(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    if encoding == "br":
        import brotli  # type: ignore[import-not-found]  # only sent by an SDK that has it

        result: bytes = brotli.decompress(body)
        return result
    return body


def _envelope_items(envelope: bytes) -> list[tuple[str, bytes]]:
    """(type, payload) of each item: a header line, then per item a header line and a payload of ``length``
    bytes or up to the next newline."""
    _, _, rest = envelope.partition(b"\n")
    items = []
    while rest.strip():
        header_line, _, rest = rest.partition(b"\n")
        header = json.loads(header_line)
        length = header.get("length")
        if length is None:
            payload, _, rest = rest.partition(b"\n")
        else:
            payload, rest = rest[:length], rest[length + 1 :]
        items.append((str(header.get("type")), payload))
    return items

"""A webhook receiver for the tests and the benchmark: a real HTTP server that verifies every request's Standard
Webhooks signature with the ``standardwebhooks`` library and keeps what it got (the webhook-id, the type, the job,
whether the signature held, when). It answers ``answer`` (200 unless told; 503 plays a receiver that is down).

In a thread of the tests: ``with WebhookReceiver() as receiver: ...``, then ``receiver.secrets[path] = secret``.
As a process of its own (the benchmark): ``python -m testbed.webhook_receiver PORT SECRETS_JSON LOG_JSONL``, the
secrets by path read from a file, each request a JSON line of the log."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from testbed.stack import listening_socket


@dataclass(frozen=True)
class Received:
    path: str
    webhook_id: str
    type: str
    job_id: int | None
    status: str | None  # a job.ended event's status
    verified: bool
    answered: int
    at: float  # time.time()
    data: dict[str, Any] = field(default_factory=dict)


class WebhookReceiver:
    def __init__(self, *, log: Path | None = None) -> None:
        self.secrets: dict[str, str] = {}
        self.answer = 200
        self.received: list[Received] = []
        self.log = log
        self._lock = threading.Lock()
        self._listener = listening_socket()
        self.port = int(self._listener.getsockname()[1])
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self), bind_and_activate=False)
        self.server.socket.close()
        self.server.socket = self._listener
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def take(self, got: Received) -> None:
        with self._lock:
            self.received.append(got)
            if self.log is not None:
                with self.log.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(asdict(got)) + "\n")

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """At least ``count`` requests received (AssertionError after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            assert time.monotonic() < deadline, f"{len(self.received)} of {count} webhooks received"
            time.sleep(0.05)
        return list(self.received)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            secret = receiver.secrets.get(self.path)
            verified = False
            if secret is not None:
                try:
                    Webhook(secret).verify(body, dict(self.headers.items()))
                    verified = True
                except WebhookVerificationError:
                    verified = False
            sent = json.loads(body)
            data = sent.get("data", {})
            answer = receiver.answer if verified else 400
            receiver.take(
                Received(
                    self.path,
                    self.headers.get("webhook-id", ""),
                    sent.get("type", ""),
                    data.get("job_id"),
                    data.get("status"),
                    verified,
                    answer,
                    time.time(),
                    data,
                )
            )
            self.send_response(answer)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main(port: str, secrets: str, log: str) -> None:
    """Serve on 127.0.0.1:PORT until killed, with the secrets read from SECRETS (a JSON object by path)."""
    import socket

    receiver = WebhookReceiver(log=Path(log))
    receiver.secrets = json.loads(Path(secrets).read_text())
    receiver.server.socket.close()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(128)
    receiver.server.socket = listener
    receiver.server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:4])

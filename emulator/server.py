"""Running the emulator in a background thread, for tests, the demo and benchmarks."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any, Self

import httpx
import uvicorn

from emulator.app import create_app
from emulator.config import EmulatorConfig

_START_TIMEOUT_SECONDS = 15.0


class EmulatorServer:
    """An emulator served by uvicorn on ``host`` (127.0.0.1) and ``port`` (0: a free one), in a daemon thread.

    ``with EmulatorServer(config) as server:`` returns once the server answers. Point the Anthropic SDK at
    ``server.base_url`` and the OpenAI SDK at ``server.openai_base_url``; the admin helpers below call the
    admin API over HTTP.
    """

    def __init__(
        self,
        config: EmulatorConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
    ) -> None:
        self.config = config or EmulatorConfig()
        self.host = host
        self._socket = _listening_socket(host, port)
        self.port: int = self._socket.getsockname()[1]
        uvicorn_config = uvicorn.Config(create_app(self.config), log_level=log_level, lifespan="off")
        self._server = uvicorn.Server(uvicorn_config)
        self._thread = threading.Thread(target=self._serve, name=f"emulator:{self.port}", daemon=True)
        self._admin_client = httpx.Client(base_url=f"{self.base_url}/v1/emulator", timeout=10.0)
        # The admin routes want the key in force; ``configure`` and ``reset`` can change it.
        self._api_key = self.config.api_key

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        while True:
            try:
                self._admin_client.get("config", headers=self._key_header(), timeout=1.0).raise_for_status()
                return
            except httpx.HTTPError:
                if not self._thread.is_alive() or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the emulator did not start on {self.base_url}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=_START_TIMEOUT_SECONDS)
        self._socket.close()
        self._admin_client.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def stats(self) -> dict[str, Any]:
        return self._admin("GET", "stats")

    def billing(self) -> list[dict[str, Any]]:
        """The billing log: every request the model answered, with its request id, model and usage."""
        requests: list[dict[str, Any]] = self._admin("GET", "billing")["requests"]
        return requests

    def reset(self, *, keep_config: bool = False) -> None:
        self._admin("POST", "reset", {"keep_config": keep_config})
        if not keep_config:
            self._api_key = self.config.api_key

    def configure(self, **changes: Any) -> dict[str, Any]:
        """Change settings at run time, e.g. ``configure(limit=5000, faults={"script": ["429"]})``."""
        config = self._admin("POST", "config", changes)
        self._api_key = config["api_key"]
        return config

    def advance_clock(self, seconds: float) -> None:
        self._admin("POST", "clock", {"advance_seconds": seconds})

    def _admin(self, method: str, name: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self._admin_client.request(method, name, json=body, headers=self._key_header())
        if response.status_code >= 400:
            raise ValueError(f"emulator admin {name}: {response.json()['error']['message']}")
        result: dict[str, Any] = response.json()
        return result

    def _key_header(self) -> dict[str, str]:
        return {"x-api-key": self._api_key} if self._api_key is not None else {}

    def _serve(self) -> None:
        self._server.run(sockets=[self._socket])


def _listening_socket(host: str, port: int) -> socket.socket:
    # Created with an explicit IPPROTO_TCP so that asyncio turns on TCP_NODELAY for accepted connections (it
    # checks ``sock.proto``); without it every keep-alive reply waits ~40 ms for a delayed ACK.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(128)
    return listener

"""One webhook POST, on a connection to an address checked when it is made: the host is resolved at each send and
every address is checked (models/webhook_addresses.py) before connecting to it, so DNS rebinding cannot point a
registered name at a private address later. Redirects are not followed; the answer's body is never read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import httpcore

from models.webhook_addresses import AddressRefused, checked_addresses, split_url
from models.webhooks import Outcome

RETRIED_4XX = frozenset({408, 429})  # a timeout or a rate limit on the receiver's side: it is busy, not refusing
ERROR_CHARS = 200


class CheckedBackend(httpcore.SyncBackend):
    """httpcore's network backend, connecting only to addresses the check allows."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]]
        | None = None,
    ) -> httpcore.NetworkStream:
        addresses = checked_addresses(host, port, allow_private=self.allow_private)
        last: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as error:
                last = error
        raise last if last is not None else httpcore.ConnectError(f"no address for {host}")


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    status_code: int | None = None
    error: str | None = None


def post(url: str, body: bytes, headers: dict[str, str], *, timeout: float, allow_private: bool) -> Answer:
    """POST ``body`` to ``url`` and say what came of it: delivered, refused or down."""
    try:
        split_url(url)
        with httpcore.ConnectionPool(network_backend=CheckedBackend(allow_private=allow_private), retries=0) as pool:
            limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
            with pool.stream(
                "POST", url, headers=list(headers.items()), content=body, extensions={"timeout": limits}
            ) as response:
                return answer_of(response.status)
    except AddressRefused as refused:
        return Answer(Outcome.REFUSED, error=_short(f"address refused: {refused}"))
    except httpcore.TimeoutException as error:
        return Answer(Outcome.DOWN, error=_short(f"timeout: {type(error).__name__} after {timeout:g} s"))
    except (OSError, httpcore.NetworkError, httpcore.ProtocolError) as error:
        return Answer(Outcome.DOWN, error=_short(f"{type(error).__name__}: {error}"))


def answer_of(status: int) -> Answer:
    if 200 <= status < 300:
        return Answer(Outcome.DELIVERED, status)
    if status >= 500 or status in RETRIED_4XX:
        return Answer(Outcome.DOWN, status, f"HTTP {status}")
    return Answer(Outcome.REFUSED, status, f"HTTP {status}" + (" (redirects are not followed)" if status < 400 else ""))


def _short(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"

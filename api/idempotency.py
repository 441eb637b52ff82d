"""``Idempotency-Key`` on the POSTs that create or change something: the same key with the same request answers
what the first answered, for PLIMSOLL_IDEMPOTENCY_KEY_SECONDS (24 hours); with another request, a 422.

As Stripe does: keys are the tenant's own; the request is compared by its method, path and body (JSON compared as
data, an upload by its files, so a retry that re-encodes the same request is the same request); every answer
below 500 is kept, a refusal too, but a 429 (a rate or a quota, which a later retry may pass) and a 5xx (our
failure: nothing was stored, the retry runs again) free the key. A request that finds its key held by one still
running waits for that answer (polling the row, holding neither a thread nor a connection meanwhile), and is told
409 if none comes within ``WAIT_SECONDS``. The claim is a row inserted under the key's primary key
(models/idempotency.py), so it holds across every API process.

A route that changes something commits its change and its answer in one transaction (``HeldKey.commit``): a
retry of a request whose change was made always gets its answer, whatever fails after that commit (a busy pool,
a lost connection, a killed API process). Only answers of requests that changed nothing (refusals) are kept
afterwards, by the middleware."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

import anyio
from fastapi import Depends, Header, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from api.deps import TenantDep, database_of
from api.errors import error
from api.uploads import parse_multipart
from models.db import Database
from models.errors import InvalidInput
from models.idempotency import answer_key, claim_key, release_key
from models.settings import get_settings
from models.tables import IdempotencyKey
from worker.outages import is_outage

KEY_HEADER = "Idempotency-Key"
KEY_PATTERN = r"[!-~]{1,255}"
REPLAYED_HEADER = "Idempotent-Replayed"
WAIT_SECONDS = 60.0
NOT_KEPT = {status.HTTP_429_TOO_MANY_REQUESTS}
SCOPE_KEY = "plimsoll.idempotency"


class Answered(Exception):
    """The answer of a request that does not run: its key's kept answer, or why the key cannot be used."""

    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass
class HeldKey:
    """The request's key once it holds it (``key`` empty when it sent none), shared by the route and the
    middleware through the request's scope."""

    database: Database | None = None
    tenant_id: int = 0
    key: str = ""
    answered: bool = False

    def commit(self, session: Session, answer: BaseModel, status_code: int = status.HTTP_200_OK) -> Response:
        """Commit the route's change with its answer kept under the key in the same transaction, and answer it."""
        response = JSONResponse(jsonable_encoder(answer), status_code)
        if self.key:
            kind = response.headers["content-type"]
            answer_key(
                session,
                tenant_id=self.tenant_id,
                key=self.key,
                status_code=status_code,
                content_type=kind,
                body=bytes(response.body),
            )
        session.commit()
        self.answered = bool(self.key)
        return response


async def idempotency_key(
    request: Request,
    tenant: TenantDep,
    key: Annotated[
        str | None,
        Header(
            alias=KEY_HEADER,
            pattern=f"^{KEY_PATTERN}$",
            description="a key of the client's choosing, fresh for each operation (a UUID): a retry with it answers "
            "what the first request answered (for 24 hours), one with another body is refused (422)",
        ),
    ] = None,
) -> HeldKey:
    """Before the route runs: claim the key, or answer (``Answered``) with its kept answer or a refusal."""
    hold: HeldKey | None = request.scope.get(SCOPE_KEY)
    if key is None or hold is None:
        return HeldKey()
    body = await request.body()  # read already for a JSON route; api.limits.BodyLimit stops one over the limit
    database = database_of(request)
    claim = _Claim(database, tenant.id, key, fingerprint(request, body))
    answer = await claim.wait()
    if answer is not None:
        raise Answered(answer)
    hold.database, hold.tenant_id, hold.key = database, tenant.id, key
    return hold


KeyDep = Annotated[HeldKey, Depends(idempotency_key)]
"""A route that changes something takes the header, and commits with ``HeldKey.commit``."""


async def answered(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Answered)
    return exc.response


class Idempotency:
    """ASGI middleware: keeps the answer of a request that holds its key (``idempotency_key``) and did not commit
    it with its change, or frees the key when the answer is not to be kept."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or KEY_HEADER not in Headers(scope=scope):
            await self.app(scope, receive, send)
            return
        hold = HeldKey()
        started: Message = {}
        sent = bytearray()

        async def kept(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            elif message["type"] == "http.response.body":
                sent.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app({**scope, SCOPE_KEY: hold}, receive, kept)
        finally:
            if hold.database is not None and not hold.answered:
                code = int(started.get("status", status.HTTP_500_INTERNAL_SERVER_ERROR))
                content_type = Headers(raw=started.get("headers", [])).get("content-type")
                with anyio.CancelScope(shield=True):
                    await run_in_threadpool(_keep, hold, code, content_type, bytes(sent))


def _keep(hold: HeldKey, code: int, content_type: str | None, body: bytes) -> None:
    """The answer kept (or the key freed), tried again while the database is busy or away: a key left without its
    answer would answer its retries 409 until it counts as abandoned."""
    retrying = Retrying(
        retry=retry_if_exception(lambda error: isinstance(error, PoolTimeout) or is_outage(error)),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        stop=stop_after_delay(WAIT_SECONDS),
        reraise=True,
    )
    retrying(_keep_once, hold, code, content_type, body)


def _keep_once(hold: HeldKey, code: int, content_type: str | None, body: bytes) -> None:
    assert hold.database is not None
    with hold.database.sessions() as session:
        if code >= status.HTTP_500_INTERNAL_SERVER_ERROR or code in NOT_KEPT:
            release_key(session, tenant_id=hold.tenant_id, key=hold.key)
        else:
            answer_key(
                session, tenant_id=hold.tenant_id, key=hold.key, status_code=code, content_type=content_type, body=body
            )
            session.commit()


class _Claim:
    def __init__(self, database: Database, tenant_id: int, key: str, fingerprint: str) -> None:
        self.database = database
        self.tenant_id = tenant_id
        self.key = key
        self.fingerprint = fingerprint

    async def wait(self) -> Response | None:
        """None once this request holds the key; else what to answer instead of running it."""
        kept_for = timedelta(seconds=get_settings().idempotency_key_seconds)
        deadline = time.monotonic() + WAIT_SECONDS
        pause = 0.02
        while True:
            found = await run_in_threadpool(self._claim, kept_for)
            if found is None:
                return None
            if found.fingerprint != self.fingerprint:
                return error(
                    status.HTTP_422_UNPROCESSABLE_CONTENT,
                    f"this {KEY_HEADER} was used with another request (method, path or body): a key names one "
                    "request; send a fresh key for a new one",
                )
            if found.status_code is not None:
                return Response(
                    found.body,
                    found.status_code,
                    headers={REPLAYED_HEADER: "true"},
                    media_type=found.content_type,
                )
            if time.monotonic() > deadline:
                conflict = error(
                    status.HTTP_409_CONFLICT,
                    f"a request with this {KEY_HEADER} is still running: try again shortly for its answer",
                )
                conflict.headers["Retry-After"] = "1"
                return conflict
            await anyio.sleep(pause)
            pause = min(pause * 2, 0.5)

    def _claim(self, kept_for: timedelta) -> IdempotencyKey | None:
        with self.database.sessions() as session:
            return claim_key(
                session, tenant_id=self.tenant_id, key=self.key, fingerprint=self.fingerprint, kept_for=kept_for
            )


def fingerprint(request: Request, body: bytes) -> str:
    """sha256 of what makes two requests the same: the method, path and query, and the body as data."""
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    digest = hashlib.sha256(f"{request.method} {request.url.path}?{request.url.query}\n".encode())
    digest.update(f"{media_type}\n".encode())
    digest.update(_as_data(media_type, content_type, body))
    return digest.hexdigest()


def _as_data(media_type: str, content_type: str, body: bytes) -> bytes:
    """The body in one canonical form: JSON with its keys sorted and no spacing; an upload as its files' names and
    hashes (each client draws its own multipart boundary); else (or if unreadable) its bytes."""
    try:
        if media_type == "application/json":
            return json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
        if media_type == "multipart/form-data":
            files = [(each.name, hashlib.sha256(each.data).hexdigest()) for each in parse_multipart(body, content_type)]
            return json.dumps(files).encode()
    except (ValueError, RecursionError, InvalidInput):
        pass
    return body

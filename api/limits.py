"""One cap on every request body, the upload limit: a body over it is refused with a 413 before it is read whole,
whichever route it is for (FastAPI reads a JSON body whole before the route sees it)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import HTTPException, status
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error


def too_large(limit: int) -> str:
    """What a body over ``limit`` bytes is told: one document may have at most so many characters (a file
    over that must be split, however it is sent), and documents within it go in several requests."""
    from models.settings import get_settings

    max_chars = get_settings().max_document_chars
    return (
        f"the request body is larger than {limit:,} bytes, the room one document of the largest size takes: a "
        f"document may have at most {max_chars:,} characters (split a longer file into parts); documents within "
        "that limit can be uploaded in several requests"
    )


class BodyLimit:
    """ASGI middleware: a 413 for a body declared longer than ``limit()`` bytes, before the app runs; a 413 too as
    soon as a body that declared no length (chunked) passes it while the app reads it."""

    def __init__(self, app: ASGIApp, limit: Callable[[], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await error(status.HTTP_413_CONTENT_TOO_LARGE, too_large(limit))(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, too_large(limit))
            return message

        await self.app(scope, counted, send)

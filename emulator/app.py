"""The emulator as an ASGI application."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from emulator import routes_admin, routes_anthropic, routes_models, routes_openai
from emulator.config import EmulatorConfig
from emulator.serving import hide_dropped_connections_from_server_log
from emulator.state import EmulatorState


def create_app(config: EmulatorConfig | None = None) -> Starlette:
    """A fresh emulator with its own state. The tokenizer is loaded here, so a bad spec fails at once."""
    hide_dropped_connections_from_server_log()
    app = Starlette(
        routes=[
            Route("/v1/messages", routes_anthropic.create_message, methods=["POST"]),
            Route("/v1/messages/count_tokens", routes_anthropic.count_tokens, methods=["POST"]),
            Route("/v1/chat/completions", routes_openai.create_chat_completion, methods=["POST"]),
            Route("/v1/models/{model_id:path}", routes_models.retrieve_model, methods=["GET"]),
            Route("/v1/emulator/stats", routes_admin.get_stats, methods=["GET"]),
            Route("/v1/emulator/billing", routes_admin.get_billing, methods=["GET"]),
            Route("/v1/emulator/config", routes_admin.get_config, methods=["GET"]),
            Route("/v1/emulator/config", routes_admin.post_config, methods=["POST"]),
            Route("/v1/emulator/reset", routes_admin.post_reset, methods=["POST"]),
            Route("/v1/emulator/clock", routes_admin.post_clock, methods=["POST"]),
        ],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.emulator = EmulatorState(config or EmulatorConfig())
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods, answered in the error shape of the API the path belongs to."""
    assert isinstance(exc, HTTPException)
    if request.url.path.startswith("/v1/chat/") or request.url.path.startswith("/v1/completions"):
        body: dict[str, object] = {
            "error": {
                "message": f"{exc.detail}: {request.url.path}",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
    else:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        body = {
            "type": "error",
            "error": {"type": kind, "message": f"{exc.detail}: {request.method} {request.url.path}"},
        }
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

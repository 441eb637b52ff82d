"""The emulator as an ASGI application."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Route

from emulator import routes_admin, routes_anthropic, routes_openai
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
            Route("/v1/emulator/stats", routes_admin.get_stats, methods=["GET"]),
            Route("/v1/emulator/config", routes_admin.get_config, methods=["GET"]),
            Route("/v1/emulator/config", routes_admin.post_config, methods=["POST"]),
            Route("/v1/emulator/reset", routes_admin.post_reset, methods=["POST"]),
            Route("/v1/emulator/clock", routes_admin.post_clock, methods=["POST"]),
        ]
    )
    app.state.emulator = EmulatorState(config or EmulatorConfig())
    return app

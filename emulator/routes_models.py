"""``GET /v1/models/{model_id}``, answering as Anthropic's Models API does: the model's context window
(``max_input_tokens``, the emulator's limit) and its output limit (``max_tokens``). Every model id is served:
the emulator plays whichever model it is asked for."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from emulator import anthropic_wire
from emulator.serving import bearer_token
from emulator.state import EmulatorState

CREATED_AT = "2026-01-01T00:00:00Z"


async def retrieve_model(request: Request) -> Response:
    state: EmulatorState = request.app.state.emulator
    expected = state.config.api_key
    if expected is not None and expected not in (request.headers.get("x-api-key"), bearer_token(request)):
        body = anthropic_wire.error_body("authentication_error", "invalid x-api-key", "req_models")
        return JSONResponse(body, status_code=401)
    model_id = request.path_params["model_id"]
    return JSONResponse(
        {
            "type": "model",
            "id": model_id,
            "display_name": model_id,
            "created_at": CREATED_AT,
            "lifecycle": "active",
            "max_input_tokens": state.config.limit,
            "max_tokens": state.config.max_output_tokens,
        }
    )

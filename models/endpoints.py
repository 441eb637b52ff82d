"""Where a model's requests go, and with which key: the bundled emulator or a real provider's API.

- The emulator's own models (``plimsoll-emulator``, ``plimsoll-emulator-openai``) go to PLIMSOLL_EMULATOR_URL.
- A real model goes to its provider's API: the address in PLIMSOLL_<P>_BASE_URL, else <P>_BASE_URL (the official
  SDKs' variable), else the SDK's default; the key in PLIMSOLL_<P>_API_KEY, else <P>_API_KEY. Without a key a job
  on it is refused when it is submitted, never sent anywhere else.
- A real model runs on the emulator only where the operator says so: PLIMSOLL_REAL_MODELS_ON_EMULATOR=true, a
  provider's base URL set to the emulator's address, or the model's entry in PLIMSOLL_MODELS with
  ``"base_url": "emulator"``. Every such job records that the emulator answered it.

A job records its endpoint when it is created, and everything learned about a model (limits, calibration, rate
limits) is kept per endpoint and model: what the emulator taught never applies to a real API, nor one proxy's
counts to another's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from dotenv import dotenv_values

from models.catalogue import EMULATOR, ModelSpec, Provider
from models.errors import InvalidInput
from models.settings import Settings

DEFAULT_BASE_URLS: dict[str, str] = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}
EMULATOR_PATHS: dict[str, str] = {"anthropic": "", "openai": "/v1"}  # the emulator serves OpenAI's wire under /v1
PROVIDER_NAMES: dict[str, str] = {"anthropic": "Anthropic", "openai": "OpenAI"}


class NoRoute(InvalidInput):
    """A model whose requests have nowhere to go: no key for its provider, or no emulator configured."""


@dataclass(frozen=True)
class Endpoint:
    provider: Provider
    base_url: str
    emulator: bool  # the bundled emulator, not a real provider


def host_of(url: str) -> str:
    """The host (and port) of a base URL, as the person is shown it."""
    return urlsplit(url).netloc or url


def _normal(url: str) -> str:
    return url.strip().rstrip("/")


def emulator_address(provider: str, settings: Settings) -> str | None:
    """The emulator's base URL for ``provider``'s wire format; None where no emulator is configured."""
    if not settings.emulator_url:
        return None
    return _normal(settings.emulator_url) + EMULATOR_PATHS[provider]


def configured_base_url(provider: str, settings: Settings) -> str | None:
    return settings.anthropic_base_url if provider == "anthropic" else settings.openai_base_url


def configured_key(provider: str, settings: Settings) -> str | None:
    key = settings.anthropic_api_key if provider == "anthropic" else settings.openai_api_key
    return key.get_secret_value() if key is not None and key.get_secret_value() else None


def key_variables(provider: str) -> tuple[str, str]:
    """The settings that hold ``provider``'s key, the one that wins first."""
    return f"PLIMSOLL_{provider.upper()}_API_KEY", f"{provider.upper()}_API_KEY"


def base_url_variables(provider: str) -> tuple[str, str]:
    return f"PLIMSOLL_{provider.upper()}_BASE_URL", f"{provider.upper()}_BASE_URL"


def endpoint_for(spec: ModelSpec, settings: Settings) -> Endpoint:
    """Where jobs on ``spec`` are sent, by the rules above; NoRoute where they cannot be sent anywhere."""
    emulated = emulator_address(spec.provider, settings)
    if spec.base_url == EMULATOR or (spec.base_url is None and settings.real_models_on_emulator):
        if emulated is None:
            raise NoRoute(
                f"{spec.name} runs on the bundled emulator, and none is configured: start it (python -m emulator, "
                "or make up) and set PLIMSOLL_EMULATOR_URL to its address"
            )
        return Endpoint(spec.provider, emulated, emulator=True)
    base_url = _normal(
        spec.base_url or configured_base_url(spec.provider, settings) or DEFAULT_BASE_URLS[spec.provider]
    )
    if base_url == emulated:  # the operator pointed the provider at the emulator
        return Endpoint(spec.provider, base_url, emulator=True)
    if configured_key(spec.provider, settings) is None:
        first, second = key_variables(spec.provider)
        name = PROVIDER_NAMES[spec.provider]
        instead = "" if emulated is None else ", or let the emulator answer it (PLIMSOLL_REAL_MODELS_ON_EMULATOR=true)"
        raise NoRoute(
            f"{spec.name} is {name}'s model and no {name} key is set: set {second} (or {first}), "
            f"or choose plimsoll-emulator{instead}"
        )
    return Endpoint(spec.provider, base_url, emulator=False)


def api_key_for(endpoint: Endpoint, settings: Settings) -> str:
    """The key sent to ``endpoint``: the emulator's own (a real key is never sent to it), else the provider's."""
    if endpoint.emulator:
        return settings.emulator_api_key.get_secret_value()
    key = configured_key(endpoint.provider, settings)
    if key is None:
        first, second = key_variables(endpoint.provider)
        raise NoRoute(f"no {PROVIDER_NAMES[endpoint.provider]} key is set any more: set {second} (or {first})")
    return key


@dataclass(frozen=True)
class Route:
    """What ``plimsoll routes`` and make up's banner say of one provider."""

    provider: str
    endpoint: str
    endpoint_from: str
    key: str
    key_from: str


def _source(names: tuple[str, ...], dotenv: dict[str, str | None]) -> str | None:
    """Which of ``names`` gave the setting's value: the environment first, then .env (as pydantic-settings)."""
    for name in names:
        if os.environ.get(name) is not None:
            return name
    for name in names:
        if dotenv.get(name) is not None:
            return f"{name} in .env"
    return None


def masked(key: str) -> str:
    """A key as it may be shown: its first and last characters, never the whole of a real one."""
    if key == "emulator":
        return key
    return f"{key[:7]}…{key[-4:]}" if len(key) >= 20 else "set (too short to show a part)"


def routes(settings: Settings, *, env_file: str = ".env") -> list[Route]:
    """Each provider's endpoint and key for real models, and the emulator's, with where each came from."""
    dotenv = {k.upper(): v for k, v in dotenv_values(env_file).items()} if os.path.exists(env_file) else {}
    emulator_key = masked(settings.emulator_api_key.get_secret_value())
    table = []
    for provider in ("anthropic", "openai"):
        emulated = emulator_address(provider, settings)
        configured = configured_base_url(provider, settings)
        if settings.real_models_on_emulator and emulated is not None:
            endpoint, endpoint_from = emulated, "the emulator: PLIMSOLL_REAL_MODELS_ON_EMULATOR"
        elif configured:
            endpoint = _normal(configured)
            endpoint_from = _source(base_url_variables(provider), dotenv) or "the settings"
            endpoint_from += ": the emulator" if endpoint == emulated else ""
        else:
            endpoint, endpoint_from = DEFAULT_BASE_URLS[provider], "the SDK's default"
        key = configured_key(provider, settings)
        if endpoint == emulated:
            shown, key_from = emulator_key, "the emulator's"
        elif key is None:
            shown, key_from = (
                "none",
                f"{PROVIDER_NAMES[provider]}'s models are refused: set {key_variables(provider)[1]}",
            )
        else:
            shown, key_from = masked(key), _source(key_variables(provider), dotenv) or "the settings"
        table.append(Route(PROVIDER_NAMES[provider], endpoint, endpoint_from, shown, key_from))
    if settings.emulator_url:
        emulator = _normal(settings.emulator_url)
        emulator_from = _source(("PLIMSOLL_EMULATOR_URL",), dotenv) or "the settings"
    else:
        emulator, emulator_from = "none", "PLIMSOLL_EMULATOR_URL is not set: plimsoll-emulator is refused"
    key_from = _source(("PLIMSOLL_EMULATOR_API_KEY",), dotenv) or "the default: it accepts any key unless told"
    table.append(Route("emulator", emulator, emulator_from, emulator_key, key_from))
    return table

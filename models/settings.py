"""All configuration in one typed object, read from the environment (prefix ``PLIMSOLL_``) or a ``.env`` file."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PLIMSOLL_", env_file=".env", extra="ignore")

    database_url: str = "sqlite:///var/plimsoll.sqlite3"
    broker_url: str = "redis://127.0.0.1:6379/0"
    # "celery": steps go through the broker to `plimsoll worker` processes; "inprocess": a thread of this
    # process runs them (the embedded default: no Redis needed).
    queue: Literal["celery", "inprocess"] = "celery"

    anthropic_api_key: SecretStr = SecretStr("emulator")
    anthropic_base_url: str | None = None  # None: the SDK's default, api.anthropic.com
    openai_api_key: SecretStr = SecretStr("emulator")
    openai_base_url: str | None = None
    request_timeout_seconds: float = 600.0

    default_model: str = "plimsoll-emulator"
    models: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description='overrides of the model catalogue, e.g. {"claude-sonnet-4-5": {"default_budget": 150000}}',
    )

    sentry_dsn: str | None = None
    sentry_environment: str | None = None

    max_document_chars: int = 2_000_000
    max_instruction_chars: int = 20_000
    max_documents_per_job: int = 500
    max_steps_per_job: int = 1_000
    max_transient_retries: int = 6
    default_locale: str = "en"


@cache
def get_settings() -> Settings:
    return Settings()

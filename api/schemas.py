"""What the API takes and answers. The client parses answers into the same models."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from api.constants import MAX_ID
from models.options import JobOptions
from models.statuses import JobStatus, Strategy

T = TypeVar("T")

Id = Annotated[int, Field(ge=1, le=MAX_ID)]
"""An id in a path, a query or a body: out of range is a 422 naming the field, never a database error."""


def _written_as_a_day(value: object) -> object:
    # pydantic reads a number as seconds since 1970 (`to=0` would be 1970-01-01); a day is written YYYY-MM-DD.
    if isinstance(value, str) and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError("a day is written YYYY-MM-DD")
    return value


Day = Annotated[date, BeforeValidator(_written_as_a_day)]


ENDPOINT = "the host its requests go to, recorded when it was created (null: created before hosts were recorded)"
EMULATOR = "true: answered by the bundled emulator, not a real provider"


class Schema(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently ignored

    @field_validator("*")
    @classmethod
    def storable(cls, value: Any) -> Any:
        """Text PostgreSQL can store: no NUL character, no lone surrogate (JSON's "\\ud800" decodes to one)."""
        texts = value if isinstance(value, list) else [value]
        for text in texts:
            if isinstance(text, str):
                if (nul := text.find("\x00")) >= 0:
                    raise ValueError(f"contains a NUL character (U+0000) at offset {nul:,}")
                if not text.isascii():
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError as error:
                        raise ValueError(f"contains a lone surrogate at offset {error.start:,}") from None
        return value


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int = Field(description="items in the whole list")
    offset: int
    limit: int
    next_offset: int | None = Field(
        default=None,
        description="where the next page starts (None: this page is the last); a page of messages may"
        " stop short of `limit` at its bound in bytes",
    )


class ErrorBody(BaseModel):
    detail: str = Field(description="what was wrong, in words")
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="for malformed requests: each problem with its location"
    )


def problem_text(problem: Mapping[str, Any]) -> str:
    """What a pydantic problem says, in our words: a validator's own sentence without pydantic's "Value error, "
    (or "Assertion failed, ") before it."""
    raised = (problem.get("ctx") or {}).get("error")
    if problem.get("type") in ("value_error", "assertion_error") and raised is not None:
        return str(raised)
    return str(problem.get("msg", "invalid"))


# Documents


class DocumentIn(Input):
    name: str = Field(description="the name a job knows the document by", examples=["chapter-01.txt"])
    content: str = Field(description="the text")


class DocumentView(Schema):
    id: int
    name: str
    chars: int
    token_estimate: int
    created_at: datetime


class DocumentsCreated(BaseModel):
    documents: list[DocumentView]
    reused: list[int] = Field(
        default_factory=list,
        description="ids of the documents answered that were stored already (the same name and text): not copied",
    )


# Jobs


class JobIn(JobOptions, Input):
    """A job to create: what to do, over which documents, and its options (models/options.py)."""

    instruction: str = Field(description="what the agent should do")
    document_ids: list[Id] = Field(
        default_factory=list,
        description="the documents the job may read: at least one (POST /v1/jobs/check takes none, to check a job "
        "before its documents are uploaded)",
    )


class ContinueIn(JobOptions, Input):
    """The next step, for a new chat. Options left out are the old job's (its budget at most what the model
    takes), but the strategy: Plimsoll's unless given."""

    instruction: str = Field(min_length=1, description="the next step, for the new chat")


class JobCheck(BaseModel):
    """What a job would be, had it been submitted: the defaults filled in, the checks passed."""

    model: str
    endpoint: str | None = Field(default=None, description=ENDPOINT)
    emulator: bool = Field(default=False, description=EMULATOR)
    budget: int
    hard_limit: int
    max_steps: int
    max_input_tokens: int
    max_cost_usd: float
    compaction: str
    warnings: list[str] = Field(default_factory=list, description="e.g. the model is deprecated or retired")
    max_document_chars: int = Field(description="the most characters one document may have: upload no larger file")


class Reading(BaseModel):
    """The document a running job (or one of its subagents) read last, and how far into it."""

    document: str
    document_number: int = Field(description="its place among the job's documents, from 1")
    page: int = Field(description="pages of it read so far, this one included")
    pages: int | None = Field(description="about how many pages it has, from the pages read; null on the first")
    characters_from: int = Field(description="where the page read last starts")
    characters: int = Field(description="the document's length")


class Progress(BaseModel):
    steps_done: int
    documents_total: int = Field(description="documents the job may read")
    documents_read: list[str] = Field(
        description="distinct documents read so far by the job and its subagents, in the order first read"
    )
    reading: Reading | None = Field(default=None, description="while the job runs: what it read last")


class Usage(BaseModel):
    input_tokens: int = Field(description="uncached input tokens, as the provider reported them")
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_vs_uncached: float | None = Field(
        default=None,
        description="the job's input cost at Anthropic's cache prices (writes 1.25x, reads 0.1x) over what the same "
        "input tokens would cost uncached: under 1, the cache saved; over 1, its writes cost more than they saved "
        "so far. A ratio of input prices, not the job's cost: that is `cost`. Null before the first reply",
    )
    cache_read_share: float | None = Field(
        description="cache_read / (input + cache_read + cache_write); null before the first reply"
    )


class CostSplit(BaseModel):
    """USD as the provider billed it (the ledger: each request at the prices it was charged at)."""

    total_usd: float
    uncached_input_usd: float = Field(description="input read neither from nor into the prompt cache")
    cache_write_usd: float
    cache_read_usd: float
    output_usd: float
    requests: int = Field(description="requests billed (refusals, billed nothing, are not counted)")
    by_kind: dict[str, float] = Field(
        description="USD by kind: step, compaction, replan (sent again, smaller, after a rejection as too long), "
        "wasted (a paid reply not used: a step run twice, a reply lost in a database outage), refused (a 429 or "
        "a rejection: 0)"
    )


class JobCostLine(CostSplit):
    job_id: int
    kind: str = Field(description="main or subagent")


class JobCost(CostSplit):
    """What a job cost: a main job with all its subagents."""

    jobs: list[JobCostLine] = Field(description="each job's own line: the main job's first, then each subagent's")


class LastRequest(Schema):
    step: int
    stage: str = Field(description="how far fitting had to go: the stage that made the request fit")
    planning_budget: int = Field(description="the budget after the calibration factor")
    calibration_factor: float
    estimated_tokens: int
    reported_input_tokens: int | None = Field(description="input + cache write + cache read, as reported")
    messages_sent: int
    cleared: int = Field(description="tool results sent as the cleared note")
    dropped: int = Field(description="old messages left out")
    stop_reason: str | None
    created_at: datetime


class ChildJob(BaseModel):
    id: int
    status: JobStatus
    error: str | None = Field(description="why it did not finish, if it did not")
    steps_done: int = Field(description="steps the subagent has completed")


class JobSummary(Schema):
    id: int
    kind: str
    parent_id: int | None
    status: JobStatus
    model: str
    endpoint: str | None = Field(default=None, description=ENDPOINT)
    emulator: bool = Field(default=False, description=EMULATOR)
    steps_done: int
    cost_usd: float | None = Field(default=None, description="USD billed, a main job's subagents included")
    instruction_excerpt: str
    created_at: datetime
    finished_at: datetime | None


class Limits(Schema):
    max_steps: int
    max_input_tokens: int
    max_cost_usd: float = Field(description="what the job and its subagents may spend together, in USD")
    wind_down: bool = Field(description="the agent is told what is left when a budget nears its end")


class JobView(BaseModel):
    id: int
    kind: str
    parent_id: int | None
    status: JobStatus
    instruction: str
    model: str
    provider: str
    endpoint: str | None = Field(default=None, description=ENDPOINT)
    emulator: bool = Field(default=False, description=EMULATOR)
    budget: int
    hard_limit: int
    locale: str
    strategy: Strategy
    safety_net: bool
    compaction: str | None = Field(
        default=None, description="auto, off or summarize_all; null only from a server older than this field"
    )
    progress: Progress
    usage: Usage = Field(description="this job's own tokens (a main job's subagents have their own; `cost` has all)")
    cost: JobCost | None = Field(default=None, description="USD billed; for a main job its subagents included")
    retries: int
    limits: Limits
    last_request: LastRequest | None
    final_answer: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    children: list[ChildJob] = Field(description="subagent jobs started by this job")
    warnings: list[str] = Field(default_factory=list, description="e.g. that the job's model is deprecated or retired")
    continued_from: int | None = Field(default=None, description="the job this one continues in a new chat")
    continued_by: int | None = Field(default=None, description="the job that continues this one in a new chat")
    last_event_id: int | None = Field(
        default=None, description="its latest event when this was read: follow its events after it (`?after=`)"
    )
    held: bool = Field(
        default=False, description="its history is kept whatever the tenant's retention policy (POST .../hold)"
    )
    history_purged_at: datetime | None = Field(
        default=None,
        description="when its history (messages, steps, summaries; its subagents' too) was purged under the tenant's "
        "retention policy: its answer, notices and usage stay, its messages and steps answer 410",
    )


class MessageView(Schema):
    seq: int
    role: str
    content: str | list[dict[str, Any]]
    token_estimate: int
    step: int = Field(description="the step that wrote the message; 0 for the instruction")
    created_at: datetime


class SummaryView(Schema):
    first_seq: int = Field(description="the first stored message it covers (GET .../messages?offset=first_seq)")
    last_seq: int = Field(description="the last stored message it covers")
    token_estimate: int
    replayed: bool = Field(description="its request replayed the previous request's prefix (read from the cache)")
    content: str


class StepView(Schema):
    step: int
    stage: str
    planning_budget: int
    calibration_factor: float
    estimated_tokens: int
    reported_input_tokens: int | None
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    messages_sent: int
    cleared: list[str] = Field(description="tool_use ids whose results were sent as the cleared note")
    dropped: int
    stop_reason: str | None
    overhead_ms: float
    created_at: datetime
    summary: SummaryView | None = Field(
        default=None, description="a compaction (stage 'compaction'): the summary it wrote, which later requests send"
    )
    emulator: bool = Field(default=False, description="sent to the bundled emulator, not a real provider")


# Notices


class NoticeView(Schema):
    id: int
    job_id: int
    emulator: bool = Field(default=False, description="the job was answered by the bundled emulator")
    text: str
    created_at: datetime
    read_at: datetime | None


class Health(BaseModel):
    status: str
    database: str


class RatesView(BaseModel):
    """USD per million tokens."""

    input: float = Field(description="uncached input")
    output: float
    cache_write_5m: float = Field(description="a token written to the prompt cache with the 5-minute TTL")
    cache_write_1h: float = Field(description="a token written to the prompt cache with the 1-hour TTL")
    cache_read: float = Field(description="a token read from the prompt cache")


class TierView(BaseModel):
    above_input_tokens: int = Field(description="a request with more input tokens pays these rates for every token")
    rates: RatesView


class PricesView(BaseModel):
    """A model's prices now, and where they came from."""

    rates: RatesView
    tiers: list[TierView] = Field(default_factory=list, description="long-context prices, where the provider has them")
    priced_as: str = Field(description="the model whose prices these are (the emulator's models take a real one's)")
    source: str = Field(description="genai-prices and its version, or the operator's PLIMSOLL_PRICES")
    since: date | None = Field(default=None, description="when these prices took effect, where the source says")
    at: datetime = Field(description="the moment they are the prices of")


class ModelView(BaseModel):
    name: str
    provider: str
    context_limit: int = Field(description="input and output tokens the model takes in one request (its window)")
    default_budget: int = Field(description="input tokens per request a job plans for unless it sets its budget")
    max_output_tokens: int
    retires: date | None = Field(default=None, description="the day its provider stops serving it")
    replacement: str | None = None
    prices: PricesView | None = Field(default=None, description="none: the operator must set it (PLIMSOLL_PRICES)")
    unpriced: str | None = Field(default=None, description="why it has no price, and how to give it one")


class ModelList(BaseModel):
    default_model: str = Field(description="the model of a job that names none")
    models: list[ModelView]


class EventView(BaseModel):
    """One event of an event stream (`GET /v1/jobs/{id}/events`, `GET /v1/events`), the `data` of its SSE message;
    the message's `id` and `event` are its id and type."""

    id: int = Field(description="the event's id: resume after it with Last-Event-ID")
    type: str = Field(description="step, compaction, subagent.started, subagent.ended, notice, status, job.ended, gap")
    job_id: int = Field(description="the main job it belongs to (a subagent's say which in data.subagent)")
    created_at: datetime
    data: dict[str, Any] = Field(description="what it tells: see the docs (docs/api-cli.md)")


class UsagePeriod(CostSplit):
    period: str = Field(description="a day (2026-12-04) or a month (2026-12), UTC")


class UsageModel(CostSplit):
    model: str


class UsageJob(CostSplit):
    job_id: int = Field(description="a main job; its subagents' requests are counted in it")


class UsageReport(CostSplit):
    """A tenant's spending over a range of days (UTC), from the ledger."""

    first_day: date = Field(description="the first day counted (`from`)")
    last_day: date = Field(description="the last day counted (`to`)")
    days: list[UsagePeriod]
    months: list[UsagePeriod]
    models: list[UsageModel]
    jobs: list[UsageJob]


# Webhooks


class WebhookIn(Input):
    url: str = Field(max_length=2000, description="an http:// or https:// address on a public network")
    events: list[str] = Field(
        min_length=1,
        max_length=20,
        description="event types: job.ended, job.needs_new_chat (a job.ended whose status is needs_new_chat), "
        "notice, step, compaction, subagent.started, subagent.ended, status",
    )


class WebhookView(Schema):
    id: int
    url: str
    events: list[str] = Field(validation_alias=AliasChoices("event_types", "events"))  # the row's, or the answer's
    created_at: datetime
    failures: int = Field(description="attempts failed in a row (0: the receiver answers)")
    retry_at: datetime | None = Field(description="when a receiver that is down is tried again")


class WebhookList(BaseModel):
    items: list[WebhookView]


class WebhookCreated(WebhookView):
    secret: str = Field(description="the signing secret (whsec_...), shown this once")


class WebhookAttemptView(Schema):
    outcome: str = Field(description="delivered (2xx), refused (a final 4xx) or down (5xx, 408, 429, timeout, ...)")
    status_code: int | None
    error: str | None
    manual: bool = Field(description="sent again by hand")
    started_at: datetime
    duration_ms: int


class WebhookDeliveryView(Schema):
    id: int
    endpoint_id: int
    event_id: int
    job_id: int
    webhook_id: str = Field(description="the webhook-id header: the same at every attempt")
    type: str
    status: str = Field(description="pending, delivered, refused, failed (given up) or cancelled")
    next_attempt_at: datetime | None
    give_up_at: datetime
    created_at: datetime
    delivered_at: datetime | None
    attempts: list[WebhookAttemptView] = Field(default_factory=list, description="every attempt, oldest first")

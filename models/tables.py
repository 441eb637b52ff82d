"""The stored state of Plimsoll: tenants and their keys, documents, jobs, messages, steps and notices."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, ClassVar, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    Numeric,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    select,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column, relationship

from models.statuses import JobKind as JobKind
from models.statuses import JobStatus as JobStatus
from models.statuses import Strategy as Strategy

AnEnum = TypeVar("AnEnum", bound=enum.StrEnum)

Json = JSON().with_variant(JSONB(), "postgresql")
Id = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements only INTEGER primary keys
Usd = Numeric(20, 10)  # exact to a ten-millionth of a cent: a cheap model's token costs about 10^-8 USD


class TextEnum(TypeDecorator[AnEnum]):
    """An enum (a job's status, its strategy) stored as its text, a VARCHAR as the migrations made it, and read back
    as the enum."""

    impl = String
    cache_ok = True

    def __init__(self, kind: type[AnEnum], length: int) -> None:
        super().__init__(length)
        self.kind = kind

    def process_bind_param(self, value: AnEnum | None, dialect: Dialect) -> str | None:
        return None if value is None else self.kind(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> AnEnum | None:
        return None if value is None else self.kind(value)


def now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: DateTime(timezone=True),
        dict[str, Any]: Json,
        list[Any]: Json,
        bool: Boolean,
    }


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=now)
    # The most main jobs it may run at once (None: PLIMSOLL_MAX_RUNNING_JOBS_PER_TENANT; 0: no cap).
    max_running_jobs: Mapped[int | None] = mapped_column(default=None)
    # The operator's limits of this tenant (plimsoll tenant limits), each winning over its setting (None: the
    # setting's): the most a job may ask for (and its default), and its quotas (0: none).
    max_steps_per_job: Mapped[int | None] = mapped_column(default=None)  # PLIMSOLL_MAX_STEPS_PER_JOB
    max_input_tokens_per_job: Mapped[int | None] = mapped_column(BigInteger, default=None)
    max_queued_jobs: Mapped[int | None] = mapped_column(default=None)  # PLIMSOLL_MAX_QUEUED_JOBS_PER_TENANT
    max_document_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    max_cost_usd_per_job: Mapped[Decimal | None] = mapped_column(Usd, default=None)  # PLIMSOLL_MAX_COST_USD_PER_JOB
    daily_usd: Mapped[Decimal | None] = mapped_column(Usd, default=None)  # PLIMSOLL_DAILY_USD_PER_TENANT (0: none)
    monthly_usd: Mapped[Decimal | None] = mapped_column(Usd, default=None)  # PLIMSOLL_MONTHLY_USD_PER_TENANT
    # How many days after a job ends its history is purged (models/retention.py; 0: kept for ever).
    retention_days: Mapped[int | None] = mapped_column(default=None)  # PLIMSOLL_RETENTION_DAYS


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the key; the key is never stored
    label: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=now)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Document(Base):
    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    content: Mapped[str] = mapped_column(Text)
    chars: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(Integer)  # of its UTF-8 text: what the tenant's storage quota counts
    token_estimate: Mapped[int] = mapped_column(Integer)  # under the default ("claude") profile
    # sha256 of the UTF-8 text: the same text uploaded again under the same name is the same document
    content_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    created_at: Mapped[datetime] = mapped_column(default=now)

    __table_args__ = (Index("ix_documents_tenant_sha256", "tenant_id", "content_sha256"),)


class Body(Base):
    """A text kept once per tenant under its sha256: the pages of deleted documents that kept histories refer to
    (models/pages.py). Never shared between tenants."""

    __tablename__ = "bodies"

    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)  # of the text's UTF-8
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=now)


PACKABLE = text("parent_id IS NULL AND history_packed_at IS NULL AND history_purged_at IS NULL")


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16), default=JobKind.MAIN)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    parent_tool_use_id: Mapped[str | None] = mapped_column(String(128))  # the delegate call this job answers
    # The job this one continues in a new chat (the old one grew too long, or failed, or the person moved on).
    continued_from_id: Mapped[int | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="SET NULL"), index=True, unique=True, default=None
    )
    instruction: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(100))
    provider: Mapped[str] = mapped_column(String(32))
    # Where its requests go (models/endpoints.py), decided when it is created: the base URL, and whether that is
    # the bundled emulator. None: a job created before endpoints were recorded (resolved from the settings).
    endpoint: Mapped[str | None] = mapped_column(String(255), default=None)
    emulator: Mapped[bool] = mapped_column(default=False, server_default=false())
    profile: Mapped[str] = mapped_column(String(32))
    budget: Mapped[int] = mapped_column(Integer)  # input tokens per request
    hard_limit: Mapped[int] = mapped_column(Integer)  # the model's context limit
    max_output_tokens: Mapped[int] = mapped_column(Integer)
    locale: Mapped[str] = mapped_column(String(16), default="en")
    # How requests are fitted: Plimsoll's way, or one of the published failures reproduced (see Strategy).
    strategy: Mapped[Strategy] = mapped_column(TextEnum(Strategy, 16), default=Strategy.PLIMSOLL)
    safety_net: Mapped[bool] = mapped_column(default=True)  # tell the agent that old results are cleared
    # What stages 2 and 3 would drop is summarized first ("auto"), or not ("off"); "summarize_all" is the
    # summarize-everything baseline of the benchmark (plimsoll.compaction).
    compaction: Mapped[str] = mapped_column(String(16), default="auto")
    status: Mapped[JobStatus] = mapped_column(TextEnum(JobStatus, 20), default=JobStatus.QUEUED, index=True)
    step: Mapped[int] = mapped_column(Integer, default=0)  # steps completed
    final_answer: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)  # as reported: uncached input
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    retries: Mapped[int] = mapped_column(Integer, default=0)  # transient failures retried, over the whole job
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # failed tries of the current step
    # When the provider's rate limit first refused the current step (None: it has not): how long it has waited
    rate_limited_since: Mapped[datetime | None] = mapped_column(default=None)
    # Who runs the current step until when (a token per delivery), or, with no owner, when the reconciler takes
    # the job back if no delivery has claimed it by then. Every unfinished job has a deadline.
    lease_owner: Mapped[str | None] = mapped_column(String(64), default=None)
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    # How often the reconciler queued the current step again with no delivery claiming it since: each time, the
    # next deadline is twice as far (worker/lease.py), so a step that only waits behind a long backlog is not
    # queued again at every lease.
    requeues: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Runaway protection: limits of this job (from the settings or the submit), and how often each distinct tool
    # call (sha256 of its name and input, shortened) was made.
    max_steps: Mapped[int] = mapped_column(Integer, default=1_000)
    max_input_tokens: Mapped[int] = mapped_column(BigInteger, default=50_000_000)
    # What a main job and its subagents may spend together, in USD (a subagent keeps its main job's), and whether
    # the agent is told what is left near the end (worker/budgets.py)
    max_cost_usd: Mapped[Decimal] = mapped_column(Usd, default=Decimal(250), server_default="250")
    wind_down: Mapped[bool] = mapped_column(default=True, server_default=true())
    tool_calls: Mapped[dict[str, Any]] = mapped_column(default=dict)
    calibration: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # What its read_document calls read, kept as steps commit (models/reads.py), so the job's view reads no
    # history: None for a job from before it was kept, whose view reads its messages.
    reads: Mapped[dict[str, Any] | None] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=now)
    updated_at: Mapped[datetime] = mapped_column(default=now, onupdate=now)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    # Retention (models/retention.py): a held job keeps its history whatever the tenant's policy; a purged one
    # keeps its row, answer, notices and usage, and the names of the documents its history showed it read.
    held: Mapped[bool] = mapped_column(default=False, server_default=false())
    history_purged_at: Mapped[datetime | None] = mapped_column(default=None)
    # When the retention sweep packed its family's messages into a row per job (models/packing.py).
    history_packed_at: Mapped[datetime | None] = mapped_column(default=None)
    purged_documents_read: Mapped[list[Any] | None] = mapped_column(default=None)

    # Loaded when read (a new subagent, a continuation, the API's view), not with every read of the row: a step
    # reads its job's row twice and its documents never.
    documents: Mapped[list[JobDocument]] = relationship(
        order_by="JobDocument.position", cascade="all, delete-orphan", lazy="select"
    )

    __table_args__ = (
        Index("ix_jobs_unfinished_lease", "status", "lease_until"),
        # The main jobs whose messages the sweep may pack, oldest ended first (models/packing.py).
        Index("ix_jobs_packable", "finished_at", postgresql_where=PACKABLE, sqlite_where=PACKABLE),
    )

    @property
    def total_input_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


class JobDocument(Base):
    """A document a job may read, under the name the job knows it by."""

    __tablename__ = "job_documents"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(255))

    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_job_documents_job_name"),)


class Message(Base):
    """One stored message of a job's conversation. Written once, never changed: the estimate and the outline
    are computed when it is written."""

    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)  # 0, 1, 2, ... within the job
    step: Mapped[int] = mapped_column(Integer)  # the step that wrote it (0: the instruction)
    role: Mapped[str] = mapped_column(String(16))
    # A string or a list of content blocks, as the API takes it; a result that is a page of a document holds a
    # reference to the page instead of its text (models/pages.py: read it through models/history.py).
    content: Mapped[Any] = mapped_column(Json)
    token_estimate: Mapped[int] = mapped_column(Integer)
    outline: Mapped[dict[str, Any]] = mapped_column()  # plimsoll.Outline.to_dict(): planning without the body
    created_at: Mapped[datetime] = mapped_column(default=now)

    __table_args__ = (UniqueConstraint("job_id", "seq", name="uq_messages_job_seq"),)


class PackedHistory(Base):
    """The messages of an ended job, packed into one row once its family had ended (models/packing.py): every
    column of each message, in the order they were stored, as zlib-compressed JSON. A job's messages are either
    rows of ``messages`` or one row here, never both."""

    __tablename__ = "packed_histories"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    messages: Mapped[bytes] = mapped_column(LargeBinary)
    count: Mapped[int] = mapped_column(Integer)
    packed_at: Mapped[datetime] = mapped_column(default=now)


class Step(Base):
    """What one step sent and got back, compactly: why the request looked the way it did."""

    __tablename__ = "steps"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    stage: Mapped[str] = mapped_column(String(20))
    planning_budget: Mapped[int] = mapped_column(Integer)  # the budget after the calibration factor
    calibration_factor: Mapped[float] = mapped_column()
    estimated_tokens: Mapped[int] = mapped_column(Integer)
    reported_input_tokens: Mapped[int | None] = mapped_column(Integer)  # input + cache write + cache read
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    messages_sent: Mapped[int] = mapped_column(Integer)
    cleared: Mapped[list[Any]] = mapped_column(default=list)  # tool_use_ids sent as the note
    dropped: Mapped[int] = mapped_column(Integer, default=0)
    stop_reason: Mapped[str | None] = mapped_column(String(40))
    overhead_ms: Mapped[float] = mapped_column(default=0.0)  # time in our code, the model's reply excluded
    # A first attempt rejected as too long, then planned again: our estimate of it and the size the provider
    # stated. The columns above describe the second attempt.
    rejected_estimate: Mapped[int | None] = mapped_column(Integer, default=None)
    rejected_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(default=now)

    __table_args__ = (UniqueConstraint("job_id", "step", name="uq_steps_job_step"),)


class Summary(Base):
    """A summary of the stored messages ``first_seq .. last_seq`` of a job, written by the model in a step of its
    own (a compaction); later requests carry it in place of those messages, which stay stored unchanged."""

    __tablename__ = "summaries"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)  # the step whose request asked for it
    first_seq: Mapped[int] = mapped_column(Integer)  # always 1: a summary starts after the first message
    last_seq: Mapped[int] = mapped_column(Integer)  # the last message it covers (a tool result or user turn)
    content: Mapped[str] = mapped_column(Text)
    token_estimate: Mapped[int] = mapped_column(Integer)  # of the block carrying it in the first message
    replayed: Mapped[bool] = mapped_column(default=False)  # its request replayed the previous request's prefix
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)  # its request's usage, as reported
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=now)

    __table_args__ = (UniqueConstraint("job_id", "step", name="uq_summaries_job_step"),)


class ModelFacts(Base):
    """What Plimsoll learned about a model across jobs: how its real counts compare with our estimates (so a new
    job starts calibrated), and its limits as the provider's models endpoint gives them."""

    __tablename__ = "model_facts"

    # Per endpoint and model: an emulator, a proxy and the real API may serve one model name and count differently.
    endpoint: Mapped[str] = mapped_column(String(255), primary_key=True)
    model: Mapped[str] = mapped_column(String(100), primary_key=True)
    profile: Mapped[str] = mapped_column(String(32))  # the estimate profile the calibration is for
    calibration: Mapped[dict[str, Any]] = mapped_column(default=dict)  # plimsoll.Calibrator.to_dict()
    context_limit: Mapped[int | None] = mapped_column(Integer, default=None)
    max_output_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    limits_checked_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=now, onupdate=now)


class Notice(Base):
    """A plain message for the person, e.g. that the conversation grew too long for the model."""

    __tablename__ = "notices"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=now)
    read_at: Mapped[datetime | None] = mapped_column(default=None)
    # Whether the bundled emulator answered the job, as the job recorded it (read with the notice, not stored).
    emulator: Mapped[bool] = column_property(select(Job.emulator).where(Job.id == job_id).scalar_subquery())

    __table_args__ = (Index("ix_notices_tenant_unread", "tenant_id", "read_at"),)


class IdempotencyKey(Base):
    """A tenant's ``Idempotency-Key`` and the answer of the first request that sent it (api/idempotency.py): a
    request with the same key and the same fingerprint gets that answer again, one with another is refused. A row
    without an answer is a request in progress."""

    __tablename__ = "idempotency_keys"

    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))  # sha256 of the method, path and body
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    content_type: Mapped[str | None] = mapped_column(String(100), default=None)
    body: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)  # the answer as it was sent
    created_at: Mapped[datetime] = mapped_column(default=now, index=True)  # expiry counts from here


class Event(Base):
    """Something that happened to a job, told to its person and their systems (``models.events``): written in the
    transaction that makes it true, so an event exists only once what it reports is committed. Ids grow in commit
    order closely enough for a reader to resume after the last one it saw (``Last-Event-ID``)."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))  # the main job it belongs to
    type: Mapped[str] = mapped_column(String(40))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)  # what a client needs, never the history's text
    created_at: Mapped[datetime] = mapped_column(default=now)

    __table_args__ = (Index("ix_events_tenant_id", "tenant_id", "id"), Index("ix_events_job_id", "job_id", "id"))


class Charge(Base):
    """A request as its provider billed it (``models.ledger``): one row per request sent and answered, or refused
    (a 429, a too-long rejection: 0), with the prices it was charged at, so a later price change rewrites nothing."""

    __tablename__ = "charges"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))  # the job that sent it
    main_job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))  # models.ledger.ChargeKind
    model: Mapped[str] = mapped_column(String(100))
    prices: Mapped[dict[str, Any]] = mapped_column(default=dict)  # priced_as, source, the rates used (USD/Mtok)
    uncached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    uncached_usd: Mapped[Decimal] = mapped_column(Usd, default=Decimal(0))
    cache_write_usd: Mapped[Decimal] = mapped_column(Usd, default=Decimal(0))
    cache_read_usd: Mapped[Decimal] = mapped_column(Usd, default=Decimal(0))
    output_usd: Mapped[Decimal] = mapped_column(Usd, default=Decimal(0))
    total_usd: Mapped[Decimal] = mapped_column(Usd, default=Decimal(0))
    delivery: Mapped[str | None] = mapped_column(String(32))  # the delivery of the step that sent it (its lease owner)
    request_id: Mapped[str | None] = mapped_column(String(200))  # the provider's id of the request, where it gives one
    created_at: Mapped[datetime] = mapped_column(default=now)

    __table_args__ = (
        Index("ix_charges_tenant_created", "tenant_id", "created_at"),
        Index("ix_charges_job_step", "job_id", "step"),
    )


class WebhookEndpoint(Base):
    """A tenant's receiver of events (models/webhooks.py): the types it wants, its signing secret, and whether it is
    down (consecutive failed attempts, and when it may be tried again: one delivery at a time probes it)."""

    __tablename__ = "webhook_endpoints"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    event_types: Mapped[list[Any]] = mapped_column(default=list)
    secret: Mapped[str] = mapped_column(String(100))  # whsec_..., shown once when the endpoint is made
    created_at: Mapped[datetime] = mapped_column(default=now)
    removed_at: Mapped[datetime | None] = mapped_column(default=None)  # kept for its deliveries' history
    failures: Mapped[int] = mapped_column(Integer, default=0)
    retry_at: Mapped[datetime | None] = mapped_column(default=None)


class WebhookDelivery(Base):
    """One event for one endpoint: the outbox row, written in the event's transaction, and the truth about whether
    it still has to be sent. Its ``webhook_id`` is the same at every attempt, so a receiver can drop repeats."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("webhook_endpoints.id", ondelete="CASCADE"))
    event_id: Mapped[int] = mapped_column(ForeignKey("events.id", ondelete="CASCADE"))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    webhook_id: Mapped[str] = mapped_column(String(80), unique=True)
    type: Mapped[str] = mapped_column(String(40))  # the payload's type (models/webhooks.py)
    status: Mapped[str] = mapped_column(String(20))  # models.webhooks.DeliveryStatus
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(default=now)  # None once it is final
    give_up_at: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=now)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (
        UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_endpoint_event"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_tenant_id", "tenant_id", "id"),
        Index("ix_webhook_deliveries_endpoint_id", "endpoint_id", "id"),
        Index("ix_webhook_deliveries_job_id", "job_id"),
    )


class WebhookAttempt(Base):
    """One try at sending a delivery and what came of it: delivered (2xx), refused (a 4xx that is final) or down
    (5xx, 408, 429, a timeout, no connection), with the status code and a short error, never the payload."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True)
    outcome: Mapped[str] = mapped_column(String(20))  # models.webhooks.Outcome
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    error: Mapped[str | None] = mapped_column(String(200), default=None)
    manual: Mapped[bool] = mapped_column(default=False)  # sent again by hand (plimsoll webhooks redeliver)
    started_at: Mapped[datetime] = mapped_column(default=now)
    duration_ms: Mapped[int] = mapped_column(Integer, default=0)

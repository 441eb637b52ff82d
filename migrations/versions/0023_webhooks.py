"""webhooks: tenants' endpoints, the outbox of deliveries written with each event, and every attempt

Revision ID: 0023
Revises: 0020
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0023"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", ID, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("event_types", JSON, nullable=False),
        sa.Column("secret", sa.String(length=100), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("removed_at", WHEN, nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("retry_at", WHEN, nullable=True),
    )
    op.create_index("ix_webhook_endpoints_tenant_id", "webhook_endpoints", ["tenant_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", ID, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("endpoint_id", ID, sa.ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), nullable=False),
        sa.Column("event_id", ID, sa.ForeignKey("events.id", ondelete="CASCADE"), nullable=False),
        sa.Column("job_id", ID, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("webhook_id", sa.String(length=80), nullable=False, unique=True),
        sa.Column("type", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", WHEN, nullable=True),
        sa.Column("give_up_at", WHEN, nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("delivered_at", WHEN, nullable=True),
        sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_endpoint_event"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"])
    op.create_index("ix_webhook_deliveries_tenant_id", "webhook_deliveries", ["tenant_id", "id"])
    op.create_index("ix_webhook_deliveries_endpoint_id", "webhook_deliveries", ["endpoint_id", "id"])
    op.create_index("ix_webhook_deliveries_job_id", "webhook_deliveries", ["job_id"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("delivery_id", ID, sa.ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=200), nullable=True),
        sa.Column("manual", sa.Boolean(), nullable=False),
        sa.Column("started_at", WHEN, nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
    )
    op.create_index("ix_webhook_attempts_delivery_id", "webhook_attempts", ["delivery_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_attempts_delivery_id", table_name="webhook_attempts")
    op.drop_table("webhook_attempts")
    for index in ("job_id", "endpoint_id", "tenant_id", "due"):
        op.drop_index(f"ix_webhook_deliveries_{index}", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_webhook_endpoints_tenant_id", table_name="webhook_endpoints")
    op.drop_table("webhook_endpoints")

"""durable steps: leases, per-step attempts, runaway limits

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        jobs.add_column(sa.Column("lease_owner", sa.String(length=64), nullable=True))
        jobs.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
        jobs.add_column(sa.Column("max_steps", sa.Integer(), nullable=False, server_default="1000"))
        jobs.add_column(sa.Column("max_input_tokens", sa.BigInteger(), nullable=False, server_default="50000000"))
        jobs.add_column(sa.Column("tool_calls", JSON, nullable=False, server_default="{}"))
        jobs.create_index("ix_jobs_unfinished_lease", ["status", "lease_until"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_index("ix_jobs_unfinished_lease")
        for column in ("tool_calls", "max_input_tokens", "max_steps", "lease_until", "lease_owner", "attempts"):
            jobs.drop_column(column)

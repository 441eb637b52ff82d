"""retention: each tenant's own days before an ended job's history is purged; a job's hold, when its history was
purged, and the names of the documents that history showed it read

Revision ID: 0017
Revises: 0022
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as tenants:
        tenants.add_column(sa.Column("retention_days", sa.Integer(), nullable=True))
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("held", sa.Boolean(), server_default=sa.false(), nullable=False))
        jobs.add_column(sa.Column("history_purged_at", sa.DateTime(timezone=True), nullable=True))
        jobs.add_column(
            sa.Column("purged_documents_read", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("purged_documents_read")
        jobs.drop_column("history_purged_at")
        jobs.drop_column("held")
    with op.batch_alter_table("tenants") as tenants:
        tenants.drop_column("retention_days")

"""jobs.reads: what a job's read_document calls read, kept as steps commit, so that its view reads no history

Revision ID: 0022
Revises: 0019
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0022"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # No default: the jobs from before are NULL, and their view reads their messages as it did.
    op.add_column("jobs", sa.Column("reads", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "reads")

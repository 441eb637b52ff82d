"""charges: which delivery of a step sent each request, and the provider's id of it

Revision ID: 0020
Revises: 0017 (0014 when written; re-chained after main gained 0021)
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("charges", sa.Column("delivery", sa.String(length=32), nullable=True))
    op.add_column("charges", sa.Column("request_id", sa.String(length=200), nullable=True))
    op.create_index("ix_charges_job_step", "charges", ["job_id", "step"])


def downgrade() -> None:
    op.drop_index("ix_charges_job_step", table_name="charges")
    op.drop_column("charges", "request_id")
    op.drop_column("charges", "delivery")

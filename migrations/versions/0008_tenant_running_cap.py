"""a tenant may have its own cap on running jobs

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as tenants:
        tenants.add_column(sa.Column("max_running_jobs", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as tenants:
        tenants.drop_column("max_running_jobs")

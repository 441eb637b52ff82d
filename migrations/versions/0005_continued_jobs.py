"""a job may continue another in a new chat

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("continued_from_id", ID, nullable=True))
        jobs.create_index("ix_jobs_continued_from_id", ["continued_from_id"], unique=True)
        jobs.create_foreign_key(
            "fk_jobs_continued_from_id_jobs", "jobs", ["continued_from_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_constraint("fk_jobs_continued_from_id_jobs", type_="foreignkey")
        jobs.drop_index("ix_jobs_continued_from_id")
        jobs.drop_column("continued_from_id")

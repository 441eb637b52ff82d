"""packed histories: an ended family's messages kept as one compressed row per job (models/packing.py), and when
each job's were packed

Revision ID: 0025
Revises: 0024
"""

import json
import zlib
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
WHEN = sa.DateTime(timezone=True)
PACKABLE = "parent_id IS NULL AND history_packed_at IS NULL AND history_purged_at IS NULL"
FIELDS = ("id", "seq", "step", "role", "content", "token_estimate", "outline", "created_at")  # a packed message


def upgrade() -> None:
    op.create_table(
        "packed_histories",
        sa.Column("job_id", ID, sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("messages", sa.LargeBinary(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("packed_at", WHEN, nullable=False),
    )
    op.add_column("jobs", sa.Column("history_packed_at", WHEN, nullable=True))
    op.create_index(
        "ix_jobs_packable", "jobs", ["finished_at"], postgresql_where=sa.text(PACKABLE), sqlite_where=sa.text(PACKABLE)
    )


def downgrade() -> None:
    """Every packed history back into rows of messages first: nothing stored is lost."""
    bind = op.get_bind()
    packed = sa.table("packed_histories", sa.column("job_id", ID), sa.column("messages", sa.LargeBinary()))
    messages = sa.table(
        "messages",
        *(sa.column(name, ID) for name in ("id", "job_id")),
        *(sa.column(name, sa.Integer()) for name in ("seq", "step", "token_estimate")),
        sa.column("role", sa.String()),
        *(sa.column(name, JSON) for name in ("content", "outline")),
        sa.column("created_at", WHEN),
    )
    for job_id, data in bind.execute(sa.select(packed.c.job_id, packed.c.messages)).all():
        rows = [dict(zip(FIELDS, row, strict=True)) for row in json.loads(zlib.decompress(data))]
        for row in rows:
            row["job_id"], row["created_at"] = job_id, datetime.fromisoformat(row["created_at"])
        bind.execute(messages.insert(), rows)
    op.drop_table("packed_histories")
    op.drop_index("ix_jobs_packable", table_name="jobs")
    with op.batch_alter_table("jobs") as jobs:  # SQLite drops a column by copying the table
        jobs.drop_column("history_packed_at")

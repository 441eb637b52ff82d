"""the operator's limits per tenant (ceilings of a job's steps and input tokens, quotas of queued jobs and stored
bytes); each document's size in bytes, which the storage quota adds up

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIMITS = (
    ("max_steps_per_job", sa.Integer()),
    ("max_input_tokens_per_job", sa.BigInteger()),
    ("max_queued_jobs", sa.Integer()),
    ("max_document_bytes", sa.BigInteger()),
)


def upgrade() -> None:
    with op.batch_alter_table("tenants") as tenants:
        for name, kind in LIMITS:
            tenants.add_column(sa.Column(name, kind, nullable=True))
    with op.batch_alter_table("documents") as documents:
        documents.add_column(sa.Column("bytes", sa.Integer(), nullable=True))
    size = "octet_length(content)" if op.get_bind().dialect.name == "postgresql" else "length(CAST(content AS BLOB))"
    op.execute(f"UPDATE documents SET bytes = {size}")
    with op.batch_alter_table("documents") as documents:
        documents.alter_column("bytes", existing_type=sa.Integer(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("documents") as documents:
        documents.drop_column("bytes")
    with op.batch_alter_table("tenants") as tenants:
        for name, _kind in reversed(LIMITS):
            tenants.drop_column(name)

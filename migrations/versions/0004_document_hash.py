"""documents' content hash, for de-duplication per tenant

Revision ID: 0004
Revises: 0003
"""

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 500


def upgrade() -> None:
    with op.batch_alter_table("documents") as documents:
        documents.add_column(sa.Column("content_sha256", sa.String(length=64), nullable=True))
        documents.create_index("ix_documents_tenant_sha256", ["tenant_id", "content_sha256"], unique=False)
    _hash_existing_documents()


def _hash_existing_documents() -> None:
    """Documents stored before this revision get their hash too, a batch at a time (contents can be megabytes)."""
    connection = op.get_bind()
    table = sa.table("documents", sa.column("id", sa.BigInteger), sa.column("content", sa.Text),
                     sa.column("content_sha256", sa.String))  # fmt: skip
    while True:
        rows = connection.execute(
            sa.select(table.c.id, table.c.content).where(table.c.content_sha256.is_(None)).limit(BATCH)
        ).all()
        if not rows:
            return
        for row in rows:
            digest = hashlib.sha256(row.content.encode("utf-8")).hexdigest()
            connection.execute(sa.update(table).where(table.c.id == row.id).values(content_sha256=digest))


def downgrade() -> None:
    with op.batch_alter_table("documents") as documents:
        documents.drop_index("ix_documents_tenant_sha256")
        documents.drop_column("content_sha256")

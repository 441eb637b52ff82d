"""charges: the ledger, each request as its provider billed it, with the prices it was charged at

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
USD = sa.Numeric(20, 10)
TOKENS = ("uncached", "cache_write", "cache_read", "output")


def upgrade() -> None:
    op.create_table(
        "charges",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", ID, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("job_id", ID, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("main_job_id", ID, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("prices", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        *(sa.Column(f"{kind}_tokens", sa.Integer(), nullable=False) for kind in TOKENS),
        *(sa.Column(f"{kind}_usd", USD, nullable=False) for kind in (*TOKENS, "total")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_charges_main_job_id", "charges", ["main_job_id"])
    op.create_index("ix_charges_tenant_created", "charges", ["tenant_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_charges_tenant_created", table_name="charges")
    op.drop_index("ix_charges_main_job_id", table_name="charges")
    op.drop_table("charges")

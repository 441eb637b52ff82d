"""model facts (calibration across jobs, learned limits); re-planned steps

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_facts",
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("profile", sa.String(length=32), nullable=False),
        sa.Column(
            "calibration", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("context_limit", sa.Integer(), nullable=True),
        sa.Column("max_output_tokens", sa.Integer(), nullable=True),
        sa.Column("limits_checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model"),
    )
    with op.batch_alter_table("steps") as steps:
        steps.add_column(sa.Column("rejected_estimate", sa.Integer(), nullable=True))
        steps.add_column(sa.Column("rejected_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps") as steps:
        steps.drop_column("rejected_tokens")
        steps.drop_column("rejected_estimate")
    op.drop_table("model_facts")

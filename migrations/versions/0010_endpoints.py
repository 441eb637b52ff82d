"""jobs record their endpoint (and whether it is the bundled emulator); model facts are kept per endpoint and model

Revision ID: 0010
Revises: 0009

Facts learned before this revision do not say which endpoint taught them (the emulator or a real API), so they
are kept under the endpoint "" (unknown), which no job uses: limits are learned again at the next job's start,
calibration within its first steps. Jobs created before it keep a null endpoint, resolved from the settings.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = "model, profile, calibration, context_limit, max_output_tokens, limits_checked_at, updated_at"


def _facts_table(name: str, *, with_endpoint: bool) -> None:
    op.create_table(
        name,
        *([sa.Column("endpoint", sa.String(length=255), nullable=False)] if with_endpoint else []),
        sa.Column("model", sa.String(length=100), nullable=False),
        sa.Column("profile", sa.String(length=32), nullable=False),
        sa.Column(
            "calibration", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("context_limit", sa.Integer(), nullable=True),
        sa.Column("max_output_tokens", sa.Integer(), nullable=True),
        sa.Column("limits_checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(*(["endpoint", "model"] if with_endpoint else ["model"]), name=f"{name}_pkey"),
    )


def _replace_facts_with(table: str) -> None:
    """``table`` becomes model_facts, its key named as if it had been made so (PostgreSQL keeps a renamed table's
    key under its old name)."""
    op.drop_table("model_facts")
    op.rename_table(table, "model_facts")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER INDEX {table}_pkey RENAME TO model_facts_pkey")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("endpoint", sa.String(length=255), nullable=True))
        jobs.add_column(sa.Column("emulator", sa.Boolean(), nullable=False, server_default=sa.false()))
    _facts_table("model_facts_by_endpoint", with_endpoint=True)
    op.execute(f"INSERT INTO model_facts_by_endpoint (endpoint, {COLUMNS}) SELECT '', {COLUMNS} FROM model_facts")
    _replace_facts_with("model_facts_by_endpoint")


def downgrade() -> None:
    _facts_table("model_facts_by_model", with_endpoint=False)
    op.execute(f"INSERT INTO model_facts_by_model ({COLUMNS}) SELECT {COLUMNS} FROM model_facts WHERE endpoint = ''")
    _replace_facts_with("model_facts_by_model")
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("emulator")
        jobs.drop_column("endpoint")

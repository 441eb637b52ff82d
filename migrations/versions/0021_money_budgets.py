"""budgets in money: a job's (max_cost_usd, shared with its subagents) and whether its agent is told what is left
(wind_down); the operator's money limits per tenant (a job's ceiling, a day's and a month's budget)

Revision ID: 0021
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

USD = sa.Numeric(20, 10)
TENANT_LIMITS = ("max_cost_usd_per_job", "daily_usd", "monthly_usd")


def upgrade() -> None:
    with op.batch_alter_table("tenants") as tenants:
        for name in TENANT_LIMITS:
            tenants.add_column(sa.Column(name, USD, nullable=True))
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("max_cost_usd", USD, nullable=False, server_default="250"))
        jobs.add_column(sa.Column("wind_down", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("wind_down")
        jobs.drop_column("max_cost_usd")
    with op.batch_alter_table("tenants") as tenants:
        for name in reversed(TENANT_LIMITS):
            tenants.drop_column(name)

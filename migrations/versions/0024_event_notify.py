"""events announce themselves: a trigger queues the NOTIFY that a step sent as a statement of its own

Revision ID: 0024
Revises: 0023
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The payload models.events.CHANNEL's listeners read: tenant, job and event ids.
FUNCTION = """
CREATE FUNCTION plimsoll_event_notify() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('plimsoll_events', NEW.tenant_id || ':' || NEW.job_id || ':' || NEW.id);
  RETURN NULL;
END
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":  # SQLite has no NOTIFY: its listeners poll
        return
    op.execute(FUNCTION)
    op.execute(
        "CREATE TRIGGER events_notify AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION plimsoll_event_notify()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER events_notify ON events")
    op.execute("DROP FUNCTION plimsoll_event_notify()")

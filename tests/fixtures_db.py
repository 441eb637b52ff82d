"""Fixtures (filled in by the part that owns them)."""

"""Plimsoll's storage: SQLAlchemy models, the engine and sessions, and the data functions over them."""

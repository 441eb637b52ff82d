"""Numbers the API and its command line share, in modules that import nothing: the command line starts
without loading the API's libraries."""

from __future__ import annotations

from models.integers import MAX_ID, MAX_INT

__all__ = ["DEFAULT_API_URL", "MAX_ID", "MAX_INT", "MAX_LIMIT", "PAGE_SIZE"]

MAX_LIMIT = 1_000  # items in one page of a list
PAGE_SIZE = 100  # items in one page when the caller names no limit
DEFAULT_API_URL = "http://127.0.0.1:8000"

"""Numbers the API and its command line share, in a module that imports nothing: the command line starts
without loading the API's libraries."""

from __future__ import annotations

MAX_ID = 2**63 - 1  # PostgreSQL's bigint, the type of every id
MAX_INT = 2**31 - 1  # PostgreSQL's integer
MAX_LIMIT = 1_000  # items in one page of a list
DEFAULT_API_URL = "http://127.0.0.1:8000"

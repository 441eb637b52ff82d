"""The ranges of PostgreSQL's integer columns, in a module that imports nothing: the API's bounds and the command
line's come from here, and the job options check against them."""

from __future__ import annotations

MAX_ID = 2**63 - 1  # PostgreSQL's bigint, the type of every id
MAX_INT = 2**31 - 1  # PostgreSQL's integer

# The widest limits a job may have, whatever the operator allows: steps, and input tokens over all its steps.
MAX_STEPS = 100_000
MIN_INPUT_TOKENS = 1_000
MAX_INPUT_TOKENS = 10**12

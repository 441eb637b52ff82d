"""What a job's input cost, at Anthropic's prompt-cache prices, against what it would have cost uncached."""

from __future__ import annotations

from models.prices import FIVE_MINUTES
from models.tables import Job


def cost_vs_uncached(job: Job) -> float:
    """Paid input ÷ uncached input; call it once the job has input tokens."""
    paid = FIVE_MINUTES.cost(uncached=job.input_tokens, written=job.cache_write_tokens, read=job.cache_read_tokens)
    return paid / job.total_input_tokens

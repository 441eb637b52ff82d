"""What a job's input cost, at Anthropic's prompt-cache prices, against what it would have cost uncached."""

from __future__ import annotations

from models.tables import Job

CACHE_WRITE_PRICE, CACHE_READ_PRICE = 1.25, 0.1  # relative to an uncached input token (5-minute cache)


def cost_vs_uncached(job: Job) -> float:
    """Paid input ÷ uncached input; call it once the job has input tokens."""
    paid = job.input_tokens + CACHE_WRITE_PRICE * job.cache_write_tokens + CACHE_READ_PRICE * job.cache_read_tokens
    return paid / job.total_input_tokens

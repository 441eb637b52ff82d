"""Worker-process time spent waiting for capacity, as the worker processes themselves counted it.

Every worker process observes (worker/metrics.py, prometheus-client's multiprocess files): how long each step
without capacity was told to wait (admission said wait, or the provider answered 429), and how long the process
stayed busy with that step after it knew (``plimsoll_capacity_wait_held_seconds``). A process that slept out its
waits would hold about as long as it was told; one that hands the step back to the broker holds for a transaction
and an enqueue. The benchmark gives each worker instance a metrics folder of its own and reads them here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

TOLD = ("plimsoll_admission_wait_seconds", "plimsoll_rate_limit_wait_seconds")
HELD_SHARE_GOAL = 0.01  # held at most 1 % of the waits told: a process that slept would hold 100 %


@dataclass(frozen=True)
class CapacitySleep:
    deliveries: int  # deliveries that had to wait for capacity (admission or 429)
    told: float  # seconds they were told to wait, in all
    held: float  # seconds worker processes stayed busy with them once they knew, in all
    longest: float  # the longest one delivery held, at most (the histogram's bucket bound)

    @property
    def met(self) -> bool | None:
        if not self.deliveries or self.told <= 0:
            return None  # nothing waited: not measured
        return self.held <= HELD_SHARE_GOAL * self.told

    def shown(self) -> str:
        if not self.deliveries:
            return "no waits"
        return f"{self.held:.2f} of {self.told:,.0f} ({self.deliveries} waits, each ≤ {self.longest:g})"


def read(folders: Iterable[Path]) -> CapacitySleep:
    deliveries, told, held, longest = 0, 0.0, 0.0, 0.0
    for folder in folders:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(folder))  # type: ignore[no-untyped-call]
        buckets: dict[float, float] = {}
        for metric in registry.collect():
            for sample in metric.samples:
                if metric.name == "plimsoll_capacity_wait_held_seconds":
                    if sample.name.endswith("_sum"):
                        held += sample.value
                    elif sample.name.endswith("_count"):
                        deliveries += int(sample.value)
                    elif sample.name.endswith("_bucket"):
                        bound = float(sample.labels["le"])
                        buckets[bound] = buckets.get(bound, 0.0) + sample.value
                elif metric.name in TOLD and sample.name.endswith("_sum"):
                    told += sample.value
        if buckets:
            total = max(buckets.values())
            longest = max(longest, min(bound for bound, count in buckets.items() if count >= total))
    return CapacitySleep(deliveries=deliveries, told=told, held=held, longest=longest)

"""What a chaos run was given and what it found: shared by the harness (``bench.chaos``) and its report
(``bench.chaos_report``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos_checks import Checks, Submitted
from bench.paid import Paid

CODE_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ChaosConfig:
    broker: str = "redis"
    jobs: int = 40
    workers: int = 2
    seconds: float = 90.0  # the fault window
    settle_seconds: float = 240.0  # how long to wait after the last fault before calling the rest stuck
    seed: int = 1
    too_long_jobs: int = 2
    fault_rate: float = 0.2
    latency: float = 0.25
    lease_seconds: int = 30
    reconcile_every_seconds: int = 10
    code_dir: Path = CODE_DIR
    keep_logs: bool = False  # leave the processes' logs in the run's folder (its path is printed)


@dataclass
class FaultRecord:
    kind: str
    started: float  # seconds after the start of the fault window
    ended: float
    detail: str


@dataclass
class ChaosResult:
    config: ChaosConfig
    queue: str
    code: str
    submitted: list[Submitted] = field(default_factory=list)
    submit_failures: int = 0
    worker_exits: int = 0  # worker main processes that exited on their own, restarted by the supervisor
    faults: list[FaultRecord] = field(default_factory=list)
    last_fault: float = 0.0  # seconds after the start of the fault window
    all_ended_at: float | None = None  # idem; None: some job never ended
    wall_seconds: float = 0.0
    checks: Checks = field(default_factory=Checks)
    sentry: dict[str, int] = field(default_factory=dict)
    emulator_requests: int = 0
    emulator_rejections: dict[str, int] = field(default_factory=dict)
    paid: Paid | None = None  # from the ledger

    @property
    def recovery_seconds(self) -> float | None:
        if self.all_ended_at is None:
            return None
        return max(0.0, self.all_ended_at - self.last_fault)

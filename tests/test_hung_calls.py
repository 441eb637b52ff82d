"""No model call hangs for long: connect and read-idle timeouts (the Anthropic reply is streamed), a deadline
sized from the call's output allowance, a lease that stops being renewed at that deadline, and a hung call
retried as a transient fault."""

from __future__ import annotations

import time
import uuid

import pytest

from emulator import EmulatorServer
from models.db import Database
from models.settings import Settings
from models.tables import Job, JobStatus
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_worker import new_job, services
from worker.errors import Transient
from worker.lease import Heartbeat
from worker.providers import AnthropicProvider, OpenAIProvider, timeouts
from worker.providers.base import Timeouts
from worker.step import run_step

HELLO = [{"role": "user", "content": "Hello."}]


def test_the_default_timeouts_are_minutes_at_most_and_the_deadline_grows_with_the_output() -> None:
    defaults = timeouts(Settings())
    assert defaults.connect <= 30 and defaults.idle <= 300
    assert defaults.deadline(1_000) < defaults.deadline(16_000) <= 20 * 60  # a full 16k reply: well under 600 s + idle


@pytest.mark.parametrize("adapter", [AnthropicProvider, OpenAIProvider])
def test_a_hung_call_is_a_transient_fault_within_the_idle_timeout(
    emulator_reset: EmulatorServer, adapter: type[AnthropicProvider] | type[OpenAIProvider]
) -> None:
    emulator_reset.configure(faults={"script": ["hang"], "hang_seconds": 5})
    base_url = emulator_reset.base_url if adapter is AnthropicProvider else emulator_reset.openai_base_url
    # OpenAI's reply is not streamed: its whole deadline is its read timeout (idle + 20 output tokens at 20/s).
    provider = adapter(api_key=TEST_API_KEY, base_url=base_url, timeouts=Timeouts(idle=1.0, connect=1.0))
    started = time.monotonic()
    with pytest.raises(Transient, match="timeout"):
        provider.send(model="m", system="", messages=HELLO, tools=[], max_tokens=20)
    assert time.monotonic() - started < 4.5  # not the 5 s the emulator holds the call
    assert provider.send(model="m", system="", messages=HELLO, tools=[], max_tokens=20).content  # the next is served
    assert emulator_reset.stats()["rejections"] == {"hung": 1}


def test_a_hung_call_releases_its_step_to_a_retry(database: Database, emulator_reset: EmulatorServer) -> None:
    emulator_reset.configure(faults={"script": ["hang"], "hang_seconds": 5})
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url, timeouts=Timeouts(idle=1.0))
    job_id = new_job(database, {"a.txt": "Alpha. " * 20})
    steps = services(database, provider, [])
    retried = run_step(job_id, steps)
    assert retried.action == "retry"
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert (job.attempts, job.lease_owner, job.status) == (1, None, JobStatus.RUNNING)
    with database.session() as session:
        session.get_one(Job, job_id).lease_until = None  # the retry's countdown has passed
    assert run_step(job_id, steps).action == "continued"


def test_the_lease_is_not_renewed_past_the_calls_deadline(database: Database) -> None:
    job_id = new_job(database, {"a.txt": "Alpha."})
    owner = uuid.uuid4().hex
    with database.session() as session:
        session.get_one(Job, job_id).lease_owner = owner
    with Heartbeat(database, job_id, owner, seconds=3.0, for_seconds=1.5) as heartbeat:
        time.sleep(1.2)  # the scenario: the call outlives its deadline (1.5 s) while the lease (3 s) would last
        assert heartbeat._thread.is_alive()
        time.sleep(1.5)  # the deadline passed at 1.5 s; the next beat, at 2 s, is not sent
        assert not heartbeat._thread.is_alive()

"""Webhooks (models/webhooks.py, worker/webhooks.py): endpoints registered through the API, an outbox row written
with each event in its own transaction, and delivery by a real Celery worker to a real local receiver that checks
every signature with the ``standardwebhooks`` library; a receiver that is down (5xx, no connection) retried and
one that refuses (4xx) not; a delivery sent again by hand with its own webhook-id; private addresses refused unless
the operator allows them, at registration and again at the send."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

import worker.webhook_tasks  # noqa: F401  (this process announces the deliveries it writes to the broker)
from models.db import Database
from models.events import EventType, record
from models.jobs import create_job
from models.settings import get_settings
from models.tables import Job, WebhookAttempt, WebhookDelivery, WebhookEndpoint, now
from models.webhook_addresses import AddressRefused, check_url
from models.webhooks import NEEDS_NEW_CHAT, DeliveryStatus, Outcome, add_endpoint, set_announcer, webhook_id
from testbed.stack import environment, free_port
from testbed.webhook_receiver import WebhookReceiver
from tests.support import wait_until
from tests.support_api import new_tenant, serve_api
from tests.support_webhooks import happen
from worker.webhook_http import answer_of
from worker.webhook_tasks import announce, sweep_now
from worker.webhooks import backoff_seconds, deliver


@pytest.fixture
def allow_private() -> Iterator[None]:
    """The operator's leave to call private addresses: the receiver listens on 127.0.0.1."""
    with environment({"PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE": "true"}):
        yield


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as started:
        yield started


def endpoint_for(database: Database, tenant_id: int, url: str, events: list[str]) -> tuple[int, str]:
    with database.session() as session:
        endpoint = add_endpoint(session, tenant_id=tenant_id, url=url, event_types=events)
        return endpoint.id, endpoint.secret


def listening(receiver: WebhookReceiver, database: Database, events: list[str]) -> tuple[int, int]:
    """A new tenant with an endpoint at the receiver (whose secret the receiver learns): (tenant, endpoint)."""
    tenant_id, _key = new_tenant(database)
    path = f"/hook/{uuid.uuid4().hex[:8]}"
    endpoint_id, secret = endpoint_for(database, tenant_id, receiver.url(path), events)
    receiver.secrets[path] = secret
    return tenant_id, endpoint_id


def deliveries_of(database: Database, endpoint_id: int) -> list[WebhookDelivery]:
    with database.session() as session:
        found = session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id).order_by(WebhookDelivery.id)
        )
        return list(found)


def attempts_of(database: Database, delivery_id: int) -> list[WebhookAttempt]:
    with database.session() as session:
        found = session.scalars(
            select(WebhookAttempt).where(WebhookAttempt.delivery_id == delivery_id).order_by(WebhookAttempt.id)
        )
        return list(found)


def settled(database: Database, endpoint_id: int, count: int) -> list[WebhookDelivery] | None:
    found = deliveries_of(database, endpoint_id)
    final = [d for d in found if d.status != DeliveryStatus.PENDING]
    return found if len(found) == count and len(final) == count else None


# Where webhooks may go


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.5/hook",
        "http://169.254.169.254/latest/meta-data",  # the cloud's metadata service
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
    ],
)
def test_private_loopback_and_link_local_addresses_are_refused_by_default(url: str) -> None:
    assert get_settings().webhooks_allow_private is False
    with pytest.raises(AddressRefused, match="PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE"):
        check_url(url, allow_private=False)
    check_url(url.replace("localhost", "127.0.0.1"), allow_private=True)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "http://user:pw@1.1.1.1/x", "not a url", "http://[::1/x"])
def test_what_is_not_an_http_address_is_refused(url: str) -> None:
    with pytest.raises(AddressRefused):
        check_url(url, allow_private=True)


def test_a_public_address_is_allowed() -> None:
    check_url("https://1.1.1.1/hook", allow_private=False)


def test_the_api_refuses_a_private_address_unless_the_operator_allows_it(database: Database) -> None:
    with serve_api(database) as api:
        caller = api.tenant()
        body = {"url": "http://127.0.0.1:9/hook", "events": ["job.ended"]}
        refused = caller.post("/v1/webhooks", json=body)
        assert refused.status_code == 422
        assert "loopback" in refused.json()["detail"]
        with environment({"PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE": "true"}):
            assert caller.post("/v1/webhooks", json=body).status_code == 201


def test_an_address_allowed_at_registration_is_checked_again_at_the_send(
    database: Database, receiver: WebhookReceiver
) -> None:
    """A name that resolved to a public address when it was registered may resolve to a private one later (DNS
    rebinding): the send checks the address it connects to, and refuses it."""
    with environment({"PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE": "true"}):
        tenant_id, endpoint_id = listening(receiver, database, ["job.ended"])
    set_announcer(None)  # sent by hand below, with the default settings
    try:
        happen(database, tenant_id, EventType.ENDED, {"status": "succeeded"})
    finally:
        set_announcer(announce)
    (delivery,) = deliveries_of(database, endpoint_id)
    assert deliver(database, delivery.id, get_settings(), lambda *_: None) == Outcome.REFUSED
    (attempt,) = attempts_of(database, delivery.id)
    assert attempt.outcome == Outcome.REFUSED and attempt.status_code is None
    assert attempt.error is not None and "loopback" in attempt.error
    assert receiver.received == []


# Registration through the API


def test_endpoints_are_registered_listed_and_removed_with_a_secret_shown_once(
    database: Database, allow_private: None
) -> None:
    with serve_api(database) as api:
        caller = api.tenant()
        created = caller.post(
            "/v1/webhooks", json={"url": "http://127.0.0.1:9/a", "events": ["job.ended", NEEDS_NEW_CHAT, "notice"]}
        )
        assert created.status_code == 201, created.text
        assert created.json()["secret"].startswith("whsec_")
        listed = caller.get("/v1/webhooks").json()["items"]
        assert [e["id"] for e in listed] == [created.json()["id"]]
        assert "secret" not in listed[0] and listed[0]["events"] == ["job.ended", NEEDS_NEW_CHAT, "notice"]
        assert api.tenant().get("/v1/webhooks").json() == {"items": []}  # another tenant's are not seen
        unknown = caller.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/a", "events": ["job.done"]})
        assert unknown.status_code == 422 and "job.done" in unknown.json()["detail"]
        removed = api.client.delete(f"/v1/webhooks/{created.json()['id']}", headers=caller.headers)
        assert removed.status_code == 204
        assert caller.get("/v1/webhooks").json() == {"items": []}
        again = api.client.delete(f"/v1/webhooks/{created.json()['id']}", headers=caller.headers)
        assert again.status_code == 404


def test_the_outbox_row_is_written_with_the_event_for_each_endpoint_that_wants_it(
    database: Database, allow_private: None
) -> None:
    tenant_id, _key = new_tenant(database)
    ended, _ = endpoint_for(database, tenant_id, "http://127.0.0.1:9/ended", ["job.ended"])
    new_chat, _ = endpoint_for(database, tenant_id, "http://127.0.0.1:9/new-chat", [NEEDS_NEW_CHAT])
    notices, _ = endpoint_for(database, tenant_id, "http://127.0.0.1:9/notices", ["notice"])
    set_announcer(None)
    try:
        happen(database, tenant_id, EventType.ENDED, {"status": "succeeded"})
        _, needs = happen(database, tenant_id, EventType.ENDED, {"status": "needs_new_chat"})
        happen(database, tenant_id, EventType.STEP, {"step": 1})
        with pytest.raises(RuntimeError), database.session() as session:  # an event rolled back leaves no delivery
            job = create_job(session, tenant_id=tenant_id, instruction="Read.")
            session.flush()
            record(session, job, EventType.NOTICE, {"text": "x"})
            raise RuntimeError
    finally:
        set_announcer(announce)
    assert [d.type for d in deliveries_of(database, ended)] == ["job.ended", "job.ended"]
    (only,) = deliveries_of(database, new_chat)
    assert (only.type, only.event_id, only.webhook_id) == (NEEDS_NEW_CHAT, needs, webhook_id(needs, new_chat))
    assert deliveries_of(database, notices) == []


# Delivery by the worker


def test_an_ended_job_is_delivered_signed_once_with_its_status(
    database: Database, celery_worker: Any, receiver: WebhookReceiver, allow_private: None
) -> None:
    tenant_id, endpoint_id = listening(receiver, database, ["job.ended", "notice"])
    job_id, ended = happen(database, tenant_id, EventType.ENDED, {"status": "succeeded"})
    _, notice = happen(database, tenant_id, EventType.NOTICE, {"notice_id": 7})
    happen(database, tenant_id, EventType.STEP, {"step": 1})  # not subscribed
    got = receiver.wait_for(2)
    assert all(r.verified for r in got)  # the standardwebhooks library checked each signature
    by_type = {r.type: r for r in got}
    assert by_type["job.ended"].webhook_id == webhook_id(ended, endpoint_id)
    assert (by_type["job.ended"].job_id, by_type["job.ended"].status) == (job_id, "succeeded")
    assert by_type["notice"].webhook_id == webhook_id(notice, endpoint_id)
    found = wait_until(lambda: settled(database, endpoint_id, 2), 10, "both deliveries recorded")
    assert {d.status for d in found} == {DeliveryStatus.DELIVERED}
    for delivery in found:
        (attempt,) = attempts_of(database, delivery.id)
        assert (attempt.outcome, attempt.status_code, attempt.manual) == (Outcome.DELIVERED, 200, False)
    assert len(receiver.received) == 2


def test_a_receiver_that_is_down_is_retried_and_gets_everything_once_it_answers(
    database: Database, celery_worker: Any, receiver: WebhookReceiver, allow_private: None
) -> None:
    receiver.answer = 503
    tenant_id, endpoint_id = listening(receiver, database, ["job.ended"])
    events = [happen(database, tenant_id, EventType.ENDED, {"status": "succeeded"})[1] for _ in range(3)]
    wait_until(lambda: len(receiver.received) >= 4, 20, "the receiver tried again while down")

    def failing() -> bool:
        with database.session() as session:
            endpoint = session.get(WebhookEndpoint, endpoint_id)
            return endpoint is not None and endpoint.failures >= 2

    wait_until(failing, 20, "the endpoint known to be down")
    receiver.answer = 200
    found = wait_until(lambda: settled(database, endpoint_id, 3), 30, "every delivery delivered")
    assert {d.status for d in found} == {DeliveryStatus.DELIVERED}
    assert {r.webhook_id for r in receiver.received} == {webhook_id(e, endpoint_id) for e in events}
    delivered = [r.webhook_id for r in receiver.received if r.answered == 200]
    assert sorted(delivered) == sorted({*delivered})  # each id delivered once; repeats only while down
    downs = [a for d in found for a in attempts_of(database, d.id) if a.outcome == Outcome.DOWN]
    assert downs and {(a.status_code, a.error) for a in downs} == {(503, "HTTP 503")}
    with database.session() as session:
        endpoint = session.get(WebhookEndpoint, endpoint_id)
        assert endpoint is not None and (endpoint.failures, endpoint.retry_at) == (0, None)


def test_a_receiver_that_refuses_is_not_retried_and_one_that_is_not_there_is(
    database: Database, celery_worker: Any, receiver: WebhookReceiver, allow_private: None
) -> None:
    receiver.answer = 410
    tenant_id, endpoint_id = listening(receiver, database, ["job.ended"])
    happen(database, tenant_id, EventType.ENDED, {"status": "failed"})
    (refused,) = wait_until(lambda: settled(database, endpoint_id, 1), 10, "the refusal recorded")
    assert refused.status == DeliveryStatus.REFUSED and refused.next_attempt_at is None
    (attempt,) = attempts_of(database, refused.id)
    assert (attempt.outcome, attempt.status_code) == (Outcome.REFUSED, 410)
    assert sweep_now() >= 0 and len(attempts_of(database, refused.id)) == 1

    closed = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    gone_id, _ = endpoint_for(database, tenant_id, closed, ["job.ended"])
    happen(database, tenant_id, EventType.ENDED, {"status": "failed"})
    (pending,) = deliveries_of(database, gone_id)

    def two_attempts() -> list[WebhookAttempt] | None:
        found = attempts_of(database, pending.id)
        return found if len(found) >= 2 else None

    tries = wait_until(two_attempts, 20, "two attempts")
    assert {a.outcome for a in tries} == {Outcome.DOWN}
    assert all(a.status_code is None and a.error and "ConnectError" in a.error for a in tries)
    assert deliveries_of(database, gone_id)[0].status == DeliveryStatus.PENDING


def test_which_answers_are_retried() -> None:
    assert answer_of(204).outcome == Outcome.DELIVERED
    for status in (500, 502, 503, 504, 408, 429):
        assert answer_of(status).outcome == Outcome.DOWN
    for status in (301, 400, 401, 403, 404, 410, 422):
        assert answer_of(status).outcome == Outcome.REFUSED


def test_the_backoff_doubles_up_to_its_cap_and_the_retries_stop_after_a_day() -> None:
    settings = get_settings()
    assert settings.webhook_retry_seconds == 24 * 3600
    waits = [backoff_seconds(n, settings) for n in range(1, 8)]
    assert waits[:3] == [1, 2, 4] and max(waits) == settings.webhook_retry_max_interval_seconds


def test_a_delivery_whose_message_was_lost_is_sent_by_the_sweep_with_the_same_id(
    database: Database, celery_worker: Any, receiver: WebhookReceiver, allow_private: None
) -> None:
    tenant_id, endpoint_id = listening(receiver, database, ["job.ended"])
    set_announcer(None)  # the message is lost: nobody is told of the delivery
    try:
        _, event_id = happen(database, tenant_id, EventType.ENDED, {"status": "succeeded"})
    finally:
        set_announcer(announce)
    (delivery,) = deliveries_of(database, endpoint_id)
    assert delivery.status == DeliveryStatus.PENDING and receiver.received == []
    assert sweep_now() >= 1
    (got,) = receiver.wait_for(1)
    assert got.webhook_id == webhook_id(event_id, endpoint_id) and got.verified
    # A worker killed mid-send leaves its claim behind: once the claim lapses, the sweep sends it again.
    wait_until(lambda: settled(database, endpoint_id, 1), 10, "delivered")
    with database.session() as session:
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery.id)
            .values(status=DeliveryStatus.PENDING, next_attempt_at=now() - timedelta(seconds=1))
        )
    assert sweep_now() >= 1
    again = receiver.wait_for(2)
    assert {r.webhook_id for r in again} == {got.webhook_id}


def test_redeliver_sends_again_by_hand_with_the_same_webhook_id(
    database: Database, celery_worker: Any, receiver: WebhookReceiver, allow_private: None
) -> None:
    with serve_api(database) as api:
        caller = api.tenant()
        path = "/hook/redeliver"
        created = caller.post("/v1/webhooks", json={"url": receiver.url(path), "events": ["job.ended"]}).json()
        receiver.secrets[path] = created["secret"]
        job_id, event_id = happen(database, caller.tenant_id, EventType.ENDED, {"status": "succeeded"})
        receiver.wait_for(1)
        wait_until(lambda: settled(database, created["id"], 1), 10, "delivered")
        listed = caller.get("/v1/webhooks/deliveries", params={"job_id": job_id}).json()
        (delivery,) = listed["items"]
        assert delivery["status"] == "delivered" and [a["outcome"] for a in delivery["attempts"]] == ["delivered"]
        answer = caller.post(f"/v1/webhooks/deliveries/{delivery['id']}/redeliver")
        assert answer.status_code == 202, answer.text
        second = receiver.wait_for(2)
        assert {r.webhook_id for r in second} == {webhook_id(event_id, created["id"])}

        def two_attempts() -> list[Any] | None:
            items = caller.get("/v1/webhooks/deliveries", params={"endpoint_id": created["id"]}).json()["items"]
            return items if len(items[0]["attempts"]) == 2 else None

        (shown,) = wait_until(two_attempts, 10, "the second attempt listed")
        assert [a["manual"] for a in shown["attempts"]] == [False, True]
        assert api.tenant().post(f"/v1/webhooks/deliveries/{delivery['id']}/redeliver").status_code == 404


def test_a_job_of_another_tenant_reaches_none_of_this_tenants_endpoints(
    database: Database, allow_private: None
) -> None:
    tenant_id, _key = new_tenant(database)
    other, _key = new_tenant(database)
    endpoint_id, _ = endpoint_for(database, tenant_id, "http://127.0.0.1:9/x", ["job.ended"])
    set_announcer(None)
    try:
        happen(database, other, EventType.ENDED, {"status": "succeeded"})
    finally:
        set_announcer(announce)
    assert deliveries_of(database, endpoint_id) == []
    with database.session() as session:
        assert session.scalar(select(Job.id).where(Job.tenant_id == other)) is not None

"""A small typed client of the Plimsoll API, over httpx. The CLI uses it; so can scripts."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from httpx_sse import SSEError, connect_sse
from pydantic import BaseModel

from api.constants import DEFAULT_API_URL, PAGE_SIZE
from api.schemas import (
    ContinueIn,
    DocumentIn,
    DocumentsCreated,
    DocumentView,
    EventView,
    Health,
    JobCheck,
    JobIn,
    JobSummary,
    JobView,
    MessageView,
    ModelList,
    NoticeView,
    Page,
    StepView,
    UsageReport,
    WebhookCreated,
    WebhookDeliveryView,
    WebhookIn,
    WebhookList,
)
from models.options import JobOptions

Model = TypeVar("Model", bound=BaseModel)


class ClientError(Exception):
    """Something the person has to act on; the message says what."""


class ApiError(ClientError):
    """The API refused the request."""

    def __init__(self, status_code: int, detail: str, retry_after: str | None = None) -> None:
        super().__init__(f"{detail} (HTTP {status_code})")
        self.status_code = status_code
        self.detail = detail
        self.retry_after = retry_after


class ApiUnreachable(ClientError):
    """No answer from the API."""


class EventsRefused(ClientError):
    """The API has no event streams (an older one): poll instead."""


REFUSED_STREAM = (404, 405, 501)  # what an API without the route answers


class PlimsollClient:
    def __init__(
        self,
        base_url: str = DEFAULT_API_URL,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        attempts: int = 4,
    ) -> None:
        """``attempts``: how often a request under an idempotency key is sent at most (retries are safe for it)."""
        headers = {"X-API-Key": api_key} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.attempts = attempts
        # Over plain HTTP no certificate is needed: loading the CA bundle would double the CLI's start-up. The
        # context still requires certificates, so a TLS connection it were ever used for would fail, not trust.
        plain_http = self.base_url.lower().startswith("http://")
        verify: ssl.SSLContext | bool = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT) if plain_http else True
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport, verify=verify
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    # Documents

    def upload_files(self, paths: Sequence[Path]) -> list[DocumentView]:
        """Upload files in one request: all are stored, or none (the error names the file refused)."""
        return self.upload(paths).documents

    def upload(self, paths: Sequence[Path]) -> DocumentsCreated:
        """``upload_files``, also telling which documents were stored already (the same name and text)."""
        files = [("files", (path.name, path.read_bytes(), "text/plain; charset=utf-8")) for path in paths]
        return self._send("POST", "/v1/documents", DocumentsCreated, files=files)

    def add_document(self, name: str, content: str) -> DocumentView:
        body = DocumentIn(name=name, content=content).model_dump()
        return self._send("POST", "/v1/documents", DocumentsCreated, json=body).documents[0]

    def documents(self, *, offset: int = 0, limit: int = PAGE_SIZE) -> Page[DocumentView]:
        return self._send("GET", "/v1/documents", Page[DocumentView], params={"offset": offset, "limit": limit})

    def document(self, document_id: int) -> DocumentView:
        return self._send("GET", f"/v1/documents/{document_id}", DocumentView)

    def delete_document(self, document_id: int) -> None:
        self._request("DELETE", f"/v1/documents/{document_id}")

    # Jobs

    def create_job(
        self, instruction: str, document_ids: Sequence[int] = (), options: JobOptions | None = None
    ) -> JobView:
        """A job over the documents, run with ``options`` (the server's defaults for those not given)."""
        chosen = options.chosen() if options else {}
        return self.submit_job(JobIn(instruction=instruction, document_ids=list(document_ids), **chosen))

    def submit_job(self, job: JobIn, *, idempotency_key: str | None = None) -> JobView:
        """The job created, or, for a retry of a request under ``idempotency_key`` (default: a fresh one), the
        job that request created: retried on no answer or a 5xx, under the same key, so never created twice."""
        body = job.model_dump(exclude_none=True)
        return self._send_once("POST", "/v1/jobs", JobView, idempotency_key, json=body)

    def check_job(self, job: JobIn) -> JobCheck:
        """Everything ``submit_job`` checks, nothing stored: ApiError if the job would be refused."""
        return self._send("POST", "/v1/jobs/check", JobCheck, json=job.model_dump(exclude_none=True))

    def job(self, job_id: int) -> JobView:
        return self._send("GET", f"/v1/jobs/{job_id}", JobView)

    def job_events(self, job_id: int, *, after: int | None = None) -> Iterator[EventView]:
        """The job's events after the id ``after`` (None: from its first), as they come, until it ends. Raises
        EventsRefused where the API has no streams, ApiUnreachable when the connection is lost (resume after the
        last event received)."""
        params = {} if after is None else {"after": after}
        try:
            with connect_sse(self._http, "GET", f"/v1/jobs/{job_id}/events", params=params) as source:
                if source.response.status_code in REFUSED_STREAM:
                    raise EventsRefused(f"the API at {self.base_url} has no event streams")
                if source.response.is_error:
                    source.response.read()
                    raise ApiError(source.response.status_code, _detail(source.response))
                for message in source.iter_sse():
                    if message.data:  # a keep-alive ping (a comment) comes through httpx-sse as an empty message
                        yield EventView.model_validate_json(message.data)
        except (httpx.TransportError, SSEError) as error:
            raise ApiUnreachable(
                f"the event stream of the Plimsoll API at {self.base_url} broke off: {error}"
            ) from error

    def jobs(
        self, *, kind: str | None = None, status: str | None = None, offset: int = 0, limit: int = PAGE_SIZE
    ) -> Page[JobSummary]:
        params: dict[str, Any] = {"offset": offset, "limit": limit} | {
            name: value for name, value in (("kind", kind), ("status", status)) if value
        }
        return self._send("GET", "/v1/jobs", Page[JobSummary], params=params)

    def messages(self, job_id: int, *, offset: int = 0, limit: int = PAGE_SIZE) -> Page[MessageView]:
        params = {"offset": offset, "limit": limit}
        return self._send("GET", f"/v1/jobs/{job_id}/messages", Page[MessageView], params=params)

    def steps(self, job_id: int, *, offset: int = 0, limit: int = PAGE_SIZE) -> Page[StepView]:
        params = {"offset": offset, "limit": limit}
        return self._send("GET", f"/v1/jobs/{job_id}/steps", Page[StepView], params=params)

    def cancel(self, job_id: int) -> JobView:
        return self._send("POST", f"/v1/jobs/{job_id}/cancel", JobView)

    def hold(self, job_id: int) -> JobView:
        return self._send("POST", f"/v1/jobs/{job_id}/hold", JobView)

    def release(self, job_id: int) -> JobView:
        return self._send("POST", f"/v1/jobs/{job_id}/release", JobView)

    def continue_job(self, job_id: int, next_step: ContinueIn, *, idempotency_key: str | None = None) -> JobView:
        """A new job that continues job ``job_id`` in a new chat, from a hand-over of it and ``next_step``; sent
        as ``submit_job`` is, under an idempotency key."""
        body = next_step.model_dump(exclude_unset=True, exclude_none=True)  # options left out are the old job's
        return self._send_once("POST", f"/v1/jobs/{job_id}/continue", JobView, idempotency_key, json=body)

    # Notices

    def notices(
        self, *, unread: bool = False, job_id: int | None = None, offset: int = 0, limit: int = PAGE_SIZE
    ) -> Page[NoticeView]:
        params: dict[str, Any] = {"unread": unread, "offset": offset, "limit": limit}
        if job_id is not None:
            params["job_id"] = job_id
        return self._send("GET", "/v1/notices", Page[NoticeView], params=params)

    def all_notices(self, *, unread: bool = False, job_id: int | None = None) -> Iterator[NoticeView]:
        """Every notice, page after page."""
        offset = 0
        while True:
            page = self.notices(unread=unread, job_id=job_id, offset=offset)
            yield from page.items
            offset += len(page.items)
            if not page.items or offset >= page.total:
                return

    def mark_notice_read(self, notice_id: int) -> NoticeView:
        return self._send("POST", f"/v1/notices/{notice_id}/read", NoticeView)

    # Webhooks

    def add_webhook(self, url: str, events: Sequence[str], *, idempotency_key: str | None = None) -> WebhookCreated:
        body = WebhookIn(url=url, events=list(events)).model_dump()
        return self._send_once("POST", "/v1/webhooks", WebhookCreated, idempotency_key, json=body)

    def webhooks(self) -> WebhookList:
        return self._send("GET", "/v1/webhooks", WebhookList)

    def remove_webhook(self, webhook_id: int) -> None:
        self._request("DELETE", f"/v1/webhooks/{webhook_id}")

    def deliveries(
        self, *, endpoint_id: int | None = None, job_id: int | None = None, offset: int = 0, limit: int = PAGE_SIZE
    ) -> Page[WebhookDeliveryView]:
        params: dict[str, Any] = {"offset": offset, "limit": limit}
        if endpoint_id is not None:
            params["endpoint_id"] = endpoint_id
        if job_id is not None:
            params["job_id"] = job_id
        return self._send("GET", "/v1/webhooks/deliveries", Page[WebhookDeliveryView], params=params)

    def redeliver(self, delivery_id: int) -> WebhookDeliveryView:
        return self._send("POST", f"/v1/webhooks/deliveries/{delivery_id}/redeliver", WebhookDeliveryView)

    def models(self) -> ModelList:
        """The model catalogue as the service runs it: windows, default budgets, prices and their source."""
        return self._send("GET", "/v1/models", ModelList)

    def usage(self, *, first: str | None = None, last: str | None = None) -> UsageReport:
        """What the tenant has spent from day ``first`` through day ``last`` (UTC, ISO dates): GET /v1/usage."""
        params = {name: value for name, value in (("from", first), ("to", last)) if value}
        return self._send("GET", "/v1/usage", UsageReport, params=params)

    def health(self) -> Health:
        return self._send("GET", "/healthz", Health)

    def _send(self, method: str, path: str, answer: type[Model], **request: Any) -> Model:
        return answer.model_validate(self._request(method, path, **request).json())

    def _send_once(
        self, method: str, path: str, answer: type[Model], idempotency_key: str | None, **request: Any
    ) -> Model:
        """``_send`` under an ``Idempotency-Key`` (a fresh UUID if None), tried again with the same key while the API
        does not answer, answers a 5xx, or says the key's first request is still running."""
        # Imported here: tenacity (and the tornado support it loads) would add a fifth to `plimsoll watch`'s start.
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        retrying = Retrying(
            retry=retry_if_exception(_worth_retrying),
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=0.25, max=4.0),
            reraise=True,
        )
        sent: Model = retrying(self._send, method, path, answer, headers=headers, **request)
        return sent

    def _request(self, method: str, path: str, **request: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **request)
        except httpx.TransportError as error:
            raise ApiUnreachable(f"no answer from the Plimsoll API at {self.base_url}: {error}") from error
        if response.is_error:
            raise ApiError(response.status_code, _detail(response), response.headers.get("retry-after"))
        return response


def _worth_retrying(error: BaseException) -> bool:
    """No answer, our failure, or the key's first request still running (409 with Retry-After)."""
    if isinstance(error, ApiUnreachable):
        return True
    return isinstance(error, ApiError) and (
        error.status_code >= 500 or (error.status_code == 409 and error.retry_after is not None)
    )


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail if isinstance(detail, str) and detail else response.text.strip() or response.reason_phrase

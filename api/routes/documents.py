"""Uploading documents and listing them. The content is never answered: it can be megabytes."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response, status
from pydantic import ValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import SessionDep, TenantDep
from api.errors import ERROR_RESPONSES, not_json, unreadable_body
from api.idempotency import HeldKey, KeyDep
from api.queries import document_of, documents_query, page_of
from api.routes.pagination import WindowDep, page
from api.schemas import DocumentIn, DocumentsCreated, DocumentView, ErrorBody, Id, Page, problem_text
from api.uploads import NamedText, parse_multipart, texts_of
from models.documents import delete_document, store_document
from models.errors import Conflict, InvalidInput

router = APIRouter(prefix="/v1/documents", tags=["documents"], responses=ERROR_RESPONSES)

UPLOAD_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {"schema": DocumentIn.model_json_schema()},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {
                    "files": {
                        "type": "array",
                        "items": {"type": "string", "format": "binary"},
                        "description": "UTF-8 text files; each file's name becomes its document's name",
                    }
                },
                "required": ["files"],
            }
        },
    },
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=DocumentsCreated,
    openapi_extra={"requestBody": UPLOAD_BODY},
    responses={
        415: {"model": ErrorBody, "description": "neither JSON nor multipart form data"},
    },
)
async def upload_documents(request: Request, tenant: TenantDep, session: SessionDep, key: KeyDep) -> Response:
    """Store one document (JSON ``{"name", "content"}``) or several files (multipart, parts named ``files``).
    All or nothing: if one file is refused, none is stored, and the error names it. The same text under the same
    name as one of the tenant's documents is that document again (``reused``), not a copy."""
    body = await request.body()  # api.limits.BodyLimit refuses one over the limit with a 413 as it streams in
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/json":
        texts = [_json_document(body)]
    elif media_type == "multipart/form-data":
        texts = texts_of(parse_multipart(body, content_type))
    else:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"send JSON {{'name', 'content'}} or multipart/form-data with 'files', not {media_type or 'no type'}",
        )
    return await run_in_threadpool(_store, session, key, tenant_id=tenant.id, texts=texts)


def _json_document(body: bytes) -> NamedText:
    try:
        document = DocumentIn.model_validate(json.loads(body))
    except json.JSONDecodeError as error:
        raise InvalidInput(not_json(body, error)) from None
    except (UnicodeDecodeError, RecursionError) as error:
        raise InvalidInput(str(unreadable_body(error))) from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {problem_text(e)}" for e in error.errors())
        raise InvalidInput(f"expected JSON {{'name', 'content'}}: {problems}") from None
    return NamedText(document.name, document.content)


def _store(session: Session, key: HeldKey, *, tenant_id: int, texts: list[NamedText]) -> Response:
    stored = [store_document(session, tenant_id=tenant_id, name=t.name, content=t.content) for t in texts]
    session.flush()
    created = DocumentsCreated(
        documents=[DocumentView.model_validate(each.document) for each in stored],
        reused=sorted({each.document.id for each in stored if each.reused}),
    )
    return key.commit(session, created, status.HTTP_201_CREATED)


@router.get("")
def list_documents(tenant: TenantDep, session: SessionDep, window: WindowDep) -> Page[DocumentView]:
    """The tenant's documents, newest first, without their content."""
    rows, total = page_of(session, documents_query(tenant_id=tenant.id), offset=window.offset, limit=window.limit)
    return page([DocumentView.model_validate(d) for d in rows], total, window)


@router.get("/{document_id}")
def get_document(document_id: Id, tenant: TenantDep, session: SessionDep) -> DocumentView:
    return DocumentView.model_validate(document_of(session, tenant_id=tenant.id, document_id=document_id))


@router.delete(
    "/{document_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={409: {"model": ErrorBody, "description": "a queued or running job may still read the document"}},
)
def remove_document(document_id: Id, tenant: TenantDep, session: SessionDep) -> Response:
    """Delete a document. Refused while a queued or running job uses it; finished jobs keep their history."""
    try:
        delete_document(session, tenant_id=tenant.id, document_id=document_id)
    except Conflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)

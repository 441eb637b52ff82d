"""Offset and limit for every list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Query

from api.schemas import MAX_ID, Page

T = TypeVar("T")

MAX_LIMIT = 1_000


@dataclass(frozen=True)
class Window:
    offset: int
    limit: int


def window(
    offset: Annotated[int, Query(ge=0, le=MAX_ID, description="items to skip")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="items to answer at most")] = 100,
) -> Window:
    return Window(offset, limit)


WindowDep = Annotated[Window, Depends(window)]


def page(items: list[T], total: int, window: Window) -> Page[T]:
    return Page[T](items=items, total=total, offset=window.offset, limit=window.limit)

"""Offset and limit for every list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Query

from api.constants import MAX_ID, MAX_LIMIT, PAGE_SIZE
from api.schemas import Page

T = TypeVar("T")


@dataclass(frozen=True)
class Window:
    offset: int
    limit: int


def window(
    offset: Annotated[int, Query(ge=0, le=MAX_ID, description="items to skip")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="items to answer at most")] = PAGE_SIZE,
) -> Window:
    return Window(offset, limit)


WindowDep = Annotated[Window, Depends(window)]


def page(items: list[T], total: int, window: Window) -> Page[T]:
    following = window.offset + len(items)
    return Page[T](
        items=items, total=total, offset=window.offset, limit=window.limit,
        next_offset=following if following < total else None,
    )  # fmt: skip

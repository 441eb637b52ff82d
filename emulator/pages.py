"""Documents that ``read_document`` hands out in pages.

Plimsoll's ``read_document`` returns a long document in pages, each ending with a line such as
``[ch01.txt: characters 0 to 8,192 of 20,000. Call read_document with offset=8192 to read on.]`` (the last page
says only which characters it holds). The agent reads on as the line tells it, and knows a document once the
request shows pages covering all of it; a result without such a line is the whole document.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_PAGE_LINE = re.compile(
    r"\n\n\[(?P<name>[^\]\n]+): characters (?P<start>[\d,]+) to (?P<end>[\d,]+) of (?P<total>[\d,]+)\.[^\]\n]*\]\Z"
)


@dataclass(frozen=True)
class Page:
    start: int
    end: int
    total: int
    content: str


@dataclass(frozen=True)
class Reading:
    """What the request shows of one document: all of it (``text``), an error, or where to read on."""

    text: str | None
    is_error: bool = False
    next_offset: int = 0


@dataclass(frozen=True)
class ReadResult:
    text: str
    is_error: bool


def page_of(text: str) -> Page | None:
    """The page a result holds, or None when the result is a whole document."""
    match = _PAGE_LINE.search(text)
    if match is None:
        return None
    start, end, total = (int(match[group].replace(",", "")) for group in ("start", "end", "total"))
    return Page(start=start, end=end, total=total, content=text[: match.start()])


def reading(results: Sequence[ReadResult]) -> Reading | None:
    """What the visible results of reading one document (oldest first) add up to; None if there are none."""
    if not results:
        return None
    if results[-1].is_error:
        return Reading(text=results[-1].text, is_error=True)
    pages: dict[int, Page] = {}
    for result in reversed(results):
        if result.is_error:
            continue
        page = page_of(result.text)
        if page is None:
            return Reading(text=result.text)
        if page.end > page.start:
            pages.setdefault(page.start, page)
    return _assembled(pages)


def _assembled(pages: dict[int, Page]) -> Reading:
    parts = []
    position = 0
    total = None
    while position in pages:
        page = pages[position]
        parts.append(page.content)
        position, total = page.end, page.total
    if total is not None and position >= total:
        return Reading(text="".join(parts))
    return Reading(text=None, next_offset=position)

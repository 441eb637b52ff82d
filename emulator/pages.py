"""Documents that ``read_document`` hands out in pages, noted page by page.

Plimsoll's ``read_document`` returns a long document in pages, each ending with a line such as
``[ch01.txt: characters 0 to 8,192 of 20,000. Call read_document with offset=8192 to read on.]`` (the last page
says only which characters it holds); a result without such a line is the whole document.

The agent notes each page as soon as it sees it, in its own text (which Plimsoll never clears, unlike tool
results), with a PAGE line carrying everything read so far: how far, the SHA-256 state of those characters and
how the document begins. It then reads on from there and never reads a noted page again; after the last page its
NOTE for the document is the one a single read of the whole text gives.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from emulator.sha256 import RunningSha256

OPENING_CHARS = 30

_PAGE_LINE = re.compile(
    r"\n\n\[(?P<name>[^\]\n]+): characters (?P<start>[\d,]+) to (?P<end>[\d,]+) of (?P<total>[\d,]+)\.[^\]\n]*\]\Z"
)
_PAGE_NOTE = re.compile(
    r"^PAGE (?P<name>.+?): read to (?P<end>\d+) of (?P<total>\d+) chars, "
    r'sha256 state (?P<state>\S+), starts "(?P<opening>.*)"$'
)


@dataclass(frozen=True)
class Page:
    start: int
    end: int
    total: int
    content: str


@dataclass(frozen=True)
class ReadResult:
    text: str
    is_error: bool


@dataclass(frozen=True)
class Progress:
    """A PAGE note: the first ``end`` of ``total`` characters of document ``name`` are read and hashed."""

    name: str
    end: int
    total: int
    state: RunningSha256
    opening: str

    @property
    def complete(self) -> bool:
        return self.end >= self.total

    def line(self) -> str:
        return (
            f"PAGE {self.name}: read to {self.end} of {self.total} chars, sha256 state {self.state.dump()}, "
            f'starts "{self.opening}"'
        )

    def note(self) -> str:
        """The document's NOTE, once every page is read."""
        opening = self.opening[:OPENING_CHARS] if len(self.opening) > OPENING_CHARS else self.opening.rstrip(" ")
        return document_note(self.name, self.total, self.state.hexdigest(), opening)

    def read(self, page: Page) -> Progress:
        opening = self.opening
        if len(opening) <= OPENING_CHARS:  # only tiny first pages leave it unfinished
            opening = _opening_so_far(opening + page.content)
        state = self.state.update(page.content.encode("utf-8"))
        return Progress(self.name, page.end, page.total, state, opening)

    @classmethod
    def parse(cls, line: str) -> Progress | None:
        match = _PAGE_NOTE.match(line)
        if match is None:
            return None
        try:
            state = RunningSha256.load(match["state"])
        except ValueError:
            return None
        return cls(match["name"], int(match["end"]), int(match["total"]), state, match["opening"])


@dataclass(frozen=True)
class Reading:
    """What the agent makes of one document this turn: its NOTE, or its progress and where to read next."""

    note: str | None = None
    progress: Progress | None = None
    moved_on: bool = False  # pages were noted this turn: ``progress`` is a new PAGE note

    @property
    def next_offset(self) -> int:
        return self.progress.end if self.progress else 0


def document_note(name: str, chars: int, sha256_hex: str, opening: str) -> str:
    return f'NOTE {name}: {chars} chars, sha256 {sha256_hex[:12]}, starts "{opening}"'


def whole_note(name: str, text: str) -> str:
    """The NOTE for a document read in one result."""
    return document_note(name, len(text), hashlib.sha256(text.encode("utf-8")).hexdigest(), opening_of(text))


def error_note(name: str, error_text: str) -> str:
    return f'NOTE {name}: unreadable, error "{opening_of(error_text)}"'


def opening_of(text: str) -> str:
    return " ".join(text.split())[:OPENING_CHARS]


def _opening_so_far(text: str) -> str:
    """The opening of a document still being read, written so that the next page can be added to it: one
    character more than a NOTE shows (the NOTE's then cannot change), or, while shorter, with a final space if
    the text so far ends in whitespace (the next page then starts a new word)."""
    collapsed = " ".join(text.split())[: OPENING_CHARS + 1]
    if collapsed and len(collapsed) <= OPENING_CHARS and text[-1:].isspace():
        return collapsed + " "
    return collapsed


def page_of(text: str) -> Page | None:
    """The page a result holds, or None when the result is a whole document."""
    match = _PAGE_LINE.search(text)
    if match is None:
        return None
    start, end, total = (int(match[group].replace(",", "")) for group in ("start", "end", "total"))
    return Page(start=start, end=end, total=total, content=text[: match.start()])


def reading(name: str, progress: Progress | None, results: Sequence[ReadResult]) -> Reading:
    """Note what the visible results of reading ``name`` (oldest first) add to the progress already noted."""
    if results and results[-1].is_error:
        return Reading(note=error_note(name, results[-1].text))
    pages: dict[int, Page] = {}
    for result in reversed(results):
        if result.is_error:
            continue
        page = page_of(result.text)
        if page is None:
            return Reading(note=whole_note(name, result.text))
        if page.end > page.start:
            pages.setdefault(page.start, page)
    moved_on = False
    position = progress.end if progress else 0
    while position in pages:
        progress = (progress or Progress(name, 0, 0, RunningSha256(), "")).read(pages[position])
        position, moved_on = progress.end, True
    if progress is not None and progress.complete:
        return Reading(note=progress.note())
    return Reading(progress=progress, moved_on=moved_on)

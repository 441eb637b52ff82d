"""What a worker process keeps of the histories it planned, so that a step reads only what changed since.

A job's messages are appended, never changed (``models/history.py``), so the outlines a process read for a job's
previous step are still the job's first ones: the next step on this process reads the outlines after them, and
the bodies it sends that it has not sent before. Kept here, in the process, by job id, least recently used first
out: nothing to send over a network or to decode again, where Redis or a plan state stored with each step would
move and decode the whole state every step.

The next step checks what it kept against the database before using it: it reads from the last message it saw,
and that row must come back with the same id (a history purged, or removed and written again, does not), the rows
after it numbered on without a gap. Otherwise it reads the history afresh. A step on another process, or after a
crash, finds nothing or an older prefix here and reads the rest; only committed rows are ever kept (a step reads
them before it writes). What is not a message is read at every step as before: the job's summary (compaction),
its calibration, its previous step. So a step plans exactly what it would plan from the database alone.

It also keeps what the job's last request built from stored messages (``Built``): the next request under the same
plan and summary begins with those messages and builds only the ones after them (worker/compaction.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from models.history import message_bodies, outlines_from
from plimsoll.history import Index

JOBS = 64  # jobs kept per process
BODY_TOKENS = 20_000_000  # bodies kept per process, in estimated tokens (some 80 MB of text)


@dataclass
class Kept:
    """One job's history as this process last read it."""

    index: Index = field(default_factory=Index)
    last_id: int = 0  # row id of the newest message read (0: none read)
    bodies: dict[int, dict[str, Any]] = field(default_factory=dict)  # by seq: those sent so far
    body_tokens: int = 0
    request: Built | None = None  # the last request's messages built from stored ones


@dataclass(frozen=True)
class Built:
    """The messages a request built from the job's stored messages before view index ``upto``, under a plan and
    summary that ``key`` names: a request under the same key over more messages begins with these."""

    key: Hashable
    messages: list[dict[str, Any]]
    upto: int


class HistoryCache:
    """Per job: its outlines, checked and reduced for planning (:class:`~plimsoll.history.Index`), and the bodies
    its requests sent."""

    def __init__(self, jobs: int = JOBS, body_tokens: int = BODY_TOKENS) -> None:
        self.jobs, self.body_tokens = jobs, body_tokens
        self._kept: OrderedDict[int, Kept] = OrderedDict()
        self._lock = threading.Lock()

    def index(self, session: Session, job_id: int) -> Index:
        """The job's stored outlines, those this process had not read yet read now. Not to be changed."""
        with self._lock:
            kept = self._kept.pop(job_id, None)
        seen = len(kept.index) if kept is not None else 0
        rows = outlines_from(session, job_id, max(seen - 1, 0))
        if kept is None or not _goes_on(kept, rows):
            kept, rows = Kept(), rows if kept is None else outlines_from(session, job_id, 0)
        else:
            rows = rows[1:]
        if rows:
            kept.index.extend([shape for _, _, shape in rows])  # raises as from_outlines would: nothing kept
            kept.last_id = rows[-1][1]
        self._keep(job_id, kept)
        return kept.index

    def bodies(self, session: Session, job_id: int, seqs: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The bodies of the job's stored messages ``seqs`` (read by :meth:`index` in this transaction), those
        not sent before read now."""
        wanted = sorted(set(seqs))
        with self._lock:
            kept = self._kept.get(job_id)
        if kept is None:  # crowded out meanwhile
            return message_bodies(session, job_id, wanted)
        missing = [seq for seq in wanted if seq not in kept.bodies]
        if missing:
            loaded = message_bodies(session, job_id, missing)
            kept.bodies.update(loaded)
            tokens = kept.index.tokens
            kept.body_tokens += sum(tokens[seq] for seq in loaded if seq < len(tokens))
            self._keep(job_id, kept)
        return {seq: kept.bodies[seq] for seq in wanted if seq in kept.bodies}

    def built(self, job_id: int, key: Hashable) -> Built | None:
        """What the job's last request under ``key`` built, if this process built it."""
        with self._lock:
            kept = self._kept.get(job_id)
        return kept.request if kept is not None and kept.request is not None and kept.request.key == key else None

    def keep_built(self, job_id: int, built: Built) -> None:
        with self._lock:
            kept = self._kept.get(job_id)
            if kept is not None:
                kept.request = built

    def forget(self, job_id: int) -> None:
        with self._lock:
            self._kept.pop(job_id, None)

    def _keep(self, job_id: int, kept: Kept) -> None:
        with self._lock:
            self._kept[job_id] = kept
            self._kept.move_to_end(job_id)
            total = sum(k.body_tokens for k in self._kept.values())
            while len(self._kept) > 1 and (len(self._kept) > self.jobs or total > self.body_tokens):
                _, oldest = self._kept.popitem(last=False)
                total -= oldest.body_tokens


def _goes_on(kept: Kept, rows: list[tuple[int, int, Any]]) -> bool:
    """Whether ``rows`` (read from the newest message kept on) continue the history kept, unchanged."""
    seen = len(kept.index)
    if seen == 0:
        return False
    if not rows or rows[0][:2] != (seen - 1, kept.last_id):
        return False
    return all(seq == seen - 1 + offset for offset, (seq, _, _) in enumerate(rows))

"""The hand-over that starts a new chat from a job that ended (most often one that grew too long): how it ended,
what was asked, what was produced, what is left to do, and the next step, sized to fit comfortably in the new
job's budget. Never the whole old history: the newest of what was produced is kept whole, older parts are left
out (and counted) once the allowance is spent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plimsoll.profiles import estimate_tokens

# How a job ended, by its status, in our own words: the hand-over's first sentence ("job 7, which ...") and a
# subagent's result to its main job ("it ...") say it alike.
HOW_IT_ENDED = {
    "needs_new_chat": "grew too long for the model",
    "succeeded": "finished",
    "incomplete": "finished without all of its parts",
    "failed": "stopped before it finished",
    "cancelled": "was cancelled",
}


def how_it_ended(status: str) -> str:
    return HOW_IT_ENDED.get(status, f"ended {status}")


@dataclass(frozen=True)
class Handover:
    text: str
    produced_kept: int
    produced_left_out: int


def handover(
    *,
    job_id: int,
    instruction: str,
    produced: Sequence[str],
    unread: Sequence[str],
    next_step: str,
    max_tokens: int,
    max_chars: int,
    profile: str,
    status: str = "needs_new_chat",
) -> Handover:
    """The new job's instruction. ``produced`` is what the old job wrote, oldest first (its notes, its answer
    so far, its subagents' reports); ``unread`` the documents it never read. The result stays within
    ``max_tokens`` (estimated under ``profile``) and ``max_chars``, dropping the oldest of ``produced`` first,
    and the oldest part of the old instruction if even that is not enough. ``status`` is how the old job ended:
    the first sentence says so in our own words (a job that finished did not grow too long). The job's error is
    never quoted: it may be the provider's text, which the agent of the new chat would take for part of its task
    (a `max_tokens` in a rejection read as a document's name)."""
    head = f"This continues job {job_id}, which {how_it_ended(status)}. It was asked:\n\n"
    left = (
        f"\n\nDocuments it had not read yet ({len(unread)}): " + ", ".join(f"`{name}`" for name in unread)
        if unread
        else "\n\nIt had read every document it was given."
    )
    tail = f"{left}\n\nThe next step:\n\n{next_step.strip()}"
    asked = instruction.strip()
    fixed_chars = len(head) + len(tail) + 200
    if fixed_chars + len(asked) > max_chars:
        asked = "…" + asked[-max(0, max_chars - fixed_chars - 1) :]
    kept: list[str] = []
    used_tokens = estimate_tokens(head + asked + tail, profile)
    used_chars = fixed_chars + len(asked)
    for part in reversed([p.strip() for p in produced if p.strip()]):
        cost, size = estimate_tokens(part, profile) + 2, len(part) + 2
        if used_tokens + cost > max_tokens or used_chars + size > max_chars:
            break
        kept.insert(0, part)
        used_tokens, used_chars = used_tokens + cost, used_chars + size
    dropped = len([p for p in produced if p.strip()]) - len(kept)
    body = "\n\n".join(kept) if kept else "(nothing that fits here)"
    note = f"({dropped} earlier parts are left out; they stay in job {job_id}'s history.)\n\n" if dropped else ""
    text = f"{head}{asked}\n\nWhat it produced, newest last:\n\n{note}{body}{tail}"
    return Handover(text=text, produced_kept=len(kept), produced_left_out=dropped)

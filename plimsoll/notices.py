"""Texts that the agent and the person see.

The wording of ``TOO_LONG_NOTICE`` is fixed by the product: it is shown to people when a model rejects a
request as too long, so it must be plain and must not sound like an error they caused.
"""

from __future__ import annotations

AGENT_SAFETY_NET = (
    "Long tasks are safe here. When this conversation grows beyond what the model can take at once, the oldest "
    "tool results are cleared automatically and replaced by a short note, while the newest results stay whole; "
    "nothing you have done is lost. So never stop or shorten a long task to save space or tokens: keep going "
    "until the whole task is done. If you need something from a result that was cleared, run the tool again "
    "(for example, read the file again)."
)

CLEARED_RESULT_NOTE = (
    "[This tool result was cleared to keep the conversation within the model's context. "
    "Run the tool again if you need its output.]"
)

TRUNCATION_NOTE = (
    "[Earlier messages of this conversation were left out of this request to keep it within the model's "
    "context. They are still stored. Run a tool again if you need something from them.]"
)

TOO_LONG_NOTICES: dict[str, str] = {
    "en": (
        "This conversation is too long for the model to process at once. Start a new chat for the next step "
        "— everything you've created so far stays."
    ),
    "cs": (
        "Tato konverzace je pro model příliš dlouhá, aby ji zpracoval najednou. Pro další krok začni nový chat "
        "– všechno, co jsi zatím vytvořil, zůstane."
    ),
}

TOO_LONG_NOTICE = TOO_LONG_NOTICES["en"]


def too_long_notice(locale: str | None = None) -> str:
    """The too-long notice in the person's language: ``"cs"``, ``"cs-CZ"`` or ``"cs_CZ"`` give Czech;
    anything unknown (or nothing) gives English."""
    language = (locale or "en").replace("_", "-").split("-", 1)[0].lower()
    return TOO_LONG_NOTICES.get(language, TOO_LONG_NOTICE)

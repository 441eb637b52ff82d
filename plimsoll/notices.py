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
    "(for example, read the file again). When clearing is not enough, the earlier part of the conversation may "
    'be summarized: the summary follows the first message, under "[Summary of earlier work", with the notes '
    "you wrote, the tools you called and the person's messages word for word, so keep your notes in your own "
    "messages."
)

CLEARED_RESULT_NOTE = (
    "[This tool result was cleared to keep the conversation within the model's context. "
    "Run the tool again if you need its output.]"
)

TRUNCATION_NOTE = (
    "[Earlier messages of this conversation were left out of this request to keep it within the model's "
    "context. They are still stored. Run a tool again if you need something from them.]"
)

# Compaction (plimsoll.compaction): the request asking for a summary of the earlier part of the conversation,
# appended to the prefix the previous request sent, and the header of the summary where later requests carry it.
SUMMARY_INSTRUCTION = (
    "[Compaction] Before going on, write a summary of this conversation from its start up to, but not "
    "including, its last {keep} messages: that part will be left out of later requests and replaced by your "
    "summary. Copy every NOTE and PAGE line you wrote exactly, list each tool you called with its input, and "
    "quote the person's messages word for word. Invent nothing. Keep it within {limit} tokens: if it cannot all "
    "fit, leave out the oldest tool calls first, then the oldest notes, and the person's words last, so the newest "
    "notes are kept. Answer with the summary only; call no tool."
)
SUMMARY_HEADER = (
    "[Summary of earlier work: messages 1 to {last} of this conversation were left out of this request to keep "
    "it within the model's context. They are still stored. What they held:]"
)

TOO_LONG_NOTICES: dict[str, str] = {
    "en": (
        "This conversation is too long for the model to process at once. Start a new chat for the next step "
        "— everything you've created so far stays."
    ),
    # Polite ("vy") and gender-neutral: no past participle that would need a gender.
    "cs": (
        "Tato konverzace je pro model příliš dlouhá, aby ji zpracoval najednou. Pro další krok začněte nový chat "
        "– vše dosud vytvořené zůstane zachováno."
    ),
}

# Where the person starts that new chat: the command line and the API.
CONTINUE_HINTS: dict[str, str] = {
    "en": 'To go on in a new chat: plimsoll continue {job} -i "the next step" (API: POST /v1/jobs/{job}/continue).',
    "cs": 'Nový chat zahájíte příkazem: plimsoll continue {job} -i "další krok" (API: POST /v1/jobs/{job}/continue).',
}

TOO_LONG_NOTICE = TOO_LONG_NOTICES["en"]


def too_long_notice(locale: str | None = None) -> str:
    """The too-long notice in the person's language: ``"cs"``, ``"cs-CZ"`` or ``"cs_CZ"`` give Czech;
    anything unknown (or nothing) gives English."""
    return TOO_LONG_NOTICES.get(_language(locale), TOO_LONG_NOTICE)


def new_chat_notice(job_id: int, locale: str | None = None) -> str:
    """The too-long notice with where to start the new chat for job ``job_id``."""
    hint = CONTINUE_HINTS.get(_language(locale), CONTINUE_HINTS["en"])
    return f"{too_long_notice(locale)}\n\n{hint.format(job=job_id)}"


def _language(locale: str | None) -> str:
    return (locale or "en").replace("_", "-").split("-", 1)[0].lower()


# Why a job was stopped before it finished, finished without some of its parts, or could not start. Placeholders:
# {steps}, {tokens}, {tool}, {times}, {parts}, {budget}, {needed}, {host}, {setting}. A text that depends on a
# number has one form per CLDR plural category of the language ("one", "few", "many", "other"), chosen by the
# number ``COUNTED_BY`` names. {budget} and {needed} are at least 1,000 (models.catalogue.MIN_BUDGET): Czech
# writes them in the plural form of "other" (tokenů) wherever nothing else picks the form.
Forms = str | dict[str, str]
STOPPED_NOTICES: dict[str, dict[str, Forms]] = {
    "en": {
        "steps": {
            "one": "This job was stopped after {steps} step, the limit set for it. Everything it did is kept.",
            "other": "This job was stopped after {steps} steps, the limit set for it. Everything it did is kept.",
        },
        "tokens": (
            "This job was stopped before it used more than {tokens} input tokens, the limit set for it. "
            "Everything it did is kept."
        ),
        "repeating": (
            "This job was stopped because the agent called {tool} with the same input {times} times without "
            "making progress. Everything it did is kept."
        ),
        "incomplete": "The job finished, but these parts of it did not: {parts}. Its answer leaves them out.",
        "budget": (
            "This job's budget of {budget} tokens per request is too small for its first message together with "
            "the agent's notes and the tool results it reads. The conversation is not too long, and a new chat "
            "would not fit either: submit the job again with a budget of {needed} tokens or more."
        ),
        "repeating_budget": (
            "This job was stopped because the agent called {tool} with the same input {times} times without "
            "making progress. The cause is its budget of {budget} tokens per request: too small to hold the tool "
            "results together with the agent's notes, so results were left out before the agent could use them. "
            "Submit the job again with a budget of {needed} tokens or more. Everything it did is kept."
        ),
        "wound_down": (
            "This job's {what} was nearly spent, so the agent was asked to answer from what it had, and did: the "
            "task may not be finished. It spent {spent} USD (its subagents included). Everything it did is kept. "
            "To go on with more: plimsoll continue {job} {option}"
        ),
        "money": (
            "This job reached its budget of {budget} USD: it spent {spent} USD (its subagents included) and ended "
            "with its answer so far. Not done: {not_done}. Everything it did is kept. To go on with a higher "
            "budget: plimsoll continue {job} --max-cost-usd {more}"
        ),
        "unreachable": (
            "This job failed because the model provider at {host} could not be reached, also when tried again. "
            "Check {setting} and this machine's network (DNS, firewall, proxy, TLS), then submit the job again. "
            "Everything it did is kept."
        ),
    },
    "cs": {
        "steps": {
            "one": "Úloha byla zastavena po {steps} kroku, což je její nastavený limit. Vše, co udělala, zůstává.",
            "few": "Úloha byla zastavena po {steps} krocích, což je její nastavený limit. Vše, co udělala, zůstává.",
            "many": "Úloha byla zastavena po {steps} kroku, což je její nastavený limit. Vše, co udělala, zůstává.",
            "other": "Úloha byla zastavena po {steps} krocích, což je její nastavený limit. Vše, co udělala, zůstává.",
        },
        "tokens": {
            "one": "Úloha byla zastavena dříve, než by použila více než {tokens} vstupní token, což je její nastavený "
            "limit. Vše, co udělala, zůstává.",
            "few": "Úloha byla zastavena dříve, než by použila více než {tokens} vstupní tokeny, což je její "
            "nastavený limit. Vše, co udělala, zůstává.",
            "many": "Úloha byla zastavena dříve, než by použila více než {tokens} vstupního tokenu, což je její "
            "nastavený limit. Vše, co udělala, zůstává.",
            "other": "Úloha byla zastavena dříve, než by použila více než {tokens} vstupních tokenů, což je její "
            "nastavený limit. Vše, co udělala, zůstává.",
        },
        "repeating": (
            "Úloha byla zastavena, protože agent {times}krát zavolal {tool} se stejným vstupem a nepostoupil dál. "
            "Vše, co udělala, zůstává."
        ),
        "incomplete": "Úloha skončila, ale tyto její části ne: {parts}. Odpověď je nezahrnuje.",
        "budget": {
            "one": "Rozpočet této úlohy, {budget} token na požadavek, nestačí na její první zprávu spolu s "
            "poznámkami agenta a výsledky nástrojů, které čte. Konverzace není příliš dlouhá a nový chat by se "
            "nevešel také: zadejte úlohu znovu s rozpočtem alespoň {needed} tokenů.",
            "few": "Rozpočet této úlohy, {budget} tokeny na požadavek, nestačí na její první zprávu spolu s "
            "poznámkami agenta a výsledky nástrojů, které čte. Konverzace není příliš dlouhá a nový chat by se "
            "nevešel také: zadejte úlohu znovu s rozpočtem alespoň {needed} tokenů.",
            "many": "Rozpočet této úlohy, {budget} tokenu na požadavek, nestačí na její první zprávu spolu s "
            "poznámkami agenta a výsledky nástrojů, které čte. Konverzace není příliš dlouhá a nový chat by se "
            "nevešel také: zadejte úlohu znovu s rozpočtem alespoň {needed} tokenů.",
            "other": "Rozpočet této úlohy, {budget} tokenů na požadavek, nestačí na její první zprávu spolu s "
            "poznámkami agenta a výsledky nástrojů, které čte. Konverzace není příliš dlouhá a nový chat by se "
            "nevešel také: zadejte úlohu znovu s rozpočtem alespoň {needed} tokenů.",
        },
        "repeating_budget": (
            "Úloha byla zastavena, protože agent {times}krát zavolal {tool} se stejným vstupem a nepostoupil dál. "
            "Příčinou je její rozpočet {budget} tokenů na požadavek: je příliš malý, aby pojal výsledky nástrojů "
            "spolu s poznámkami agenta, takže výsledky byly vynechány dříve, než je agent mohl použít. Zadejte "
            "úlohu znovu s rozpočtem alespoň {needed} tokenů. Vše, co udělala, zůstává."
        ),
        "wound_down": (
            "Rozpočet této úlohy ({what}) byl téměř vyčerpán, proto byl agent požádán, aby odpověděl z toho, co "
            "má, a odpověděl: úkol nemusí být hotový. Utratila {spent} USD (včetně subagentů). Vše, co udělala, "
            "zůstává. Pokračovat s větším rozpočtem: plimsoll continue {job} {option}"
        ),
        "money": (
            "Úloha dosáhla svého rozpočtu {budget} USD: utratila {spent} USD (včetně subagentů) a skončila se "
            "svou dosavadní odpovědí. Nehotovo: {not_done}. Vše, co udělala, zůstává. Pokračovat s vyšším "
            "rozpočtem: plimsoll continue {job} --max-cost-usd {more}"
        ),
        "unreachable": (
            "Úloha selhala, protože poskytovatel modelu na adrese {host} nebyl dosažitelný ani při opakovaných "
            "pokusech. Zkontrolujte {setting} a síť tohoto počítače (DNS, firewall, proxy, TLS) a zadejte úlohu "
            "znovu. Vše, co udělala, zůstává."
        ),
    },
}
COUNTED_BY = {
    "steps": "steps",
    "tokens": "tokens",
    "repeating": "times",
    "repeating_budget": "times",
    "budget": "budget",
}
LANGUAGES = tuple(STOPPED_NOTICES)  # the languages every notice is written in


# Told to the agent in its request when its job's budget (steps, input tokens or money) holds only a few more steps,
# so that it writes its answer from what it has instead of being cut off. The emulator answers on its phrase.
WIND_DOWN_PHRASE = "write your answer now"
AGENT_WIND_DOWN = (
    "[Budget] This job's budget is nearly spent: {left}. That is about {steps} more step(s). Please "
    + WIND_DOWN_PHRASE
    + " from what you have so far, and say plainly what you did not get to."
)


def wind_down_note(left: str, steps: int) -> str:
    return AGENT_WIND_DOWN.format(left=left, steps=steps)


def stopped_notice(why: str, locale: str | None = None, **values: object) -> str:
    """The notice for a job stopped by a limit (``why``: steps, tokens, repeating), finished without some of
    its parts (incomplete), whose budget cannot hold its first message with a round of tool results (budget) or
    its results with the agent's notes (repeating_budget: both name the ``needed`` budget that would), or
    whose model provider could not be reached (unreachable: the ``host`` and the ``setting`` to check),
    in the person's language: its plural form and its numbers as CLDR gives them for the locale (Czech: "po
    1 kroku", "50 000" with a no-break space)."""
    from babel import Locale
    from babel.numbers import format_decimal

    language = _language(locale)
    texts = STOPPED_NOTICES.get(language, STOPPED_NOTICES["en"])
    cldr = Locale.parse(language if language in STOPPED_NOTICES else "en")
    forms = texts[why]
    if isinstance(forms, dict):
        forms = forms.get(cldr.plural_form(values[COUNTED_BY[why]]), forms["other"])  # type: ignore[arg-type]
    shown = {k: format_decimal(v, locale=cldr) if isinstance(v, int) else v for k, v in values.items()}
    return forms.format(**shown)


def check_locale(locale: str) -> str:
    """``locale`` if notices can be written for it (a language they are written in; a region CLDR knows):
    otherwise a ValueError that says which are."""
    from babel import Locale, UnknownLocaleError

    known = f"notices are written in {', '.join(LANGUAGES)} (a region may follow, e.g. cs-CZ)"
    if _language(locale) not in LANGUAGES:
        raise ValueError(f"unknown locale {locale!r}: {known}")
    try:
        Locale.parse(locale.replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        raise ValueError(f"unknown locale {locale!r}: {known}") from None
    return locale


REPEATED_CALL_WARNING = (
    "[You have now called {tool} with exactly this input {times} times. Its output has not changed. Use what you "
    "noted from it, or do something different: one more identical call stops the job.]"
)

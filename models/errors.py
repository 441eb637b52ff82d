"""Errors the data functions raise on bad input; the API turns them into 4xx answers."""


class InvalidInput(ValueError):
    """The request is well-formed but its content is not acceptable (maps to 422)."""


class NotFound(LookupError):
    """No such object for this tenant (maps to 404; another tenant's objects are not found either)."""


class Conflict(RuntimeError):
    """The object is in a state that forbids the change (maps to 409)."""


class HistoryPurged(LookupError):
    """The job's history was purged under its tenant's retention policy (maps to 410); its row and answer stay."""

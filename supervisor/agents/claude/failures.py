"""Claude Code's failure classifier: why a run ended in error, read from what the CLI said.

Pure (no I/O). The adapter feeds the facts of the run that just ended; the classes are those of
:mod:`~supervisor.taskdir.states` (the policy turns a class into a transition).
Server errors, overload and network failures are ``transient``; 401/403 and login texts
``auth``; credit texts ``billing``; 400/404/413/422 ``invalid_request``; any other error
``agent_error``.

Sources of the texts and statuses (Claude Code 2.1.328, measured on this machine; see
``../shared/notes/real-world-facts.md`` and tests/fixtures/claude/): after its own retries the
CLI ends ``-p`` runs with a ``result`` line whose ``is_error`` is true, whose ``result`` reads
e.g. "API Error: 500 Internal server error. This is a server-side issue, usually
temporary…", "API Error: Connection refused … (ECONNREFUSED)", "Credit balance is too
low" or "Not logged in · Please run /login", and, for HTTP errors, ``api_error_status``.
Interactive runs report the same through the ``StopFailure`` hook's ``error`` field
(``server_error``, ``authentication_failed``, ``billing_error``, ``invalid_request``, …;
Claude Code hooks reference).
"""

from __future__ import annotations

import re

from supervisor.taskdir.states import TRANSIENT, FailureReason

#: HTTP statuses that pass by themselves: server errors and overload (Anthropic API errors
#: reference: 500 api_error, 529 overloaded_error; 502-504 from proxies on the way).
TRANSIENT_STATUSES = frozenset({500, 502, 503, 504, 529})
AUTH_STATUSES = frozenset({401, 403})
INVALID_STATUSES = frozenset({400, 404, 413, 422})

_TRANSIENT_TEXT = re.compile(
    r"ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EPIPE|socket hang up|"
    r"Connection (?:refused|reset|error)|Request timed out|Unable to connect|"
    r"Internal server error|overloaded|server-side issue|usually temporary|"
    r"temporarily unavailable|API Error: 5\d\d",
    re.IGNORECASE,
)
_BILLING_TEXT = re.compile(
    r"credit balance|billing|payment required|insufficient (?:credit|funds)", re.IGNORECASE
)
_AUTH_TEXT = re.compile(
    r"Not logged in|Please run /login|invalid (?:x-)?api[ -]key|authentication|"
    r"OAuth token (?:has )?expired|unauthori[sz]ed|permission_error",
    re.IGNORECASE,
)
_INVALID_TEXT = re.compile(r"invalid_request_error|invalid request|prompt is too long", re.I)

#: ``StopFailure`` ``error`` values (interactive mode) and their class.
HOOK_ERRORS: dict[str, str] = {
    "server_error": TRANSIENT,
    "overloaded": TRANSIENT,
    "network_error": TRANSIENT,
    "authentication_failed": FailureReason.AUTH,
    "billing_error": FailureReason.BILLING,
    "invalid_request": FailureReason.INVALID_REQUEST,
}


def classify(status: int | None, text: str | None, is_error: bool | None) -> str | None:
    """The class of a run's error ending, or ``None`` when the agent reported none.

    Args:
        status: the HTTP status of the API error that ended the run (stream-json
            ``api_error_status``), if any.
        text: the run's final result text (or the hook's error message).
        is_error: the agent said the run ended in error (``result.is_error``).

    Returns:
        ``"transient"``, ``"auth"``, ``"billing"``, ``"invalid_request"``,
        ``"agent_error"`` or ``None``. Billing wins over auth and both over transient: a
        "credit balance" 400 is never retried.
    """
    body = text or ""
    if status is None and not is_error and not body:
        return None
    if _BILLING_TEXT.search(body):
        return FailureReason.BILLING
    if status in AUTH_STATUSES or (is_error and _AUTH_TEXT.search(body)):
        return FailureReason.AUTH
    if status in TRANSIENT_STATUSES or (status is None and _TRANSIENT_TEXT.search(body)):
        return TRANSIENT
    if status in INVALID_STATUSES or (is_error and _INVALID_TEXT.search(body)):
        return FailureReason.INVALID_REQUEST
    if status is not None and 500 <= status <= 599:
        return TRANSIENT
    if is_error or status is not None:
        return FailureReason.AGENT_ERROR
    return None


def classify_hook_error(error: str, text: str) -> str | None:
    """The class of an interactive run's ``StopFailure`` (its ``error`` field, then the
    text); ``None`` for limits (handled as usage limits) and unknown values."""
    if error in HOOK_ERRORS:
        return HOOK_ERRORS[error]
    return classify(None, text, True) if text else None

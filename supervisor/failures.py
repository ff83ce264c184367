"""Failure classes: why an agent run ended in error, read from what the agent itself said.

Pure (no I/O). The engine feeds the facts of the run that just ended; the policy turns the
class into a transition:

* ``transient``: the API or the network failed in a way that passes (HTTP 5xx and 529, a
  request timeout, connection refused or reset, a DNS failure). The run goes to ``waiting``
  with a backoff and resumes the same session by id; it never counts against
  ``max_retries`` and is bounded by the deadline.
* permanent classes end the task ``failed`` with that ``failure_reason``:
  ``auth`` (no login, invalid key, 401/403), ``billing`` (credit balance, billing errors),
  ``invalid_request`` (a 400/404/413/422 the request itself caused), ``agent_error`` (the
  agent reported an error of another kind).

``exit_code`` (the run exited non-zero and said nothing more) is the fallback reason the
policy uses when no class is known.

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

TRANSIENT = "transient"

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
    "authentication_failed": "auth",
    "billing_error": "billing",
    "invalid_request": "invalid_request",
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
        return "billing"
    if status in AUTH_STATUSES or (is_error and _AUTH_TEXT.search(body)):
        return "auth"
    if status in TRANSIENT_STATUSES or (status is None and _TRANSIENT_TEXT.search(body)):
        return TRANSIENT
    if status in INVALID_STATUSES or (is_error and _INVALID_TEXT.search(body)):
        return "invalid_request"
    if status is not None and 500 <= status <= 599:
        return TRANSIENT
    if is_error or status is not None:
        return "agent_error"
    return None


def classify_hook_error(error: str, text: str) -> str | None:
    """The class of an interactive run's ``StopFailure`` (its ``error`` field, then the
    text); ``None`` for limits (handled as usage limits) and unknown values."""
    if error in HOOK_ERRORS:
        return HOOK_ERRORS[error]
    return classify(None, text, True) if text else None

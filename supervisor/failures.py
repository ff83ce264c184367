"""Failure classes: the vocabulary of why an agent run ended in error (the policy's own).

Pure (no I/O). An agent adapter classifies the facts of the run that just ended (Claude
Code's classifier: :mod:`supervisor.agents.claude.failures`); the policy turns the class into
a transition:

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
"""

from __future__ import annotations

TRANSIENT = "transient"

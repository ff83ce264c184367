"""``[accounts]`` in a profile (issue 26): how the engine treats the runs of one account
(the tasks that share credentials, :mod:`supervisor.accounts`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

from supervisor.config.monitor import Seconds

#: The default seconds between two starts of one account after its usage limit reset.
DEFAULT_STAGGER = 5.0

#: The longest ``stagger`` (one hour): more would hold an account's work for hours.
MAX_STAGGER = 3600.0


class AccountsSpec(BaseModel):
    """``[accounts]``: the account's limits.

    Attributes:
        stagger: seconds between two starts (a queued task's launch or a waiting task's
            resume) of one account after its usage limit reset, so they do not all start in
            the same second (agent-deck saw a burst of restarts cause a 401 cascade);
            0 to 3600, default 5. Only after a limit: other launches are not spaced.
        max_concurrent: at most this many live tasks per account (``waiting`` ones count,
            as they do for the profile's ``max_concurrent``); a task over it stays
            ``queued``. Default: no cap.
    """

    model_config = ConfigDict(extra="forbid")
    stagger: Annotated[Seconds, Field(ge=0, le=MAX_STAGGER), Strict()] = DEFAULT_STAGGER
    max_concurrent: Annotated[int, Field(ge=1, le=100_000), Strict()] | None = None

"""``[cluster]``: run this engine as one host of a fleet sharing a PostgreSQL database
(``supervisor.cluster``). A profile without the table is a single-host engine and imports
nothing of PostgreSQL (procrastinate and psycopg are the ``cluster`` extra).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from supervisor.cluster import DSN_ENV
from supervisor.config.fence import fence_of
from supervisor.config.monitor import PositiveSeconds
from supervisor.errors import ConfigError

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: Host ids and queue names: safe in a procrastinate queue name (``host.<id>``) and a log.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
#: The queue every host takes from unless ``queues`` says otherwise.
SHARED_QUEUE = "supervise"
#: Shortest ``heartbeat`` (and ``host_timeout``), seconds: the writer beats and the lease is
#: renewed (:mod:`supervisor.cluster.lease`) about that often; 1e-9 would spin both threads.
MIN_HEARTBEAT = 0.1
#: Smallest ``host_timeout - heartbeat``, seconds (the fence's budget, see the validator).
MIN_FENCE = 0.4
#: Default ``stopped_host_grace``, seconds (issue 25): a clean stop is mostly an engine
#: restart or upgrade (back within seconds, adopting the running agents) or a reboot (a
#: few minutes); a host stopped for longer than a quarter of an hour is out of service,
#: and its tasks are better reported lost (or restarted elsewhere) than shown ``running``
#: for ever.
STOPPED_HOST_GRACE = 900.0


def _default_host_id() -> str:
    """The hostname up to its first dot, made safe for :data:`NAME_RE`."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname().split(".")[0]).strip("-.")
    return name[:63] or "host"


class ClusterSpec(BaseModel):
    """``[cluster]`` in a profile.

    Attributes:
        dsn: a libpq connection string; ``SUPERVISE_CLUSTER_DSN`` in the environment wins
            (a password belongs there, not in a file).
        host_id: this engine's name in the fleet (default: the hostname); a task that
            names ``host`` runs only on the host with that id (queue ``host.<id>``).
        queues: the shared queues this host takes tasks from (besides ``host.<id>``).
        host_timeout: seconds without a heartbeat after which a host counts as lost; it
            also sets the fence (:func:`supervisor.config.fence.fence_of`): an agent whose
            engine died stops within ``7/8 (host_timeout - heartbeat)`` seconds.
        on_host_lost: ``report`` (its running tasks end ``host_lost``) or ``restart``
            (started fresh elsewhere as a new run, unless pinned to this host). Acted on
            by the sweeper (:mod:`supervisor.cluster.sweeper`); both are written in every
            heartbeat, so each host declares its own.
        heartbeat: seconds between this host's rows in ``supervise_hosts`` (at least
            :data:`MIN_HEARTBEAT`).
        stopped_host_grace: seconds a cleanly stopped host (``supervise shutdown``,
            SIGTERM: its agents run on in tmux and its next start adopts them) keeps its
            unfinished tasks; after that the sweeper applies ``on_host_lost`` as for a lost
            host, and the agents still running there stop (the released lease carries the
            deadline: :mod:`supervisor.cluster.lease`). Default :data:`STOPPED_HOST_GRACE`.
        prune_after: seconds after which this host's sweeper removes ended tasks, their
            events and jobs, and retired hosts (``supervise cluster prune --older-than``,
            one batch a minute: :mod:`supervisor.cluster.retention`); unset: never.
    """

    model_config = ConfigDict(extra="forbid")
    dsn: str | None = Field(default=None, min_length=1)
    host_id: str = Field(default_factory=_default_host_id)
    queues: list[str] = Field(default_factory=lambda: [SHARED_QUEUE], min_length=1)
    host_timeout: Annotated[PositiveSeconds, Field(ge=MIN_HEARTBEAT)] = 30.0
    on_host_lost: Literal["report", "restart"] = "report"
    heartbeat: Annotated[PositiveSeconds, Field(ge=MIN_HEARTBEAT)] = 5.0
    stopped_host_grace: PositiveSeconds = STOPPED_HOST_GRACE
    prune_after: PositiveSeconds | None = None

    @field_validator("host_id")
    @classmethod
    def _host_id(cls, value: str) -> str:
        if not NAME_RE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a usable host id; use 1 to 63 letters, digits, '_', '.' "
                "or '-', starting with a letter or digit"
            )
        return value

    @model_validator(mode="after")
    def _beats_within_timeout(self) -> ClusterSpec:
        # A host beating less often than its timeout would be declared dead while alive,
        # and the sweeper would retry its live jobs (supervisor.cluster.sweeper, rule d).
        if self.heartbeat >= self.host_timeout:
            raise ValueError(
                f"heartbeat ({self.heartbeat:g} s) must be shorter than host_timeout "
                f"({self.host_timeout:g} s), or the host counts as lost while it runs"
            )
        # The fence (supervisor.cluster.lease) renews every (host_timeout - heartbeat) / 8
        # seconds at most: a smaller gap would spin its thread and stop live agents.
        if self.host_timeout - self.heartbeat < MIN_FENCE:
            raise ValueError(
                f"host_timeout ({self.host_timeout:g} s) must exceed heartbeat "
                f"({self.heartbeat:g} s) by at least {MIN_FENCE:g} s: an agent whose engine "
                "died is stopped within that gap, before another host may run its task"
            )
        # A stopped host's agents stop by the released lease within the fence's bound; a
        # shorter grace lets the sweeper restart their tasks elsewhere while they still run.
        bound = fence_of(self.host_timeout, self.heartbeat).bound
        if self.stopped_host_grace < bound:
            raise ValueError(
                f"stopped_host_grace ({self.stopped_host_grace:g} s) must be at least "
                f"{bound:g} s, the time a stopped host's agents may take to stop (the fence's "
                f"bound for host_timeout {self.host_timeout:g} s and heartbeat "
                f"{self.heartbeat:g} s), or another host could restart a task while it still runs"
            )
        return self

    @field_validator("queues")
    @classmethod
    def _queues(cls, values: list[str]) -> list[str]:
        for value in values:
            if not NAME_RE.fullmatch(value) or value.startswith("host."):
                raise ValueError(
                    f"{value!r} is not a usable queue name; use letters, digits, '_', '.' or "
                    "'-' (names starting with 'host.' are the hosts' own queues)"
                )
        return values


def host_queue(host_id: str) -> str:
    """The queue of the tasks pinned to ``host_id``."""
    return f"host.{host_id}"


def cluster_dsn(spec: ClusterSpec, profile_path: object) -> str:
    """The DSN to connect with: ``SUPERVISE_CLUSTER_DSN``, else ``[cluster] dsn``.

    Raises:
        ConfigError: neither is set (one line naming the profile and the fix).
    """
    dsn = os.environ.get(DSN_ENV) or spec.dsn
    if not dsn:
        raise ConfigError(
            [
                f"{profile_path}: [cluster] has no database: set the environment variable "
                f"{DSN_ENV} (e.g. 'host=/run/postgresql dbname=supervise'), or "
                "[cluster] dsn in the profile"
            ]
        )
    return dsn


#: Profiles whose engine has already logged that spool files stay local (once per process).
_SPOOL_NOTED: set[str] = set()


def host_ignored(task_file: object, host: str, profile_path: object) -> str:
    """The warning for a task naming ``host`` under a profile without ``[cluster]``: the
    key is ignored and the task runs on the engine whose spool it is in (a single host has
    no other host to send it to; refusing it would lose a task that can run)."""
    return (
        f"warning: {task_file}: key 'host' = {host!r} is ignored: {profile_path} has no "
        "[cluster] table, so the task runs on the engine whose spool folder it is in; "
        "remove the key, or submit it with a [cluster] profile to pin it to a host"
    )


def spool_claim_warnings(profile: LoadedProfile, host: str | None, shown: Path) -> list[str]:
    """Lines the engine logs when it claims the task file ``shown`` (warnings, no error):

    * no ``[cluster]`` and the task names ``host``: :func:`host_ignored`;
    * a ``[cluster]`` host claiming from its spool folder (``shown`` in ``spool_dir``; the
      fleet's tasks are shown as ``postgresql/<id>.toml``): once per process, that such
      tasks run here only and are not in the fleet's database; and, for one naming another
      host, that the key is ignored for a spool file.
    """
    cluster = profile.spec.cluster
    if cluster is None:
        return [host_ignored(shown, host, profile.path)] if host else []
    if Path(shown).parent != profile.spool_dir:
        return []
    out = []
    if str(profile.path) not in _SPOOL_NOTED:
        _SPOOL_NOTED.add(str(profile.path))
        out.append(
            f"{profile.spool_dir}: task files dropped in the spool folder of cluster "
            f"host {cluster.host_id} run on this host only and are not in the fleet's "
            "database (use 'supervise submit' to reach the fleet); said once"
        )
    if host and host != cluster.host_id:
        out.append(
            f"warning: {shown}: key 'host' = {host!r} is ignored for a spool file: it "
            f"runs on this host ({cluster.host_id}); 'supervise submit' pins it"
        )
    return out

"""A fleet host's fencing times (issue 19's fence), derived from its ``[cluster]`` table:
pure arithmetic, so the engine (the lease it writes into ``launch.json``), the fleet's
:class:`~supervisor.cluster.lease.LeaseKeeper` and ``validate`` share it without a database
import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from supervisor.config.cluster import ClusterSpec

#: Seconds the wrapper waits between SIGTERM and SIGKILL at most (the engine's own stop,
#: :data:`supervisor.engine.stopping.STOP_TIMEOUT`, waits the same).
MAX_GRACE = 5.0
#: Seconds between the wrapper's looks at the lease at most.
MAX_POLL = 1.0


@dataclass(frozen=True)
class Fence:
    """A host's fencing times, all in seconds: ``lease`` (an unrenewed lease expires),
    ``poll`` (the wrapper's look), ``grace`` (SIGTERM to SIGKILL), ``renew`` (the
    engine's rewrite of the lease file)."""

    lease: float
    poll: float
    grace: float
    renew: float

    @property
    def bound(self) -> float:
        """Seconds an orphaned agent runs at most after its engine died."""
        return self.lease + 2 * self.poll + self.grace


def fence_of(host_timeout: float, heartbeat: float) -> Fence:
    """The fence of a host with ``[cluster] host_timeout`` and ``heartbeat`` (seconds;
    ``heartbeat < host_timeout``, as :class:`~supervisor.config.cluster.ClusterSpec`
    checks). With ``F = host_timeout - heartbeat``: ``lease = F / 2``, ``grace =
    min(5, F / 4)``, ``poll = min(1, F / 16)``, so :attr:`Fence.bound` <= ``7 F / 8`` < F;
    the engine renews every ``min(heartbeat, lease / 4)``."""
    budget = host_timeout - heartbeat
    lease = budget / 2
    return Fence(
        lease=lease,
        poll=min(MAX_POLL, budget / 16),
        grace=min(MAX_GRACE, budget / 4),
        renew=min(heartbeat, lease / 4),
    )


def host_fence(spec: ClusterSpec) -> Fence:
    """:func:`fence_of` a ``[cluster]`` table."""
    return fence_of(spec.host_timeout, spec.heartbeat)


def stopped_run_on(spec: ClusterSpec) -> float:
    """Seconds a cleanly stopped host's agents may run on (the released lease's limit,
    issue 25): ``stopped_host_grace`` less :attr:`Fence.bound`, so they are gone before the
    sweeper applies ``on_host_lost`` to their tasks, even when an engine starting again
    re-arms the lease at the last moment and its first heartbeat comes late (the held
    lease then expires within the bound); 0 when the grace is shorter than the bound."""
    return max(0.0, spec.stopped_host_grace - host_fence(spec).bound)

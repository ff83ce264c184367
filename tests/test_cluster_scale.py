"""A fleet that scales (issue 25, part 7): many engines, as separate ``supervise run``
processes with their own state dirs, tmux sockets, host ids and logins, against one
PostgreSQL at its default ``max_connections`` (100), the fake agent, 10 short tasks per
engine (``tests/support/cluster_scale.py``).

The count is :data:`~support.cluster_scale.DEFAULT_HOSTS` (12) here, which a 2-core CI
machine runs beside the rest of the suite and which already exceeds 100 connections at 10
per engine (issue 25: twelve idle engines used 97 of 100); ``SUPERVISE_SCALE_HOSTS=40`` runs
the issue's full count; ``benchmarks/cluster.py --hosts 40`` measures it
(benchmarks/README, "Issue 25").
"""

from __future__ import annotations

import pytest
from conftest import wait_for
from support.cluster_engines import rows, wait_beats
from support.cluster_scale import (
    MAX_STEADY,
    Sampler,
    connection_figures,
    default_postgres,
    scale_fleet,
    scale_hosts,
    wait_all_ended,
)

pytest.importorskip("psycopg")

#: Tasks per engine.
PER_ENGINE = 10


@pytest.mark.slow
def test_many_engines_on_a_default_postgres_lose_double_and_stall_nothing() -> None:
    """N engines, 10 short tasks each: every task ends ``completed``, each launched once
    fleet-wide (the hosts' local event logs and ``supervise_events``), dispatch moves until
    the last one (no state count frozen for 90 s), no engine dies, and once idle again each
    engine holds at most 2 connections (the median of its samples over 3 heartbeats)."""
    count = scale_hosts()
    with (
        default_postgres() as dsn,
        scale_fleet(dsn, count, slots=2, heartbeat=1.0, host_timeout=5.0) as fleet,
    ):
        ids = [fleet.submit("exit: 0") for _ in range(PER_ENGINE * count)]
        final = wait_all_ended(dsn, len(ids))
        assert final == {"completed": len(ids)}, final
        wait_for(
            lambda: (
                rows(dsn, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'")
                == [(0,)]
            ),
            timeout=60,
        )
        assert fleet.dead_engines() == []
        launched = fleet.launches()
        doubled = {t: hosts for t, hosts in launched.items() if len(hosts) != 1}
        assert doubled == {}, doubled
        assert sorted(launched) == sorted(ids)
        events = rows(
            dsn,
            "SELECT task_id, count(*) FROM supervise_events "
            "WHERE event = 'launched' GROUP BY task_id",
        )
        assert dict(events) == dict.fromkeys(ids, 1)
        sampler = Sampler(dsn, fleet.logins)
        try:
            wait_beats(dsn, "h0", count=3)
            wait_for(lambda: len(sampler.samples) >= 8, timeout=30)
            figures = connection_figures([s for _, s in sampler.samples], list(fleet.hosts))
        finally:
            sampler.close()
        print(f"{count} idle engines: connections {figures}")
        over = {h: n for h, n in figures["per_engine_steady"].items() if n > MAX_STEADY}
        assert over == {}, f"engines over {MAX_STEADY} steady connections: {over}"

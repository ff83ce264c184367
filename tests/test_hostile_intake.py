"""Issue 20: hostile task files against ONE live engine (a hypothesis property test).

Batches of hostile spool entries (:mod:`hostile_support`: every key a task file may set by
default, extreme values, wrong types, NUL/newline/bidi/invalid UTF-8, odd file types for
the entry and every path it names) are dropped beside a plain task into the spool of one
running ``supervise run``. After each batch the plain task has completed and every entry
is either a task folder or in ``spool/rejected/`` with its ``.error``: nothing lost, the
engine never stalled. Then every task claimed ends (no hostile value keeps one busy
forever), the engine's log holds no traceback, and SIGTERM stops it within a bound.

The CI budget (``SUPERVISE_HOSTILE_BATCHES``, default 12 batches of 8) keeps this under a
minute; ``benchmarks/hostile.py --examples N`` runs a long one.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, Phase, example, given, settings
from support.hostile_support import ISSUE_BATCH, Entry, LiveEngine, batches

#: Batches of entries per run (CI budget) and entries per batch.
BATCHES = int(os.environ.get("SUPERVISE_HOSTILE_BATCHES", "12"))
BATCH_SIZE = 8
#: Seconds the engine may take to stop after SIGTERM here, and what the test allows.
STOP_BOUND = 10.0
STOP_PATIENCE = 45.0


def test_hostile_batches_never_stall_one_live_engine(tmp_path: Path, socket_name: str) -> None:
    engine = LiveEngine(tmp_path, socket_name, stop_bound=STOP_BOUND)
    engine.start()
    try:

        @settings(
            max_examples=BATCHES, deadline=None, database=None,
            phases=(Phase.explicit, Phase.generate),
            suppress_health_check=list(HealthCheck),
        )  # fmt: skip
        @given(batch=batches(BATCH_SIZE))
        @example(batch=ISSUE_BATCH)
        def one_batch(batch: list[Entry]) -> None:
            engine.drop(batch)

        one_batch()
        engine.settle()
        engine.stop(STOP_PATIENCE)  # fails if SIGTERM did not stop it within the patience
        assert engine.process is not None and engine.process.returncode is not None
        assert "Traceback" not in engine.tail(10**7), engine.tail()
    finally:
        engine.close()

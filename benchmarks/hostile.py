"""Hostile task files against one live engine, a long budget (issue 20).

    python benchmarks/hostile.py [--examples 200] [--batch 8] [--out results/hostile.json]

The same generator and harness as ``tests/test_hostile_intake.py`` (``hostile_support.py``),
run for ``--examples`` batches of ``--batch`` entries instead of the CI budget: one
``supervise run`` (the fake agent, a private tmux socket unique to this run, a temp dir removed
at the end unless ``--keep``); each batch is dropped beside a plain task; the batch passes when
the plain task completes and every entry is a task folder or in ``spool/rejected/`` with its
``.error`` within ``--patience`` seconds. At the end SIGTERM must stop the engine within the
stop bound (``SUPERVISE_STOP_BOUND``, 10 s here) plus slack.

Prints a table and writes the figures as JSON to ``--out`` (exit status 1 on any failure,
with the failing batch and the engine log's tail). Only the engine this script started is
ended (by PID), plus the private tmux server it named.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, Phase, example, given, settings
from support.hostile_support import ISSUE_BATCH, Entry, LiveEngine, batches


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def run(examples: int, size: int, patience: float, keep: bool) -> dict[str, Any]:
    """Run the batches; return the figures (``ok`` False with ``failure`` on a failure)."""
    root = Path(tempfile.mkdtemp(prefix="supervise-hostile-"))
    socket_name = f"sv-hostile-{uuid.uuid4().hex[:8]}"
    engine = LiveEngine(root, socket_name)
    results: list[Any] = []
    figures: dict[str, Any] = {"ok": True, "root": str(root)}
    began = time.monotonic()
    engine.start()
    try:

        @settings(max_examples=examples, deadline=None, database=None,
                  phases=(Phase.explicit, Phase.generate),
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(batch=batches(size))
        @example(batch=ISSUE_BATCH)
        def one_batch(batch: list[Entry]) -> None:
            results.append(engine.drop(batch, patience))

        try:
            one_batch()
            engine.settle(patience)
            figures["tracebacks"] = engine.tail(10**9).count("Traceback")
            figures["stop_s"] = round(engine.stop(), 3)
            figures["ended"] = engine.ended()
        except AssertionError as exc:
            figures.update(ok=False, failure=str(exc)[-6000:])
    finally:
        engine.close()
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True,
                       check=False)  # fmt: skip
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    plain = [r.plain_s for r in results]
    figures.update(
        batches=len(results),
        entries=sum(r.claimed + r.rejected for r in results),
        claimed=sum(r.claimed for r in results),
        rejected=sum(r.rejected for r in results),
        plain_p50_s=round(statistics.median(plain), 3) if plain else None,
        plain_p95_s=round(_percentile(plain, 0.95), 3),
        plain_max_s=round(max(plain, default=0.0), 3),
        all_max_s=round(max((r.all_s for r in results), default=0.0), 3),
        wall_s=round(time.monotonic() - began, 1),
        cores=os.cpu_count(),
        python=platform.python_version(),
    )
    if figures.get("tracebacks"):
        figures.update(ok=False, failure=f"{figures['tracebacks']} traceback(s) in the engine log")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=200, help="batches (default 200)")
    parser.add_argument("--batch", type=int, default=8, help="entries per batch (default 8)")
    parser.add_argument("--patience", type=float, default=60.0,
                        help="seconds a batch may take (default 60)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    figures = run(args.examples, args.batch, args.patience, args.keep)
    rows = [(k, v) for k, v in figures.items() if k not in ("failure", "root")]
    print(tabulate(rows, headers=("figure", "value")))
    if not figures["ok"]:
        print(figures["failure"], file=sys.stderr)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

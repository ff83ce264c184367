"""``run.py --only load`` with a chosen set of load windows instead of all four.

    .venv/bin/python benchmarks/load_only.py --configs 200:30,200:1 [run.py options]

``--configs`` is a comma-separated list of ``AGENTS:BASE_INTERVAL`` (default
``200:30,200:1``), in the order they are measured. Agents are added as the list grows and
the engine is restarted (and re-adopts the running agents) whenever the interval changes,
exactly as in ``run.py``'s ``load`` scenario; all other options (``--duration``,
``--load-runs``, ``--out``, ``--keep``) are ``run.py``'s. The output JSON and table have the
same shape as ``run.py``'s.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run


def parse_configs(text: str) -> tuple[tuple[int, float], ...]:
    configs = []
    for part in text.split(","):
        agents, base = part.split(":")
        configs.append((int(agents), float(base)))
    counts = [a for a, _ in configs]
    if counts != sorted(counts) or min(counts) < 1:
        raise SystemExit("--configs: agent counts must be positive and never shrink")
    return tuple(configs)


def main(argv: list[str]) -> int:
    configs = "200:30,200:1"
    rest = []
    it = iter(argv)
    for arg in it:
        if arg == "--configs":
            configs = next(it)
        elif arg.startswith("--configs="):
            configs = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    run.LOAD_CONFIGS = parse_configs(configs)
    print(f"load windows: {run.LOAD_CONFIGS}", flush=True)
    return run.main(["--only", "load", *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A demo agent for the shipped example: no model, no network, honest about being a demo.

It reads its prompt, prints a few progress lines (so ``output.log`` grows), writes
``DEMO_RESULT.txt`` into its working directory and exits. A prompt line ``exit: N`` makes it
exit with code ``N`` (to show a failed task); ``steps: N`` sets how many progress lines it
prints, ``delay: S`` the seconds between them.

Usage: ``python -m supervisor.demo_agent --prompt-file FILE [--model M] [--session-id ID]``
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path


def _setting(prompt: str, key: str, default: float) -> float:
    match = re.search(rf"^\s*{key}\s*:\s*([0-9.]+)\s*$", prompt, re.MULTILINE)
    return float(match.group(1)) if match else default


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code asked for in the prompt (default 0)."""
    parser = argparse.ArgumentParser(prog="demo_agent")
    parser.add_argument("--prompt-file", required=True)
    parser.add_argument("--model", default="demo")
    parser.add_argument("--session-id", default="")
    args = parser.parse_args(argv)
    prompt = Path(args.prompt_file).read_text(encoding="utf-8")
    steps = int(_setting(prompt, "steps", 3))
    delay = _setting(prompt, "delay", 0.5)
    code = int(_setting(prompt, "exit", 0))
    print(f"demo agent (not a model) starting; model={args.model} session={args.session_id}")
    first = prompt.strip().splitlines()[0] if prompt.strip() else "(empty prompt)"
    print(f"task: {first}")
    for step in range(1, steps + 1):
        time.sleep(delay)
        print(f"working... step {step}/{steps}", flush=True)
    Path("DEMO_RESULT.txt").write_text(f"demo agent finished: {first}\n", encoding="utf-8")
    print(f"RESULT: wrote DEMO_RESULT.txt; exiting with code {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())

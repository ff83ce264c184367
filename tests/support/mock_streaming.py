"""Streams of :mod:`mock_anthropic` that take time: a content block that streams slowly and a
stall that keeps the connection alive with SSE ``ping`` events only.

Directives (read like every other directive of :mod:`mock_anthropic`):

``[[slow_write: NAME S]]`` (may repeat; a step like ``[[write: NAME]]``)
    A ``Write`` of ``<cwd>/NAME`` whose single ``tool_use`` block streams for about ``S``
    seconds (float; default :data:`DEFAULT_SLOW_SECONDS`): its ``input_json_delta`` is cut
    into fragments sent every :data:`FRAGMENT_EVERY` seconds, so the real API's slow output
    of a long file is reproduced. The file holds :func:`slow_content` (one line per
    fragment). A non-streaming request (the CLI's fallback) is answered at once.
``[[ping_stall: N]]``
    The next N main requests (counted after ``stall_stream``) start the SSE stream with
    ``message_start`` and then send only ``ping`` events, one every :data:`PING_EVERY`
    seconds, until :meth:`MockAnthropic.release_stalls` (then the rest of the message) or
    :meth:`MockAnthropic.stop` (the connection closes). No content arrives meanwhile: the
    API looks alive and makes no progress.

What Claude Code 2.1.328 prints for them with ``--include-partial-messages`` is recorded in
``tests/fixtures/claude/headless/partial-*.jsonl``: one ``stream_event`` line per SSE event
it received, except ``ping`` (never printed), so a ping stall prints nothing after its
``message_start``.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from typing import Any

Event = tuple[str, dict[str, Any]]
"""One SSE event: ``(event name, data)``."""

FRAGMENT_EVERY = 0.25
"""Seconds between two ``input_json_delta`` fragments of a slow write."""
DEFAULT_SLOW_SECONDS = 30.0
"""Seconds a ``[[slow_write: NAME]]`` block streams when no duration is given."""
MAX_SLOW_SECONDS = 3600.0
"""The longest a slow write streams (a bigger ``S`` is cut to this)."""
PING_EVERY = 2.0
"""Seconds between two ``ping`` events of a ping stall."""
PING: Event = ("ping", {"type": "ping"})


def parse_slow_write(args: str) -> tuple[str, float]:
    """``"NAME S"`` → ``(NAME, S)``; a missing, unreadable or non-finite ``S`` is
    :data:`DEFAULT_SLOW_SECONDS`; ``S`` is clamped to 0 .. :data:`MAX_SLOW_SECONDS`."""
    words = args.split()
    try:
        seconds = float(words[1]) if len(words) > 1 else DEFAULT_SLOW_SECONDS
    except ValueError:
        seconds = DEFAULT_SLOW_SECONDS
    if not math.isfinite(seconds):
        seconds = DEFAULT_SLOW_SECONDS
    return (words[0] if words else ""), min(max(0.0, seconds), MAX_SLOW_SECONDS)


def fragments_for(seconds: float) -> int:
    """How many fragments a block streaming ``seconds`` is cut into: one at the start and
    one per :data:`FRAGMENT_EVERY` after it."""
    return int(seconds / FRAGMENT_EVERY) + 1


def slow_content(seconds: float) -> str:
    """The content of a slow write: one numbered line per fragment."""
    return "".join(
        f"line {k:05d} of a slowly streamed file\n" for k in range(fragments_for(seconds))
    )


def paced(events: list[Event], seconds: float) -> Iterator[tuple[float, list[Event]]]:
    """``events`` as ``(delay before, events)`` pieces: everything up to the ``tool_use``
    block's ``input_json_delta`` at once, then that delta cut into :func:`fragments_for`
    fragments, one per :data:`FRAGMENT_EVERY` seconds, then the rest at once."""
    index = next((k for k, event in enumerate(events) if _is_input_delta(event)), None)
    if index is None:
        yield 0.0, events
        return
    yield 0.0, events[:index]
    name, data = events[index]
    delta = data["delta"]
    text = delta["partial_json"]
    count = min(fragments_for(seconds), len(text))
    bounds = [len(text) * k // count for k in range(count + 1)]
    for k in range(count):
        piece = copy.deepcopy(data)
        piece["delta"]["partial_json"] = text[bounds[k] : bounds[k + 1]]
        yield (FRAGMENT_EVERY if k else 0.0), [(name, piece)]
    yield 0.0, events[index + 1 :]


def stalled(
    mock: Any, events: list[Event], prefix: int, pings: bool
) -> Iterator[tuple[float, list[Event]]]:
    """The pieces of a stalled stream: ``events[:prefix]``, then silence (``stall_stream``)
    or a :data:`PING` every :data:`PING_EVERY` s (``ping_stall``) until ``mock`` releases
    its stalls (then the rest of ``events``) or stops (then nothing more)."""
    yield 0.0, events[:prefix]
    released = mock.wait_released(PING_EVERY if pings else None)
    while released is None:
        yield 0.0, [PING]
        released = mock.wait_released(PING_EVERY)
    if released:
        yield 0.0, events[prefix:]


def _is_input_delta(event: Event) -> bool:
    name, data = event
    delta = data.get("delta") if name == "content_block_delta" else None
    return isinstance(delta, dict) and delta.get("type") == "input_json_delta"


def joined_input(events: list[Event]) -> dict[str, Any]:
    """The ``tool_use`` input rebuilt from every ``input_json_delta`` of ``events`` (for
    tests: the fragments of :func:`paced` add up to the whole input)."""
    text = "".join(
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta" and data["delta"].get("type") == "input_json_delta"
    )
    return json.loads(text)

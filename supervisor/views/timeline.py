"""A task's timeline for its web page: status bands over time and marks, as inline SVG.

:func:`timeline` turns a task's events (``events.jsonl`` records, oldest first) into
:class:`Band` s, one per change of the ``status`` field the engine writes on each decision
event (:meth:`supervisor.engine.actions.Actions._record_events`), and :class:`Mark` s for the
moments an operator looks for: resumes, escalations and their answers, continues. Pure: no
I/O, no clock (``now`` is passed in).

:func:`svg` draws it server-side (no script, no library): one ``<rect class="band s-STATUS"
data-status="STATUS">`` per band, left to right, and one ``<line class="mark">`` per mark,
each with a ``<title>`` tooltip, and the first moment (UTC) and the whole span below.
Band widths follow time, but every band gets at least
:data:`MIN_BAND` units, so a crash that lasted a second stays visible beside hours of
running. Every text placed in the SVG is control-escaped
(:func:`supervisor.terminal.escape_controls`) and then XML-escaped (markupsafe).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from supervisor.taskdir.events import Event
from supervisor.taskdir.states import TERMINAL
from supervisor.terminal import escape_controls
from supervisor.views.sources import duration, epoch

#: The most bands drawn (the newest): a task that flapped thousands of times would make a
#: page of megabytes, re-rendered at each change of its output.
MAX_BANDS = 300
#: Characters kept of a status and of a mark's reason (the event log is the full record).
LABEL_MAX = 64
DETAIL_MAX = 300
#: Events drawn as marks over the bands (their names come from the policy's decisions).
MARKED = frozenset(
    {Event.RESUMED, Event.ESCALATED, Event.APPROVED, Event.DENIED, Event.CONTINUED, Event.STALE}
)
#: Width of the drawing in SVG user units (the page scales it to its own width), the
#: least width of a band, and the height of the band row.
WIDTH = 1000.0
MIN_BAND = 8.0
BAND_H = 28.0
#: Width of a terminal status's band (it has no duration; wide enough for its label).
END_BAND = 90.0
#: Characters per user unit a label needs, roughly (a band too narrow shows no label; its
#: tooltip still names it).
CHAR_W = 7.0


@dataclass(frozen=True, slots=True)
class Band:
    """One stretch of a status: ``status``; ``start`` and ``end`` epoch seconds (``end ==
    start`` for a terminal status: it is where the task ended)."""

    status: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Mark:
    """One marked event: ``event`` (a name in :data:`MARKED`), ``at`` epoch seconds and
    ``detail`` (its reason, as the event log holds it; may be empty)."""

    event: str
    at: float
    detail: str


@dataclass(frozen=True, slots=True)
class Timeline:
    """A task's bands (oldest first, consecutive, never two of one status in a row), marks
    (oldest first, none before the first band kept) and ``dropped``: how many older bands
    were left out (:data:`MAX_BANDS`)."""

    bands: tuple[Band, ...]
    marks: tuple[Mark, ...]
    dropped: int = 0


def timeline(events: Iterable[dict[str, Any]], now: float) -> Timeline:
    """The timeline of a task from its events (oldest first), read at ``now`` (epoch s).

    An event with a string ``status`` different from the current band's starts a new band;
    events without a parsable ``ts`` are skipped (a torn or foreign line). The last band of
    a live task ends at ``now``; that of an ended task (a status in
    :data:`supervisor.taskdir.states.TERMINAL`) at its own start. Time that steps back (a clock
    change) is clamped so bands never overlap. Only the newest :data:`MAX_BANDS` bands
    are kept.
    """
    starts: list[tuple[str, float]] = []
    marks: list[Mark] = []
    last = None
    for event in events:
        at = epoch(event.get("ts")) if isinstance(event, dict) else None
        if at is None:
            continue
        last = at if last is None else max(last, at)
        status = event.get("status")
        if isinstance(status, str) and status:
            status = status[:LABEL_MAX]
            if not starts or starts[-1][0] != status:
                starts.append((status, last))
        name = event.get("event")
        if name in MARKED:
            reason = event.get("reason")
            detail = reason[:DETAIL_MAX] if isinstance(reason, str) else ""
            marks.append(Mark(str(name), last, detail))
    bands = []
    for i, (status, start) in enumerate(starts):
        if i + 1 < len(starts):
            end = starts[i + 1][1]
        else:
            end = start if status in TERMINAL else max(start, now)
        bands.append(Band(status, start, end))
    dropped = max(0, len(bands) - MAX_BANDS)
    if dropped:
        bands = bands[dropped:]
        marks = [m for m in marks if m.at >= bands[0].start]
    return Timeline(tuple(bands), tuple(marks), dropped)


def _layout(bands: tuple[Band, ...]) -> list[tuple[float, float]]:
    """``(x, width)`` of each band: :data:`MIN_BAND` each (:data:`END_BAND` for the end),
    the rest shared by duration."""
    ended = bands[-1].status in TERMINAL
    timed = bands[:-1] if ended else bands
    total = sum(b.end - b.start for b in timed)
    spare = max(0.0, WIDTH - MIN_BAND * len(timed) - (END_BAND if ended else 0.0))
    out, x = [], 0.0
    for i, band in enumerate(bands):
        share = (band.end - band.start) / total if total > 0 else 1 / max(1, len(timed))
        width = END_BAND if ended and i == len(bands) - 1 else MIN_BAND + spare * share
        out.append((x, width))
        x += width
    return out


def _x_of(at: float, bands: tuple[Band, ...], boxes: list[tuple[float, float]]) -> float:
    """Where moment ``at`` falls on the drawing (inside the band that holds it)."""
    for band, (x, width) in zip(bands, boxes, strict=True):
        if at <= band.end or band is bands[-1]:
            span = band.end - band.start
            part = (at - band.start) / span if span > 0 else 0.0
            return x + width * min(1.0, max(0.0, part))
    return 0.0


def _utc(at: float) -> str:
    """``2026-11-23 12:00:00 UTC``; ``?`` for a moment the C library cannot show."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    except (OverflowError, OSError, ValueError):
        return "?"


def _summary(line: Timeline) -> str:
    """The whole timeline in words (the SVG's own title, read by screen readers)."""
    older = f"{line.dropped} older changes, then " if line.dropped else ""
    return older + " → ".join(b.status for b in line.bands)


def _text(value: str) -> Markup:
    return escape(escape_controls(value))


def _marks(line: Timeline, boxes: list[tuple[float, float]]) -> list[Markup]:
    """One ``<g class="mark">`` per mark: its line and tooltip always, its label only where it
    does not run into the label drawn before it (an escalation approved within a second
    put two labels on one spot, unreadable); the tooltip still names every mark."""
    drawn: list[Markup] = []
    free_from = float("-inf")  # x where the next label may start
    for mark in line.marks:
        x = _x_of(mark.at, line.bands, boxes)
        tip = f"{mark.event}: {mark.detail}" if mark.detail else mark.event
        label = Markup("")
        if x >= free_from:
            label = Markup('<text x="{:.1f}" y="{:.1f}">{}</text>').format(
                x, BAND_H + 18, _text(mark.event)
            )
            free_from = x + CHAR_W * (len(mark.event) + 1)
        drawn.append(
            Markup(
                '<g class="mark m-{0}" data-event="{0}"><line x1="{1:.1f}" x2="{1:.1f}" y1="0" '
                'y2="{2:.1f}"/>{3}<title>{4}</title></g>'
            ).format(_text(mark.event), x, BAND_H + 6, label, _text(tip))
        )
    return drawn


def svg(line: Timeline) -> Markup:
    """The timeline as one ``<svg class="timeline">`` element (safe to put in a page as it
    is), or a ``<p class="empty">`` when there is no band (no event with a status)."""
    if not line.bands:
        return Markup('<p class="empty">no status events yet</p>')
    boxes = _layout(line.bands)
    width = boxes[-1][0] + boxes[-1][1]
    height = BAND_H + 40
    parts = [
        Markup(
            '<svg class="timeline" role="img" xmlns="http://www.w3.org/2000/svg" '
            'viewBox="0 0 {:.1f} {:.1f}">'
        ).format(width, height)
    ]
    parts.append(Markup("<title>{}</title>").format(_text(_summary(line))))
    for band, (x, w) in zip(line.bands, boxes, strict=True):
        tip = f"{band.status} for {duration(band.end - band.start)}"
        parts.append(
            Markup(
                '<g class="band"><rect class="band s-{0}" data-status="{0}" x="{1:.1f}" y="0" '
                'width="{2:.1f}" height="{3:.1f}"><title>{4}</title></rect>'
            ).format(_text(band.status), x, w, BAND_H, _text(tip))
        )
        if w >= CHAR_W * (len(band.status) + 1):
            parts.append(
                Markup('<text x="{:.1f}" y="{:.1f}">{}</text>').format(
                    x + 4, BAND_H / 2 + 4, _text(band.status)
                )
            )
        parts.append(Markup("</g>"))
    parts.extend(_marks(line, boxes))
    first, last = line.bands[0].start, line.bands[-1].end
    parts.append(
        Markup(
            '<text class="axis" x="2" y="{0:.1f}">{1}</text>'
            '<text class="axis" x="{2:.1f}" y="{0:.1f}" text-anchor="end">{3}</text>'
        ).format(
            height - 4,
            _utc(first),
            width - 2,
            f"{duration(last - first)} in all",
        )
    )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)

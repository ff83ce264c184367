"""``serve``'s spend over time (issue 26): the profile's spend per local day (the last
:data:`DAYS` days) and per hour of today, as bars of an inline SVG drawn by the server (no
script, no library from the network). The figures are :func:`supervisor.costs.profiles_report`'s
(the same as ``supervise cost``); every label goes through the template's autoescape.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from supervisor import costs

#: Days drawn (today and the ones before).
DAYS = 14
#: The chart's drawing area in SVG units.
WIDTH, HEIGHT = 560.0, 120.0


@dataclass(frozen=True)
class Bar:
    """One bar: its label (a day or an hour), USD, and its place in the SVG."""

    label: str
    usd: float
    x: float
    y: float
    width: float
    height: float


def bars(values: list[tuple[str, float]]) -> list[Bar]:
    """Bars for ``(label, usd)`` pairs, scaled to the largest (a zero chart is flat)."""
    top = max((usd for _, usd in values), default=0.0) or 1.0
    step = WIDTH / max(len(values), 1)
    out = []
    for n, (label, usd) in enumerate(values):
        height = HEIGHT * usd / top
        out.append(Bar(label, usd, n * step + 1, HEIGHT - height, max(step - 2, 1), height))
    return out


def spend_view(profile: Any, now: float | None = None) -> dict[str, Any]:
    """What ``spend.html`` draws: ``days`` and ``hours`` (:class:`Bar` lists), ``report``
    (:func:`supervisor.costs.profiles_report` over the last :data:`DAYS` days) and
    ``today`` (USD)."""
    now = time.time() if now is None else now
    start = costs.days_back(now, DAYS)
    name = profile.path.stem
    found = list(costs.with_profile(costs.scan(profile.tasks_dir), name))  # read once
    report = costs.report(found, costs.Window(start, None), now)
    report["budgets"] = costs.budgets([(name, profile.spec.budget.daily_usd)], found, now)
    per_day = {row["day"]: row["usd"] for row in report["by_day"]}
    days, moment = [], start
    while moment <= now:
        day = costs.day_of(moment)
        days.append((day[5:], per_day.get(day, 0.0)))
        moment = costs.day_start(moment + 86400 + 3600)  # the next day, DST or not
    spent = [item for item in found if isinstance(item, costs.TaskSpend)]
    hours = [(f"{n:02d}", usd) for n, usd in enumerate(costs.hours_today(spent, now))]
    today = per_day.get(costs.day_of(now), 0.0)
    return {"days": bars(days), "hours": bars(hours), "report": report, "today": today}

"""``supervise serve``'s server: the task board and each task's page, updated live over
server-sent events (Starlette, sse-starlette, uvicorn; the ``web`` extra).

Routes::

    GET  /                        the board (the fleet by host with [cluster]; this host's
                                  engine, spool, tasks grouped by what needs you)
    GET  /stream                  SSE: event "board", data = the board's HTML, on each change
    GET  /task/{id}               one task: manifest, event timeline, output tail
    GET  /task/{id}/stream        SSE: event "task", data = that page's body, on each change
    GET  /api/snapshot            the status model as JSON
    GET  /spend                   spend per day and per hour of today (inline SVG, issue 26)
    GET  /api/cost                ``supervise cost --json`` of the profile
    GET  /plans                   the plans: each edge with both tasks' status (issue 26)
    GET  /plans/stream            SSE: event "plans", data = that page's body, on each change
    GET  /api/plans               the same as JSON (:class:`supervisor.views.plangraph.Graph`)
    POST /api/task/{id}/{verb}    approve | deny | stop | resume (``--allow-actions`` only)
    GET  /static/...              the page's CSS and JS (shipped in the package: no CDN)

**Updates.** While a browser holds ``/stream`` open, one poller per server
(:class:`BoardHub`) looks at the state dir every :data:`POLL_S` seconds
(:func:`supervisor.views.webpage.fingerprint`: a ``stat`` per manifest, the spool and control
folders' listings, no file read), renders the board once per change and sends it to every open
stream; so a change shows within ``POLL_S`` plus one render, whatever the number of
browsers. Output and heartbeat changes alone re-render at most every :data:`SLOW_S` seconds
(agents print all the time; a full render over 1,000 tasks is not free), and the board is
rendered at least every :data:`MAX_AGE_S` seconds (an engine going stale changes no file).
Renders run on a worker thread, never on the event loop. With ``[cluster]`` the fleet's
database is read on a thread of its own at most every
:data:`supervisor.views.fleet.FLEET_S` seconds while the board is watched, and a new read
changes the fast fingerprint (:mod:`supervisor.views.fleet`).

Every text from a task or an agent is shown through
:func:`supervisor.terminal.escape_controls` and then HTML-escaped (Jinja2's autoescape);
the JS only swaps in HTML the server escaped, and never builds markup from data.

Actions write the same ``state_dir/control/<id>.<verb>`` request as the CLI verbs
(:mod:`supervisor.taskdir.control`), after the same checks
(:func:`supervisor.taskdir.control.refusal`); the page sees the result through the stream
when the engine has applied it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from supervisor.views import webpage
from supervisor.views.webauth import Access, AccessMiddleware, csrf_problem

if TYPE_CHECKING:
    import socket

    from supervisor.config import LoadedProfile

#: Seconds between two looks at the state dir while a browser watches (the page is at most
#: this plus one render behind a manifest change; the target is 1 s, and a loaded 2-core
#: machine measured 0.87 s with 0.5 s).
POLL_S = 0.25
#: Seconds between renders caused only by new output or the engine's heartbeat.
SLOW_S = 5.0
#: Seconds after which the board is rendered even when no file changed (engine staleness).
MAX_AGE_S = 15.0
#: Seconds between SSE keep-alive comments (proxies close idle streams).
PING_S = 15

log = logging.getLogger(__name__)


class BoardHub:
    """One poller and one render per change for every open board stream.

    ``probe()`` and ``slow_probe()`` return hashable fingerprints (the first is looked at
    every :data:`POLL_S` seconds, the second every :data:`SLOW_S`); ``render()`` returns
    the board's HTML. All three block, so they run on a worker thread.
    """

    def __init__(
        self,
        probe: Callable[[], Any],
        slow_probe: Callable[[], Any],
        render: Callable[[], str],
    ) -> None:
        self.probe, self.slow_probe, self.render = probe, slow_probe, render
        self.version = 0
        self.html = ""
        self.watchers = 0
        self.renders = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        fast = slow = None
        rendered_at = slow_at = 0.0
        while self.watchers > 0:
            began = time.monotonic()
            try:
                fast, slow, rendered_at, slow_at = await self._look(
                    began, fast, slow, rendered_at, slow_at
                )
            except Exception:  # a file that breaks a render must not stop every stream
                log.exception("supervise serve: the board could not be rendered")
            # Fixed rate: the next look is POLL_S after this one began, not after it ended.
            await asyncio.sleep(max(0.05, POLL_S - (time.monotonic() - began)))

    async def _look(
        self, began: float, fast: Any, slow: Any, rendered_at: float, slow_at: float
    ) -> tuple[Any, Any, float, float]:
        """One look: probe, render when due, wake the streams when the board changed.
        Returns the new ``(fast, slow, rendered_at, slow_at)``."""
        due = False
        now_fast = await asyncio.to_thread(self.probe)
        if now_fast != fast or began - rendered_at >= MAX_AGE_S:
            fast, due = now_fast, True
        if began - slow_at >= SLOW_S:
            now_slow, slow_at = await asyncio.to_thread(self.slow_probe), began
            due, slow = due or now_slow != slow, now_slow
        if due:
            html = await asyncio.to_thread(self.render)
            self.renders += 1
            rendered_at = began
            if html != self.html:
                async with self._changed:
                    self.html, self.version = html, self.version + 1
                    self._changed.notify_all()
        return fast, slow, rendered_at, slow_at

    def _newer(self, seen: int) -> bool:
        return 0 < self.version != seen

    async def stream(self) -> AsyncIterator[dict[str, str]]:
        """SSE events ``{"event": "board", "data": html}``: the board now, then each change."""
        self.watchers += 1
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll())
        seen = -1
        try:
            while True:
                async with self._changed:
                    await self._changed.wait_for(functools.partial(self._newer, seen))
                    seen, html = self.version, self.html
                yield {"event": "board", "data": html}
        finally:
            self.watchers -= 1


async def _page_stream(
    event: str, probe: Callable[[], Any], render: Callable[[], str]
) -> AsyncIterator[dict[str, str]]:
    """SSE events ``{"event": event, "data": html}`` for one open page: its body now, then
    again on each change of ``probe()``'s fingerprint (polled every :data:`POLL_S` seconds;
    both block, so they run on a worker thread). A task's page (its manifest, event log and
    output) and the plans page (every task's manifest)."""
    last = None
    while True:
        now = await asyncio.to_thread(probe)
        if now != last:
            last = now
            yield {"event": event, "data": await asyncio.to_thread(render)}
        await asyncio.sleep(POLL_S)


def _spend_routes(pages: webpage.Pages) -> list[Route]:
    """``/spend`` (the spend page), ``/api/cost`` (``supervise cost --json``), ``/plans``,
    its live ``/plans/stream`` and ``/api/plans`` (the plan graph), issue 26."""

    async def spend(request: Request) -> Response:
        return HTMLResponse(await asyncio.to_thread(pages.spend))

    async def cost(request: Request) -> Response:
        data = await asyncio.to_thread(pages.cost_json)
        return Response(data, media_type="application/json")

    async def plans(request: Request) -> Response:
        return HTMLResponse(pages.plans(await asyncio.to_thread(pages.plans_body)))

    async def plans_stream(request: Request) -> Response:
        probe = functools.partial(webpage.fingerprint, pages.profile)
        return EventSourceResponse(_page_stream("plans", probe, pages.plans_body), ping=PING_S)

    async def plans_json(request: Request) -> Response:
        data = await asyncio.to_thread(pages.plans_json)
        return Response(data, media_type="application/json")

    return [
        Route("/spend", spend),
        Route("/api/cost", cost),
        Route("/plans", plans),
        Route("/plans/stream", plans_stream),
        Route("/api/plans", plans_json),
    ]


def create_app(
    profile: LoadedProfile, token: str | None, allow_actions: bool, loopback: bool = True
) -> Any:
    """The ASGI app of ``supervise serve`` for one profile.

    Args:
        profile: the loaded profile (its ``state_dir`` and ``spool_dir`` are read).
        token: the secret every request needs, or ``None`` (only allowed on loopback).
        allow_actions: serve approve, deny, stop and resume (needs ``token``).
        loopback: bound to loopback: requests must name a loopback ``Host``.

    Raises:
        ValueError: ``allow_actions`` without a token.
    """
    if allow_actions and not token:
        raise ValueError("actions need a token")
    access = Access(token=token, allow_actions=allow_actions, loopback=loopback)
    pages = webpage.Pages(profile, access)
    hub = BoardHub(
        lambda: (webpage.fingerprint(profile), pages.fleet_key()),
        lambda: webpage.slow_fingerprint(profile),
        pages.board,
    )

    async def index(request: Request) -> Response:
        board = await asyncio.to_thread(pages.board)
        return HTMLResponse(pages.index(board))

    async def board_stream(request: Request) -> Response:
        return EventSourceResponse(hub.stream(), ping=PING_S)

    async def task_page(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        body = await asyncio.to_thread(pages.task_body, task_id)
        if body is None:
            return PlainTextResponse(f"no task {task_id}\n", status_code=404)
        return HTMLResponse(pages.task(task_id, body))

    async def task_stream(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        folder = pages.task_dir(task_id)
        if folder is None:
            return PlainTextResponse(f"no task {task_id}\n", status_code=404)
        render = lambda: pages.task_body(task_id) or ""  # noqa: E731
        probe = functools.partial(webpage.task_fingerprint, folder)
        return EventSourceResponse(_page_stream("task", probe, render), ping=PING_S)

    async def snapshot(request: Request) -> Response:
        data = await asyncio.to_thread(pages.snapshot_json)
        return Response(data, media_type="application/json")

    async def act(request: Request) -> Response:
        if not access.allow_actions:
            return JSONResponse({"error": "read-only: start with --allow-actions"}, 403)
        headers = {k.lower(): v for k, v in request.headers.items()}
        problem = csrf_problem(access, headers)
        if problem:
            return JSONResponse({"error": problem}, 403)
        task_id, verb = request.path_params["task_id"], request.path_params["verb"]
        status, answer = await asyncio.to_thread(pages.act, task_id, verb)
        return JSONResponse(answer, status)

    routes = [
        Route("/", index),
        Route("/stream", board_stream),
        Route("/task/{task_id}", task_page),
        Route("/task/{task_id}/stream", task_stream),
        Route("/api/snapshot", snapshot),
        *_spend_routes(pages),
        Route("/api/task/{task_id}/{verb}", act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(Path(webpage.__file__).parent / "static"))),
    ]
    app = Starlette(routes=routes)
    app.state.hub = hub
    return AccessMiddleware(app, access)


def _stopped(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def run(app: Any, sock: socket.socket) -> None:
    """Serve ``app`` on the listening ``sock`` with uvicorn until SIGINT or SIGTERM; returns
    (or raises ``SystemExit(0)``) so the caller's cleanup runs: uvicorn re-raises the signal
    it caught after its shutdown, which by default would end the process on the spot."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, access_log=False)
    server = uvicorn.Server(config)
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)

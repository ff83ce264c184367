"""Keeps one :class:`~supervisor.tmux.control.ControlClient` alive for a
:class:`~supervisor.tmux.client.Tmux`: connects on first use once a server runs,
reconnects with backoff after the client died, and tells subscribers."""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref

from supervisor.tmux.basics import TmuxError
from supervisor.tmux.control import (
    CONNECTED,
    DISCONNECTED,
    NOTIFICATIONS,
    RECONNECTED,
    RETRY_FIRST,
    RETRY_MAX,
    ControlClient,
    ControlEvent,
    Listener,
    control_session,
)
from supervisor.tmux.protocol import Notification

log = logging.getLogger("supervisor.tmux")
#: Every link that connected, shut down at interpreter exit: its client leaves cleanly and
#: its session is gone before the process is (a caller that forgot :meth:`shutdown`).
_LINKS: weakref.WeakSet[ControlLink] = weakref.WeakSet()


class ControlLink:
    """The control connection of one ``Tmux`` object.

    Args:
        binary: the tmux executable.
        socket_name: the server's socket (``-L``).
        owner: the owner mark (named in the control session's name).
        timeout: seconds connecting may take.
    """

    def __init__(self, binary: str, socket_name: str, owner: str, timeout: float) -> None:
        self.binary, self.socket_name, self.owner = binary, socket_name, owner
        self.timeout = timeout
        self._client: ControlClient | None = None
        self._connecting = threading.Lock()
        self._retry_at = 0.0
        self._backoff = RETRY_FIRST
        self._listeners: list[Listener] = []
        self._was_connected = False
        self._shut = False

    @property
    def live(self) -> bool:
        """Whether a control client is connected now."""
        client = self._client
        return client is not None and client.alive

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with every :class:`ControlEvent` from now on (from the
        reader thread or a calling thread: it must be quick and must not call tmux)."""
        self._listeners.append(listener)

    def client(self) -> ControlClient | None:
        """The live client, connecting one when none is and the backoff allows; ``None``
        when calls must use client processes (none connected, another thread is
        connecting, or after :meth:`shutdown`)."""
        client = self._client
        if client is not None and client.alive:
            return client
        if self._shut or time.monotonic() < self._retry_at:
            return None
        if not self._connecting.acquire(blocking=False):
            return None
        try:
            client = self._client
            if client is not None and client.alive:
                return client
            return self._connect()
        finally:
            self._connecting.release()

    def _connect(self) -> ControlClient | None:
        client = ControlClient(
            self.binary, self.socket_name, control_session(self.owner), self._note, self._ended
        )
        try:
            client.connect(self.timeout)
        except TmuxError as exc:
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, RETRY_MAX)
            log.debug("no tmux control client on %s yet: %s", self.socket_name, exc)
            return None
        if self._shut:  # shut down while connecting
            client.close("shut down", graceful=True)
            return None
        self._backoff = RETRY_FIRST
        self._client = client
        _LINKS.add(self)
        if self._was_connected:
            log.info("tmux control client on %s reconnected", self.socket_name)
        self._emit(ControlEvent(RECONNECTED if self._was_connected else CONNECTED))
        self._was_connected = True
        return client

    def _note(self, note: Notification) -> None:
        if note.name in NOTIFICATIONS:
            self._emit(ControlEvent(note.name, note.args))

    def _ended(self, client: ControlClient, why: str) -> None:
        if client is not self._client:
            return  # a connect attempt that failed: _connect logs it
        self._retry_at = time.monotonic() + self._backoff
        if not self._shut:
            log.warning(
                "tmux control client on %s ended (%s); tmux calls use client processes "
                "until it reconnects",
                self.socket_name,
                why,
            )
        self._emit(ControlEvent(DISCONNECTED, (why,)))

    def _emit(self, event: ControlEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # one broken listener must not stop the others
                log.exception("tmux control listener failed on %s", event.kind)

    def shutdown(self) -> None:
        """Close the client cleanly (its session goes with it) and connect no more."""
        self._shut = True
        client = self._client
        if client is not None:
            client.close("shut down", graceful=True)


@atexit.register
def _shut_all() -> None:
    for link in list(_LINKS):
        link.shutdown()

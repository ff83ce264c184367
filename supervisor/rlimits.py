"""Resource limits of the processes ``supervise`` starts: the tmux server's open files.

The tmux server inherits the limits of whoever started it. At ``ulimit -n 128`` with 150
sessions (each holds a pty and a pipe) tmux 3.3/3.4 spins on ``accept`` failing with EMFILE
and stops answering, and tasks show ``running`` for agents that have exited (issue 20).
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

#: The most open files the tmux server's soft limit is raised to (2**20, the kernel's
#: default ``fs.nr_open`` and systemd's default hard limit): a hard limit of 2**30 (some
#: container runtimes) passed on to every agent makes programs that close every possible
#: descriptor before exec crawl.
NOFILE_CAP = 1 << 20


def raise_nofile(pid: int) -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` of process ``pid`` (the tmux server) to its hard
    limit, at most :data:`NOFILE_CAP`; returns the soft limit it has afterwards (``None``
    when it cannot be read). A failure is one warning line, never an error.

    The limit is set from outside with prlimit(2) right after the server starts (see the
    module docstring for why), not in the client before exec: ``preexec_fn`` is unsafe in
    the threaded engine (Python's subprocess docs), and the server forks from the client.
    """
    try:
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    except OSError as exc:
        log.warning("cannot read the tmux server's open-file limit (pid %d): %s", pid, exc)
        return None
    want = NOFILE_CAP if hard == resource.RLIM_INFINITY else min(hard, NOFILE_CAP)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return int(soft)
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (want, hard))
    except OSError as exc:
        why = "with many tasks it may stop answering. Fix: raise 'ulimit -n' before 'supervise run'"
        log.warning(
            "the tmux server (pid %d) keeps an open-file limit of %d (cannot raise it "
            "to %d: %s); %s",
            pid,
            soft,
            want,
            exc,
            why,
        )
        return int(soft)
    log.info("raised the tmux server's open-file limit from %d to %d", soft, want)
    return want

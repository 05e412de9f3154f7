"""A stdio server's caller hanging up, seen even while its event loop is blocked.

A server reads its caller's hang-up (stdin's end) on its event loop. A tool doing synchronous work there (sqlite,
`subprocess.run`, a `def` tool mcp 1.x's FastMCP runs on the loop) keeps it from being read until the host's
SIGTERM, 2 s after it closed stdin, kills the process with the call unexported. While a stdio server serves on
a pipe, one thread waits for the pipe's hang-up (poll's POLLHUP, asking for no data: it reads nothing, and what the
server has yet to read stays there); once it comes, the scheduler gives the loop HANG_UP_GRACE_SECONDS to notice
by itself, then tells the telemetry, which concludes what the loop did not. The thread ends with the transport.
"""

from __future__ import annotations

import os
import select
import stat
import threading
from collections.abc import Callable

from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.scheduler import SCHEDULER

HANG_UP_GRACE_SECONDS = 0.25  # a free event loop reads the hang-up within milliseconds
THREAD_NAME = "otel_mcp_cancel hang-up watch"


def watch(fd: int, hung_up: Callable[[], None]) -> Callable[[], None] | None:
    """Watch `fd` (a pipe or a socket) until its writer hangs up, then call `hung_up` after the grace, from the
    scheduler's thread. Returns what stops the watch, or None where it cannot watch (not a pipe or socket; no
    poll)."""
    if not hasattr(select, "poll"):
        return None
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):  # a terminal or a file never hangs up
        return None
    wake_read, wake_write = os.pipe()
    stopped = threading.Event()

    def run() -> None:
        with contained("watching a stdio caller's hang-up"):
            poller = select.poll()
            poller.register(fd, 0)  # no events asked: poll still reports POLLHUP and POLLERR
            poller.register(wake_read, select.POLLIN)
            while not stopped.is_set():
                ready = dict(poller.poll())
                if wake_read in ready:
                    break
                if ready.get(fd, 0) & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    SCHEDULER.call_later(HANG_UP_GRACE_SECONDS, _unless(stopped, hung_up),
                                         "concluding a stdio server's calls as its caller hung up")
                    break
        os.close(wake_read)

    def stop() -> None:
        if not stopped.is_set():
            stopped.set()
            try:
                os.write(wake_write, b"x")
            except OSError:  # the watch already ended, at the hang-up
                pass
            os.close(wake_write)

    threading.Thread(target=run, name=THREAD_NAME, daemon=True).start()
    return stop


def _unless(stopped: threading.Event, hung_up: Callable[[], None]) -> Callable[[], None]:
    def call() -> None:
        if not stopped.is_set():  # the transport ended within the grace: the loop was free, and saw it
            hung_up()
    return call

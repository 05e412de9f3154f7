"""SIGTERM, where the process leaves it to the default action, which kills the process before any exit hook
runs, and with it the OpenTelemetry SDK's unexported spans and points. Supervisors and Kubernetes stop a
process so; uvicorn re-raises the signal after its graceful stop (in each of `--workers N`); the SDK's stdio
client terminates a server 2 s after closing its stdin. The plugin ends what this process still holds open
(its task spans), exports for at most FLUSH_SECONDS, then lets the signal kill the process as it would have:
with the endpoint down, the process dies at most FLUSH_SECONDS later than it would have. A process already
exiting (the SDK's own shutdown exporting) is given those seconds to finish instead."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.flushing import Flusher

FLUSH_SECONDS = 0.5  # well under the 1 s a process may take longer to die than it would have


class Conclusions:
    """Conclusions a SIGTERM lets finish first: of answers their callers may already hold (over stdio a request
    is concluded once its answer's line is flushed). Cut short by the signal, on the thread the signal
    interrupts, such a span would never end; the signal waits the few microseconds until the last one ends."""

    def __init__(self) -> None:
        self.running = 0
        self._deferred: Callable[[], None] | None = None

    def __enter__(self) -> None:
        self.running += 1

    def __exit__(self, *exc_info: object) -> None:
        self.running -= 1
        if self.running == 0 and self._deferred is not None:
            deferred, self._deferred = self._deferred, None
            deferred()

    def defer(self, terminate: Callable[[], None]) -> None:
        self._deferred = terminate


CONCLUDING = Conclusions()


class TerminationExport:
    def __init__(self, process_ending: Callable[[], None], flusher: Flusher) -> None:
        self._process_ending = process_ending
        self._flusher = flusher
        self._exiting = False

    def install(self) -> None:
        """Only from the main thread (the only one that may set a handler) and only over the default: a
        handler the application (or its server) set is its own, and runs instead."""
        with contained("handling SIGTERM"):
            on_main_thread = threading.current_thread() is threading.main_thread()
            if on_main_thread and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, self._terminated)

    def remove(self) -> None:
        with contained("restoring SIGTERM's default"):
            if signal.getsignal(signal.SIGTERM) == self._terminated:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def exit_started(self) -> None:
        """Told by the plugin's exit hook, which runs before the SDK's own."""
        self._exiting = True

    def _terminated(self, signum: int, frame: Any) -> None:
        signal.signal(signum, signal.SIG_DFL)
        if CONCLUDING.running:
            CONCLUDING.defer(lambda: self._terminate(signum))
            return
        self._terminate(signum)

    def _terminate(self, signum: int) -> None:
        if self._exiting:  # the providers are being shut down, and export as they are: a flush finds them shut
            with contained("ending the process after its exit's grace"):
                ending = threading.Timer(FLUSH_SECONDS, os.kill, (os.getpid(), signum))
                ending.daemon = True
                ending.start()
            return
        # In a thread of its own, waited for no longer than the bound: the signal may have interrupted this (main)
        # thread while it held a lock that ending the task spans takes.
        with contained("exporting before SIGTERM ends the process"):
            exporting = threading.Thread(target=self._export, name="otel_mcp_cancel export", daemon=True)
            exporting.start()
            exporting.join(FLUSH_SECONDS)
        signal.raise_signal(signum)

    def _export(self) -> None:
        with contained("exporting before SIGTERM ends the process"):
            self._process_ending()
            self._flusher.flush(FLUSH_SECONDS)

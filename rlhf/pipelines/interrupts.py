"""Ctrl-C and SIGTERM during a run: the first one asks the run to stop at the next step boundary (after saving a
checkpoint), a second one stops it at once: the teardown that follows gets ``STOP_AT_ONCE_S`` seconds (a wedged
worker can block Ray's calls for minutes), then the process exits 130 saying what it abandoned: the calls the driver
was waiting on (a worker that left its heartbeat unanswered first, with its pid) and the status the trackers' runs
have at that moment (KILLED once the teardown ended them; otherwise the reaper marks them FAILED); the private
cluster's reaper ends what is left. Only the main thread can install handlers; elsewhere (a launcher's worker
thread) signals keep their defaults."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

# After a second signal: the orderly teardown's share of the 5 s a user waits at most (exit and a loaded machine
# take the rest).
STOP_AT_ONCE_S = 3.0


class Interrupts:
    """``with Interrupts() as stop: ... if stop.requested: ...``."""

    def __init__(
        self,
        resume_hint: Callable[[], str] = lambda: "",
        trackers: Callable[[], str] = lambda: "",
    ) -> None:
        self.requested: str | None = None  # the signal's name once one arrived
        self._previous: dict[int, object] = {}
        self._resume_hint = resume_hint  # "the last checkpoint is ...; resume with: ..." when the run has one
        self._trackers = trackers  # what the trackers record for this run now, as they record it
        self._at_once: threading.Timer | None = None
        self.abandoned = ""  # what the driver waited on when the second signal came (rlhf.waits.waiting_on)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._at_once is not None:  # a third: no more waiting
            self._exit_now(name)
        if self.requested is not None:
            from rlhf.waits import waiting_on

            self.abandoned = waiting_on()  # before the KeyboardInterrupt unwinds the wait
            self._at_once = threading.Timer(STOP_AT_ONCE_S, self._exit_now, args=(f"second {name}",))
            self._at_once.daemon = True
            self._at_once.start()
            raise KeyboardInterrupt(f"second {name}")
        self.requested = name
        print(
            f"\n{name}: stopping after this step and saving a checkpoint (send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    def _exit_now(self, why: str) -> None:
        hint = self._resume_hint()
        if not self.abandoned:  # the signal came between two calls: what the unwinding step or teardown waits on now
            from rlhf.waits import waiting_on

            self.abandoned = waiting_on()
        stuck = f" (waiting on {self.abandoned})" if self.abandoned else ""
        trackers = self._trackers()
        print(
            f"\n{why}: stopped at once; abandoned the step under way{stuck} and the cluster's teardown (the reaper "
            f"ends its processes{'; ' + trackers if trackers else ''}){'; ' + hint if hint else ''}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(130)  # noqa: SLF001 - the documented way to leave without waiting on blocked threads

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def reinstall(self) -> None:
        """Ours again after something replaced them: Ray's driver installs a SIGTERM handler that aborts the
        process (exit status -6) when it connects."""
        if self._previous and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, self._handle)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

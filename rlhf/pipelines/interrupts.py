"""Ctrl-C and SIGTERM during a run: the first one asks the run to stop at the next step boundary (after saving a
checkpoint), a second one stops it at once. Only the main thread can install handlers; elsewhere (a launcher's
worker thread) signals keep their defaults."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType


class Interrupts:
    """``with Interrupts() as stop: ... if stop.requested: ...``."""

    def __init__(self) -> None:
        self.requested: str | None = None  # the signal's name once one arrived
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            raise KeyboardInterrupt(f"second {name}")
        self.requested = name
        print(
            f"\n{name}: stopping after this step and saving a checkpoint (send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

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

"""Peak resident memory of this process over a block of code, sampled from /proc (Linux) by a thread.

Used to show that a weight sync adds at most one bucket to a rank and nothing to the driver."""

from __future__ import annotations

import os
import threading
import time

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


class PeakRSS:
    """``with PeakRSS(enabled) as m: ...`` then ``m.delta_mb``: the peak growth over the block's starting RSS
    (None when disabled)."""

    def __init__(self, enabled: bool = True, interval_s: float = 0.001) -> None:
        self.enabled = enabled
        self.interval_s = interval_s
        self.delta_mb: float | None = None
        self._peak = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, rss_bytes())
            time.sleep(self.interval_s)

    def __enter__(self) -> PeakRSS:
        if self.enabled:
            self._start = rss_bytes()
            self._peak = self._start
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, rss_bytes())
            self.delta_mb = (self._peak - self._start) / 2**20

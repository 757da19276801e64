"""Every ceiling a test waits under, from one scale factor.

A test waits for events (a file appears, a line is printed, a process exits, a future resolves) and never for a
fixed time; what bounds such a wait is a ceiling far above what the event takes on a quiet machine, so that only a
hang reaches it. All of them are multiplied by ``RLHF_TEST_TIME_SCALE`` (default 1): a slower or busier machine, or
CI, raises that one number instead of a test's constants.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

SCALE = float(os.environ.get("RLHF_TEST_TIME_SCALE", "1") or 1)
POLL_S = 0.05  # how often a wait looks at its event (not a sleep that the result depends on)


def ceiling(seconds: float) -> float:
    """``seconds`` scaled: the bound of a wait for something that takes far less."""
    return seconds * SCALE


def wait_until(predicate: Callable[[], object], what: str, seconds: float, alive: Callable[[], bool] = lambda: True):
    """Wait for ``predicate()`` to be true, at most ``ceiling(seconds)``; AssertionError naming ``what`` when the
    ceiling passes or ``alive()`` turns false first (the process that should make it happen exited)."""
    deadline = time.monotonic() + ceiling(seconds)
    while True:
        value = predicate()
        if value:
            return value
        if not alive():
            raise AssertionError(f"{what}: did not happen before the process it waited on exited")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: did not happen within {ceiling(seconds):.0f} s (RLHF_TEST_TIME_SCALE={SCALE:g})"
            )
        time.sleep(POLL_S)  # the poll's interval: the result never depends on it

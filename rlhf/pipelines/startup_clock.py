"""Start-up phase times, printed once before the first step: where the seconds between typing the command and the
first training step went."""

from __future__ import annotations

import time

_jobs_started = 0
_job_start: float | None = None


def mark_job_start() -> None:
    """A job begins in this process (``rlhf-run``'s task function). The first job's launch phase runs from the
    process start (the command was typed); a later job of the same process (the next job of a multirun, a test's
    second run) from its own start, or it would count every job before it as its launch."""
    global _jobs_started, _job_start
    _jobs_started += 1
    if _jobs_started > 1:
        _job_start = time.time()


def process_age_s() -> float:
    """Seconds since this job's launch began: the process start for the first job (imports, composition,
    validation, the plan), the job's own start for a later one (``mark_job_start``)."""
    if _job_start is not None:
        return max(time.time() - _job_start, 0.0)
    try:
        import psutil

        return max(time.time() - psutil.Process().create_time(), 0.0)
    except Exception:  # no psutil, or /proc unreadable: the launch phase is then unknown
        return 0.0


class StartupClock:
    """Marks phases in order; ``line()`` names each with its seconds, and the total from the process start."""

    def __init__(self, executor: str = "") -> None:
        self.executor = executor  # launch.executor resolved (ray | local), named in the line
        self.launch_s = process_age_s()
        self._last = time.monotonic()
        self.phases: list[tuple[str, float]] = []

    def mark(self, phase: str) -> None:
        now = time.monotonic()
        self.phases.append((phase, now - self._last))
        self._last = now

    @property
    def total_s(self) -> float:
        return self.launch_s + sum(s for _, s in self.phases)

    def line(self) -> str:
        parts = [f"launch (imports, compose, plan, preflight) {self.launch_s:.1f} s"] if self.launch_s else []
        parts += [f"{name} {s:.1f} s" for name, s in self.phases]
        where = f" (executor: {self.executor})" if self.executor else ""
        return f"start-up {self.total_s:.1f} s to the first step{where}: " + ", ".join(parts)

    def metrics(self) -> dict[str, float]:
        out = {f"startup/{name.lower().replace(' and ', '_').replace(' ', '_')}_s": s for name, s in self.phases}
        out["startup/total_s"] = self.total_s
        return out

"""Console: one line per logged step on stderr (``step 3: train/reward=0.5, ...``), for logs read as text (a batch
job's output file) where a progress bar shows only the last state. Keeps nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rlhf.spec.schema import LoggingSpec
from rlhf.tracking.protocol import RunInfo, Status


class ConsoleTracker:
    def __init__(self) -> None:
        self._last = -1  # within this process: an in-place restart does not print a step twice

    def start(self, run: RunInfo, record: dict[str, Any] | None) -> bool:
        return False

    def record(self) -> dict[str, Any]:
        return {}

    def last_step(self) -> int:
        return self._last

    def log_params(self, params: dict[str, str]) -> None:
        """The resolved config is in the run folder (resolved_config.yaml)."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from tqdm import tqdm

        shown = ", ".join(f"{k}={v:.6g}" for k, v in sorted(metrics.items()))
        tqdm.write(f"step {step}: {shown}", file=sys.stderr)  # above a progress bar, which is redrawn below it
        self._last = max(self._last, step)

    def log_artifacts(self, paths: list[Path]) -> None:
        """Nothing to keep."""

    def location(self) -> str:
        return "stderr, one line per logged step"

    def finish(self, status: Status) -> None:
        """Nothing to close."""

    def end_stale(self, record: dict[str, Any], status: Status, reason: str) -> bool:
        """Keeps no status: what it printed is in the dead process's output."""
        return False

    def open_group(self, logging: LoggingSpec, group: str) -> None:
        """Nothing to group."""

    def close_group(self, logging: LoggingSpec, group: str, status: Status) -> None:
        """Nothing to close."""

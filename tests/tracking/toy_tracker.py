"""A tracker written outside rlhf, as a user's plug-in would be: one module implementing rlhf.tracking.protocol.Tracker
(a JSON-lines file per run under <run dir>/toy/), registered by one line in rlhf.spec.registry.TRACKERS. It holds
only what the Protocol asks; tests/tracking/test_toy_backend.py checks that nothing else is needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlhf.spec.schema import LoggingSpec
from rlhf.tracking.protocol import RunInfo, Status


class ToyTracker:
    def __init__(self) -> None:
        self.path: Path | None = None
        self.status: str = ""

    def start(self, run: RunInfo, record: dict[str, Any] | None) -> bool:
        self.path = run.run_dir / "toy" / "points.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        continued = bool(record) and record.get("path") == str(self.path) and self.path.is_file()
        if not continued:
            self.path.write_text("")
        return continued

    def record(self) -> dict[str, Any]:
        return {"path": str(self.path)}

    def _rows(self) -> list[dict[str, Any]]:
        assert self.path is not None
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def last_step(self) -> int:
        return max((r["step"] for r in self._rows() if "step" in r), default=-1)

    def _append(self, row: dict[str, Any]) -> None:
        assert self.path is not None
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def log_params(self, params: dict[str, str]) -> None:
        self._append({"params": params})

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._append({"step": step, "metrics": metrics})

    def log_artifacts(self, paths: list[Path]) -> None:
        self._append({"artifacts": [str(p) for p in paths]})

    def location(self) -> str:
        return f"toy: {self.path}"

    def finish(self, status: Status) -> None:
        if self.path is not None and not self.status:
            self.status = status
            self._append({"status": status})

    def end_stale(self, record: dict[str, Any], status: Status, reason: str) -> bool:
        return False  # keeps no status of a run another process left open

    def open_group(self, logging: LoggingSpec, group: str) -> None:
        pass

    def close_group(self, logging: LoggingSpec, group: str, status: Status) -> None:
        pass

"""Weights & Biases: one W&B run per job, project ``logging.experiment``, group ``sweep.id`` in a sweep.

``logging.wandb.mode=offline`` (the default) needs no account and sends nothing: W&B writes the run to
``<run dir>/wandb/offline-run-<time>-<id>/`` and ``wandb sync <that folder>`` uploads it later; ``online`` logs to
the account ``wandb login`` set up. A resumed job continues the same run id (each attempt is one more folder of
that id, which ``wandb sync`` merges; W&B numbers a folder ``-1``, ``-2`` when an attempt starts within the same
second as an earlier one, as the resume right after ``end_stale`` often does).

W&B's core process (wandb-core) holds what it is given in memory and writes it to the run's ``.wandb`` file when
its buffer fills, every 15 s (its default flush interval) and at finish, and it holds the last step's row back
until a higher step arrives; when the training process is killed the core shuts down without writing. So a killed
attempt loses its last seconds, and one killed in its first 15 s holds nothing at all (measured 2026-12-02, wandb
0.31: killed at once, a 7-byte file, the header only; killed 17 s after logging the config and steps 1-3, the
config and steps 1-2 on disk, the rest lost). So nothing is remembered that the files do not show: the highest
step held is read back from the run's own files (``rlhf.tracking.wandb_files``) and the lifecycle logs every step
above it again (``Tracking.rewind`` from metrics.jsonl, the rest as the resumed run redoes them): a step lost with
a killed attempt is logged again, a step already on disk never is. The same for the config: a resumed run whose
files hold none answers ``start`` with False (as a new run does), so the lifecycle logs its params again, into the
same run; the run's name travels in the record for the same reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf.spec.schema import LoggingSpec
from rlhf.tracking.protocol import RunInfo, Status

EXIT_CODES = {"FINISHED": 0, "FAILED": 1, "KILLED": 130}  # KILLED: rlhf-run's exit status after a signal


def _settings() -> Any:
    import wandb

    return wandb.Settings(
        silent=True,
        console="off",  # rlhf-run's own console (and a sweep job's console.log) stay untouched
        x_disable_stats=True,  # no system-metrics thread beside the training loop
        disable_git=True,
        save_code=False,
    )


class WandbTracker:
    def __init__(self) -> None:
        self.run: Any = None
        self.run_dir = Path()
        self.project = ""
        self.entity = ""
        self._where = ""
        self.mode = ""
        self.run_id = ""
        self.name = ""
        self._last = -1

    def start(self, run: RunInfo, record: dict[str, Any] | None) -> bool:
        import wandb

        opts = run.spec.logging.wandb
        self.run_dir = run.run_dir.resolve()
        self.project, self.entity = run.spec.logging.experiment, opts.entity
        resume = bool(record) and record.get("project") == self.project and record.get("entity") == self.entity
        run_id = str(record["id"]) if resume and record and record.get("id") else None
        params_held = False
        if run_id:
            from rlhf.tracking.wandb_files import run_files

            held = run_files(self.run_dir / "wandb", run_id)
            self._last = max((int(row["_step"]) for f in held for row in f.history if "_step" in row), default=-1)
            params_held = any(not k.startswith("_") for f in held for k in f.config)
        self.mode = opts.mode
        self.name = str(record.get("name") or "") if run_id and record else run.name  # a resumed run keeps its name
        self.run = wandb.init(
            project=self.project,
            entity=self.entity or None,
            name=self.name or None,
            group=run.group or None,
            tags=[t for t in (run.tags.get("rlhf.algorithm"), run.tags.get("rlhf.recipe")) if t],
            dir=str(self.run_dir),
            id=run_id,
            resume="allow" if run_id else None,
            mode=opts.mode,
            settings=_settings(),
        )
        self.run_id = self.run.id
        sync_dir = self.run.settings.sync_dir
        self._where = f"{sync_dir}  (wandb sync {sync_dir})" if opts.mode == "offline" else str(self.run.url)
        if opts.mode == "online" and self.run.resumed:
            self._last = max(self._last, int(self.run.starting_step) - 1)  # what the server holds
            params_held = params_held or any(not k.startswith("_") for k in self.run.config.keys())
        return run_id is not None and params_held  # False: no attempt kept the params, the lifecycle logs them

    def record(self) -> dict[str, Any]:
        return {
            "id": self.run_id, "project": self.project, "entity": self.entity, "dir": str(self.run_dir),
            "mode": self.mode, "name": self.name,
        }

    def last_step(self) -> int:
        return self._last

    def log_params(self, params: dict[str, str]) -> None:
        self.run.config.update(params, allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({k: float(v) for k, v in metrics.items()}, step=step)
        self._last = max(self._last, step)

    def log_artifacts(self, paths: list[Path]) -> None:
        import shutil

        for p in paths:
            if Path(p).is_file():  # what is in run.dir W&B keeps with the run (and uploads with it)
                shutil.copy2(p, Path(self.run.dir) / Path(p).name)

    def location(self) -> str:
        return self._where

    def finish(self, status: Status) -> None:
        if self.run is not None:
            import wandb

            self.run.finish(exit_code=EXIT_CODES[status])
            self.run = None
            wandb.teardown()  # waits until W&B's core process has written the run's files (finish alone does not)

    def end_stale(self, record: dict[str, Any], status: Status, reason: str) -> bool:
        """A killed attempt's run file has no exit record: the run is continued once more (one more attempt folder
        of the same id, which ``wandb sync`` merges) only to end it with the status's exit code."""
        run_id, folder = record.get("id"), record.get("dir")
        if not run_id or not folder:
            return False
        from rlhf.tracking.wandb_files import run_files

        attempts = run_files(Path(str(folder)) / "wandb", str(run_id))
        if not attempts or attempts[-1].exit_code is not None:
            return False
        import wandb

        run = wandb.init(
            project=record.get("project") or None,
            entity=record.get("entity") or None,
            id=str(run_id),
            resume="allow",
            dir=str(folder),
            mode=record.get("mode") or "offline",
            settings=_settings(),
        )
        run.summary["rlhf/end_reason"] = reason
        run.finish(exit_code=EXIT_CODES[status])
        wandb.teardown()
        return True

    def open_group(self, logging: LoggingSpec, group: str) -> None:
        """Nothing to make: W&B groups runs by the group name each job passes."""

    def close_group(self, logging: LoggingSpec, group: str, status: Status) -> None:
        """Nothing to close."""

"""Errors shared by the layers.

``UserError``: the user's to fix (bad config, data, reward file, endpoint): the CLI prints the message without a
traceback. ``WorkerFailure``: a remote role failed (died, hung, stalled, or raised); the run lifecycle decides
whether to restart it (rlhf.pipelines.lifecycle). ``RunInterrupted``: the run stopped on Ctrl-C or SIGTERM.
Anything else is a bug and keeps its traceback."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """An error whose message names what is wrong (key, file, row, role, URL) and the fix."""


class WorkerFailure(RuntimeError):
    """A role's process failed. ``kind``: died (the process is gone), hung (no answer in time), stalled (it left a
    heartbeat unanswered for trainer.heartbeat_timeout_s: its process no longer runs; rlhf.waits killed it), failed
    (it raised), or a role-specific kind (weight sync: checksum, probe, timeout). ``rank``: the rank or engine index
    when known."""

    restartable_kinds = ("died", "hung", "stalled", "timeout")

    def __init__(self, message: str, *, role: str, rank: int | None = None, kind: str = "failed") -> None:
        super().__init__(message)
        self.role = role
        self.rank = rank
        self.kind = kind

    @property
    def restartable(self) -> bool:
        """Whether restarting the process can help (a crash or a hang; not a bug that will raise again)."""
        return self.kind in self.restartable_kinds


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM: the run stopped at ``step`` (a checkpoint there when ``checkpoint`` is set)."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path | None, run_dir: Path) -> None:
        self.signal_name = signal_name
        self.step = step
        self.checkpoint = checkpoint
        self.run_dir = run_dir
        self.announced = False  # the one line was printed already (before a teardown that may be slow)
        self.abandoned = ""  # a second signal's: what the driver was waiting on (rlhf.waits.waiting_on)
        saved = f"checkpoint saved at {checkpoint}" if checkpoint else "no checkpoint saved"
        super().__init__(f"interrupted ({signal_name}) at step {step}; {saved}")

    def line(self) -> str:
        """The one line printed when a run stops on Ctrl-C or SIGTERM."""
        saved = f"checkpoint saved at {self.checkpoint}" if self.checkpoint else "no checkpoint saved"
        stuck = f" (abandoned waiting on {self.abandoned})" if self.abandoned else ""
        return f"interrupted at step {self.step}{stuck}; {saved}; resume with: rlhf-run --resume {self.run_dir}"

    def announce(self) -> None:
        if not self.announced:
            import sys

            print(self.line(), file=sys.stderr, flush=True)
            self.announced = True

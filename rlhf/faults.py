"""Fault injection for the tests of fault handling (never set in normal runs).

``RLHF_FAULTS`` holds comma-separated ``point[:arg]`` entries, e.g.
``RLHF_FAULTS=sync.corrupt:model.norm.weight,sync.exit_after_bucket:1``. Code at a named point asks
:func:`fault` whether it is armed and what its argument is. The variable travels to every actor the launcher
starts (:func:`env`), so a test sets it in the driver before the run.

Points in use (grep for ``fault("``):
    sync.corrupt:NAME           a weight-sync receiver flips one byte of tensor NAME after it arrived
    sync.exit_after_bucket:N    a weight-sync receiver's process exits after receiving N buckets
    sync.stop_after_bucket:N    ... or stops itself there (SIGSTOP; the broadcast route)
    engine.exit_on_generate:N   a rollout engine's process exits on its N-th generate call (1-based)
    sync.drop:N                 a weight-sync receiver's N-th sync is received and checked but reaches no weight
                                (a sync that silently delivers nothing: what the log-prob probe must catch)
    rank.exit_on_train_step:N   a training rank's process exits on its N-th optimizer step (1-based)
    rank.hang_on_train_step:N   ... or stops answering there (sleeps for an hour)
    rank.stop_on_train_step:N   ... or stops its own process there (SIGSTOP: the heartbeat goes unanswered too)
    engine.stop_on_generate:N   a rollout engine's process stops itself (SIGSTOP) on its N-th generate call
    rank.enospc_on_save:N       a training rank's N-th checkpoint save fails with ENOSPC (a full disk)
    disk.fill_before_checkpoint:N   the N-th checkpoint save fills its disk once the free-space check passed
    disk.fill_before_model:N    ... the N-th model save (save_hf) of a rank (rlhf.atomic_save.fill_disk; tmpfs only)
    rank.nan_loss_on_train_steps:A-B   a training rank's optimizer steps A to B (1-based) get a NaN loss
With ``RLHF_FAULTS_ONCE_DIR`` set, a point fires once per run, not once per process: a marker file in that folder
records it, so a restarted process does not fail again.
"""

from __future__ import annotations

import os

ENV = "RLHF_FAULTS"


def _parse(value: str) -> dict[str, str]:
    out = {}
    for part in value.split(","):
        part = part.strip()
        if part:
            name, _, arg = part.partition(":")
            out[name] = arg
    return out


def fault(point: str) -> str | None:
    """The argument of an armed fault point ("" when it takes none), or None."""
    value = os.environ.get(ENV)
    if not value:
        return None
    return _parse(value).get(point)


ONCE_DIR = "RLHF_FAULTS_ONCE_DIR"
_counts: dict[str, int] = {}


def count_hits(point: str) -> bool:
    """Count one pass through ``point``; True when its armed count ``N`` is reached (and, with a once-folder, the
    point has not fired in this run yet)."""
    arg = fault(point)
    if arg is None:
        return False
    _counts[point] = _counts.get(point, 0) + 1
    if _counts[point] != int(arg or 1):
        return False
    return first_time(point)


def in_range(point: str, n: int) -> bool:
    """Whether ``n`` lies in the armed range ``A-B`` (or equals ``A``) of ``point``."""
    arg = fault(point)
    if not arg:
        return False
    lo, _, hi = arg.partition("-")
    return int(lo) <= n <= int(hi or lo)


def first_time(point: str) -> bool:
    """True unless ``point`` already fired in this run (with a once-folder; without one, always True)."""
    folder = os.environ.get(ONCE_DIR)
    if folder:
        marker = os.path.join(folder, point)
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
    return True


def stop_self(point: str) -> None:
    """SIGSTOP this process (a wedged kernel or a swapped host look the same from outside). With a once-folder its
    pid is written to ``<point>.pid`` there first, so a test can end the process whatever happens."""
    import signal

    folder = os.environ.get(ONCE_DIR)
    if folder:
        with open(os.path.join(folder, f"{point}.pid"), "w") as f:
            f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)


def env() -> dict[str, str]:
    """The variables for an actor's environment, when the driver has them set."""
    return {k: os.environ[k] for k in (ENV, ONCE_DIR) if os.environ.get(k)}

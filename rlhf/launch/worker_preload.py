"""Imported by every Ray worker process of a private cluster when it starts, before it takes any work (Ray's
``preload_python_modules``, set by rlhf.launch.cluster).

* SIGTERM is unblocked again. rlhf.launch.cluster starts a private cluster's GCS, raylet and agents with SIGTERM
  blocked, so a SIGTERM sent to the whole process group (``timeout``, SLURM, Kubernetes, ``kill -- -PGID``) reaches
  only the driver, which stops at the next step boundary with a checkpoint as after a single SIGTERM. The raylet
  starts its workers with the mask it inherited; a worker (and whatever it starts: vLLM's engine process,
  DataLoader workers) must answer SIGTERM as usual, because libraries end their helper processes with it.
* The first ``count`` workers (Ray prestarts one per CPU as the job connects) import the modules the job's actors
  will import (torch, transformers, the model's code, DeepSpeed), while the driver builds the data; each claims a
  slot in the job's folder first and marks it ready after, so the driver places its actors only once they can take
  those idle workers (rlhf.launch.actor_env) and no more workers than it will use spend the time. Only in the
  driver's own interpreter: a worker of another venv (vLLM's, started through ``py_executable``) imports what it
  needs itself. A module that fails to import is left for the actor to import and report.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path

PRELOAD_ENV = "RLHF_WORKER_PRELOAD"  # comma-separated modules
SLOTS_ENV = "RLHF_WORKER_PRELOAD_SLOTS"  # <folder>:<count>
PYTHON_ENV = "RLHF_WORKER_PRELOAD_PYTHON"  # the interpreter whose workers preload
DEEPSPEED = "deepspeed"  # through rlhf.backends.train.deepspeed.deepspeed_import, as every engine imports it


def folder_prefix(driver_pid: int) -> str:
    """The name every slot folder of the driver ``driver_pid`` starts with (made in the temporary directory)."""
    return f"rlhf-warm-{driver_pid}-"


def remove_folders(driver_pid: int, tmp_dir: Path | None = None) -> list[Path]:
    """Remove the slot folders a gone driver left (its reaper calls this); the folders removed."""
    import shutil
    import tempfile

    found = sorted(Path(tmp_dir or tempfile.gettempdir()).glob(folder_prefix(driver_pid) + "*"))
    for folder in found:
        shutil.rmtree(folder, ignore_errors=True)
    return found


def env(modules: tuple[str, ...] = (), folder: Path | None = None, count: int = 0) -> dict[str, str]:
    """The variables for every worker: SIGTERM unblocked, and ``count`` workers of this interpreter preloading
    ``modules`` with their slots in ``folder``."""
    out = {PYTHON_ENV: sys.executable}
    if modules and folder is not None and count > 0:
        out.update({PRELOAD_ENV: ",".join(modules), SLOTS_ENV: f"{folder}:{count}"})
    return out


def _claim(folder: str, count: int) -> int | None:
    for slot in range(count):
        try:
            fd = os.open(os.path.join(folder, f"slot-{slot}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        except OSError:  # the folder is gone: the job ended
            return None
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))  # which process holds the slot (for the tests and a curious reader)
        return slot
    return None


def wait_ready(folder: Path, count: int, *, claim_s: float = 10.0, timeout_s: float = 60.0) -> int:
    """Wait until ``count`` workers preloaded (their ``ready-*`` files), at most ``timeout_s``, and at most
    ``claim_s`` while no worker has claimed a slot (a Ray that prestarts none). Returns how many are ready."""
    start = time.monotonic()
    while True:
        names = os.listdir(folder) if folder.is_dir() else []
        ready = sum(n.startswith("ready-") for n in names)
        elapsed = time.monotonic() - start
        unclaimed = elapsed > claim_s and not any(n.startswith("slot-") for n in names)
        if ready >= count or elapsed > timeout_s or unclaimed:
            return ready
        time.sleep(0.05)


def import_modules(names: Iterable[str]) -> None:
    """Import each of ``names`` (DeepSpeed through rlhf.backends.train.deepspeed.deepspeed_import); one that fails is
    left for its
    user to import again and report. Also the local executor's head start (rlhf.launch.local)."""
    import importlib

    for name in names:
        try:
            if name == DEEPSPEED:
                from rlhf.backends.train.deepspeed.deepspeed_import import import_deepspeed

                import_deepspeed()
            else:
                importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the actor imports it again and reports what fails
            continue


def preload() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if os.environ.get(PYTHON_ENV) != sys.executable:
        return
    folder, _, count = os.environ.get(SLOTS_ENV, "").rpartition(":")
    slot = _claim(folder, int(count)) if folder and count.isdigit() else None
    if slot is None:
        return
    import_modules(filter(None, os.environ.get(PRELOAD_ENV, "").split(",")))
    with contextlib.suppress(OSError):  # the folder is gone: the job ended
        Path(folder, f"ready-{slot}").touch()


if os.environ.get(PYTHON_ENV):  # a worker of a private cluster (the driver imports this module for env() only)
    preload()

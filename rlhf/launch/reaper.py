"""Ends a private Ray cluster's processes when the process that started it is gone, even after a SIGKILL (which
gives that process no chance to clean up: Ray's dashboard and runtime-env agents were seen living on for minutes,
holding ports). ``start_or_attach`` starts one reaper per process that starts a private cluster; it runs in its own
session, so a terminal's Ctrl-C does not reach it.

    python -m rlhf.launch.reaper DRIVER_PID [RUNS_FILE]

Every second it records the driver's descendants (GCS, raylet, agents, workers, helper processes); once the driver
is gone it waits a moment for a clean shutdown to finish, then terminates what is left and kills what still stays.
A recorded process is only touched if its start time matches, so a recycled pid is left alone. Then, for each run
folder RUNS_FILE lists (rlhf.launch.cluster.watch_run_dir), an attempt the driver left RUNNING is ended FAILED in
every tracker that keeps a status (rlhf.pipelines.attempt.end_if_dead; a finished or stopped one is left alone),
and the driver's warm-worker slot folders are removed (rlhf.launch.worker_preload.remove_folders).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

GRACE_S = 2.0  # a driver that exited normally is shutting Ray down itself
TERM_S = 3.0  # then SIGTERM, and SIGKILL after this long


def watch(driver_pid: int, interval_s: float = 1.0) -> int:
    import psutil

    try:
        driver = psutil.Process(driver_pid)
    except psutil.NoSuchProcess:
        return 0
    known: dict[int, float] = {}
    me = os.getpid()  # started by the driver, so one of its children: never our own target
    while driver.is_running() and driver.status() != psutil.STATUS_ZOMBIE:
        try:
            for p in driver.children(recursive=True):
                if p.pid != me:
                    known.setdefault(p.pid, p.create_time())
        except psutil.Error:
            pass
        time.sleep(interval_s)
    time.sleep(GRACE_S)
    left = []
    for pid, started in known.items():
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - started) < 0.01:
                left.append(p)
        except psutil.Error:
            continue
    for p in left:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(left, timeout=TERM_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return len(left)


def end_runs(runs_file: Path) -> list[str]:
    """End the attempts the dead driver left open in the run folders ``runs_file`` lists; the lines saying so."""
    from rlhf.pipelines.attempt import end_if_dead

    lines: list[str] = []
    try:
        folders = dict.fromkeys(runs_file.read_text().split())
    except OSError:
        return lines
    for folder in folders:
        try:
            lines += end_if_dead(Path(folder), "the reaper")
        except Exception as e:  # a store that is gone: the next rlhf-run in that folder tries again
            lines.append(f"{folder}: {type(e).__name__}: {e}")
    runs_file.unlink(missing_ok=True)
    return lines


def main() -> None:
    from rlhf.launch.worker_preload import remove_folders

    left = watch(int(sys.argv[1]))
    remove_folders(int(sys.argv[1]))  # the warm workers' slot folders, which only a clean shutdown removes
    if len(sys.argv) > 2:
        for line in end_runs(Path(sys.argv[2])):
            print(line, file=sys.stderr, flush=True)
    sys.exit(0 if left >= 0 else 1)


if __name__ == "__main__":
    main()

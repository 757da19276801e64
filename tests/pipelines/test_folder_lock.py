"""rlhf.pipelines.folder_lock: one run per folder, held by the kernel's flock for the holder's life."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from ceilings import ceiling

from rlhf.pipelines.folder_lock import LOCK_FILE, FolderInUse, check_free, hold

HOLDER = """
import sys
from rlhf.pipelines.folder_lock import hold
with hold(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes it, or kills this process
"""


def _holder(folder) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()  # blocks until the lock is taken (or the process died: "")
    assert line == "held\n", line
    return proc


def test_a_folder_another_process_holds_is_refused_naming_its_pid_and_freed_when_it_is_killed(tmp_path):
    proc = _holder(tmp_path)
    try:
        with (
            pytest.raises(FolderInUse, match=rf"{tmp_path} is in use by another run \(pid {proc.pid}\)"),
            hold(tmp_path),
        ):
            pass
        with pytest.raises(FolderInUse, match="hydra.run.dir=DIR"):
            check_free(tmp_path)
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no chance to release: the kernel drops the lock with the process
        proc.wait(timeout=ceiling(30))
    check_free(tmp_path)
    with hold(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())


def test_the_lock_is_reentrant_in_one_process_and_released_with_the_outermost_hold(tmp_path):
    with hold(tmp_path), hold(tmp_path):  # rlhf-run's job, then the run lifecycle inside it
        check_free(tmp_path)  # this process's own hold does not refuse it
    proc = _holder(tmp_path)  # released: another process takes it
    proc.stdin.close()
    assert proc.wait(timeout=ceiling(30)) == 0


def test_a_folder_that_does_not_exist_yet_is_free_and_check_free_creates_nothing(tmp_path):
    check_free(tmp_path / "new")
    assert not (tmp_path / "new").exists()

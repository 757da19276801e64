"""A disk that fills after the final save: the run's bookkeeping stays true. attempt.json reserves its bytes, so
its end (FINISHED) is written over them; the folder's lock file is taken again with no free byte. On a real tmpfs
mounted in a private user + mount namespace (as tests/pipelines/test_full_disk.py; skipped where not allowed)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ceilings import ceiling
from run_helpers import userns_tmpfs

CHECK = r"""
import errno, os, sys
from pathlib import Path
from rlhf.pipelines import attempt
from rlhf.pipelines.folder_lock import hold

disk = Path(sys.argv[1])
run = disk / "run"
with hold(run):  # a run's folder: its lock file and attempt.json written while there is space
    started = attempt.begin(run, 10, disk / "checkpoints")
fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)  # another writer fills the disk
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError as e:
    assert e.errno == errno.ENOSPC, e
os.close(fd)
probe = os.open(disk / "probe", os.O_WRONLY | os.O_CREAT)
try:
    os.write(probe, b"x")
    os.fsync(probe)
    print("disk not full")
except OSError:
    pass
os.close(probe)
os.unlink(disk / "probe")
with hold(run):  # the same folder again with no free byte (a --resume on a full disk)
    attempt.end(run, started, "FINISHED")
print("status", attempt.read(run).status)
"""



def test_the_attempts_end_is_recorded_on_a_disk_filled_after_the_final_save(tmp_path):
    if not userns_tmpfs(tmp_path):
        pytest.skip("no unprivileged user + mount namespace here to mount a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = f'mount -t tmpfs -o size=256k tmpfs "{disk}" && exec "{sys.executable}" -c "$0" "{disk}"'
    r = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", script, CHECK], capture_output=True, text=True, timeout=ceiling(120)
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "disk not full" not in r.stdout
    assert r.stdout.strip().endswith("status FINISHED"), r.stdout + r.stderr
    assert "warning" not in r.stderr and "Traceback" not in r.stderr, r.stderr

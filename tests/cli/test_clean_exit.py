"""Every run ends cleanly: a one-process job of each registered training backend, in a process of its own, leaves
no process group and none of the run's threads behind when it returns, and the process then exits 0.

Why it matters: a thread of the run still alive when the interpreter exits (a local executor's lane) may free a
tensor after Python began to finalize, and torch then aborts the process ("terminate called without an active
exception", exit 134) after the run printed ``done``: a script, a sweep or a CI job reads the run as failed. Such an
abort happens only some of the time, so the test pins its cause (what is left running), not only the exit status.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ceilings import ceiling

from rlhf.spec.registry import TRAIN_BACKENDS

# The job, then what is left of it in this process: the default process group, and the threads the run started
# (rlhf's own are named rlhf-*: the local executor's lanes, Ray's start-up thread, the trackers' opening).
_SCRIPT = """
import json, sys, threading
import rlhf
rlhf.run("sft_tiny_cpu", "trainer.backend=" + sys.argv[1], "trainer.max_steps=2", "logging.progress=false",
         "logging.mlflow=false", "launch.executor=" + sys.argv[2], run_dir=sys.argv[3])
import torch.distributed as dist
threads = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
print("LEFT " + json.dumps({"process_group": dist.is_initialized(), "threads": threads}), flush=True)
"""


def _left_after_a_run(backend: str, executor: str, run_dir: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, backend, executor, run_dir],
        capture_output=True,
        text=True,
        timeout=ceiling(600),
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    line = next((x for x in done.stdout.splitlines() if x.startswith("LEFT ")), None)
    assert line is not None, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(line[len("LEFT ") :])


@pytest.mark.slow
@pytest.mark.parametrize("backend", sorted(TRAIN_BACKENDS))
def test_a_one_process_job_leaves_no_process_group_and_no_thread_of_its_own_and_exits_0(backend, tmp_path):
    left = _left_after_a_run(backend, "local", str(tmp_path / "run"))
    assert left["process_group"] is False
    assert [t for t in left["threads"] if t.startswith("rlhf-")] == []

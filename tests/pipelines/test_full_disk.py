"""A disk that really fills, at each save point of a real run (``rlhf-run``: the local executor, DeepSpeed, the
CLI's output).

The run folder lives on a small tmpfs mounted in a private user + mount namespace (``unshare -Urm``: no root needed
where unprivileged user namespaces are allowed, as on this machine and CI's; skipped elsewhere), so the writes of
DeepSpeed, torch and safetensors meet a real ENOSPC. The fault points ``disk.fill_before_checkpoint`` and
``disk.fill_before_model`` choose the moment: once the free-space check has passed they fill that filesystem (as
another process writing to the same disk would), so that the failure comes in the middle of the write.

One session, three runs: (1) the checkpoint of step 2 meets the full disk: one line, step 1 intact, no partial
folder; (2) ``rlhf-run --resume`` continues from step 1, and now the final model meets the full disk: one line, the
step-3 checkpoint intact, no ``model/``; (3) ``--resume`` again writes ``model/``, which transformers loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling
from run_helpers import userns_tmpfs

from rlhf.run_files.checkpoint import CheckpointManager

pytestmark = pytest.mark.slow  # three runs, each one process: ~45 s on a busy 2-core machine

ARGS = [
    "+recipe=sft_tiny_cpu",
    "trainer.max_steps=3",
    "checkpoint.save_steps=1",
    "eval.steps=0",
    "logging.mlflow=false",
    "logging.progress=false",
]

# $DISK: the tmpfs; $OUT: outside it (what the test reads once the namespace, and its tmpfs, are gone).
SCRIPT = r"""
set -u
mount -t tmpfs -o size=48m tmpfs "$DISK" || exit 97
run() {  # name, then the command's arguments
    name=$1; shift
    "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; echo $? >"$OUT/$name.rc"
    cp -a "$DISK/run" "$OUT/$name.run"
    find "$DISK" -name .rlhf-fault-filler -delete  # the other writer's file goes: space for the next run
}
run first env RLHF_FAULTS=disk.fill_before_checkpoint:2 "$PY" -m rlhf.cli.run "$@" "hydra.run.dir=$DISK/run"
run second env RLHF_FAULTS=disk.fill_before_model:1 "$PY" -m rlhf.cli.run --resume "$DISK/run"
run third env -u RLHF_FAULTS "$PY" -m rlhf.cli.run --resume "$DISK/run"
"""


def _ours(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_a_full_disk_at_each_save_point_keeps_the_last_checkpoint_and_leaves_no_partial_model(tmp_path):
    if not userns_tmpfs(tmp_path):
        pytest.skip("unprivileged user namespaces are not allowed here (unshare -Urm): no private tmpfs to fill")
    disk, out, once = tmp_path / "disk", tmp_path / "out", tmp_path / "once"
    for d in (disk, out, once):
        d.mkdir()
    env = {
        "DISK": str(disk),
        "OUT": str(out),
        "PY": sys.executable,
        "RLHF_FAULTS_ONCE_DIR": str(once),
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
    }
    cmd = ["unshare", "-Urm", "bash", "-c", SCRIPT, "full-disk", *ARGS]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=ceiling(1200))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run_dir = disk / "run"  # the path as the runs saw it

    def phase(name: str) -> tuple[int, str, Path]:
        return int((out / f"{name}.rc").read_text()), (out / f"{name}.err").read_text(), out / f"{name}.run"

    # 1. the checkpoint of step 2: one line naming the folder, the sizes and the last good checkpoint
    rc, err, copy = phase("first")
    lines = _ours(err)
    assert rc == 1 and len(lines) == 1 and "Traceback" not in err, err[-4000:]
    line = lines[0]
    assert f"saving the checkpoint of step 2 into {run_dir}/checkpoints/.tmp-step00000002 failed" in line
    assert "no space left on device" in line and " written when the disk filled" not in line  # an estimate exists
    assert "it needs " in line and " margin = " in line and " free" in line
    assert f"the last good checkpoint is {run_dir}/checkpoints/step00000001" in line
    assert line.endswith(f"resume with: rlhf-run --resume {run_dir}")
    ckpts = copy / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == [".rlhf-fault-filler", "latest", "step00000001"]
    assert CheckpointManager(ckpts).latest().name == "step00000001" and not (copy / "model").exists()

    # 2. resumed from step 1 (so that checkpoint loads); the final model meets the full disk
    rc, err, copy = phase("second")
    lines = _ours(err)
    assert rc == 1 and len(lines) == 1 and "Traceback" not in err, err[-4000:]
    assert f"resumed from {run_dir}/checkpoints/step00000001 at step 1" in err
    line = lines[0]
    assert f"saving the model model/ into {run_dir}/.tmp-model failed: no space left on device" in line
    assert f"the last good checkpoint is {run_dir}/checkpoints/step00000003" in line
    assert line.endswith(f"resume with: rlhf-run --resume {run_dir}")
    assert not (copy / "model").exists() and not (copy / ".tmp-model").exists()
    assert CheckpointManager(copy / "checkpoints").latest().name == "step00000003"

    # 3. with room again, --resume writes the final model from the step-3 checkpoint
    rc, err, copy = phase("third")
    assert rc == 0, err[-4000:]
    assert f"resumed from {run_dir}/checkpoints/step00000003 at step 3" in err
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(copy / "model")
    assert model.config.vocab_size == json.loads((copy / "model" / "config.json").read_text())["vocab_size"]
    assert not list(copy.glob(".tmp-*"))

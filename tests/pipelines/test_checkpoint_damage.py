"""A damaged checkpoint is found before anything starts and the run resumes from the newest intact one, naming the
file and what is wrong with it: the checkpoints of one real tiny run (DeepSpeed's files, RNG state, driver state,
each sealed by its manifest) damaged the four ways users damage them; a checkpoint picked by hand that is damaged
is refused naming the intact one; and a run resumed past a damaged checkpoint trains on from the intact one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling
from run_helpers import TINY_RUN, without_modules

from rlhf.run_files.checkpoint import CheckpointError, CheckpointManager, step_dir_name
from rlhf.run_files.checkpoint_manifest import MANIFEST

BIN = Path(sys.executable).parent
RUN = [*TINY_RUN, "trainer.max_steps=4", "checkpoint.save_steps=2", "logging.mlflow=false"]
MODEL = "policy/ds/mp_rank_00_model_states.pt"
OPTIMIZER = "policy/ds/zero_pp_rank_0_mp_rank_00_optim_states.pt"
RNG = "policy/rng_rank0.pt"


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


DAMAGES = {
    "truncated weights": (MODEL, _truncate, "truncated"),
    "truncated RNG state": (RNG, _truncate, "truncated"),
    "missing optimizer shard": (OPTIMIZER, Path.unlink, "missing"),
    "missing driver state": ("driver_state.json", Path.unlink, "missing"),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 4-step run with checkpoints at steps 2 and 4."""
    root = tmp_path_factory.mktemp("trained")
    run_dir = root / "run"
    r = subprocess.run(
        [str(BIN / "rlhf-run"), *RUN, f"hydra.run.dir={run_dir}"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=ceiling(300),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir


def _copy(trained: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    return run_dir


def test_every_checkpoint_is_sealed_by_a_manifest_of_its_files(trained):
    for step in (2, 4):
        folder = trained / "checkpoints" / step_dir_name(step)
        assert (folder / MANIFEST).is_file()
        assert CheckpointManager(folder.parent).damage(folder) == []


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_newest_checkpoint_is_named_and_the_previous_intact_one_resumed(trained, tmp_path, damage):
    run_dir = _copy(trained, tmp_path)
    rel, hurt, what = DAMAGES[damage]
    newest = run_dir / "checkpoints" / step_dir_name(4)
    hurt(newest / rel)
    said: list[str] = []
    found = CheckpointManager(run_dir / "checkpoints").resolve_resume("auto", said.append)
    assert found == run_dir / "checkpoints" / step_dir_name(2)
    assert f"checkpoint {newest} is damaged" in said[0] and f"{rel}: {what}" in said[0], said
    assert "newest intact checkpoint (step 2)" in said[-1], said


def test_a_checkpoint_whose_bytes_changed_is_caught_by_its_checksum_and_passes_a_size_only_check(trained, tmp_path):
    run_dir = _copy(trained, tmp_path)
    newest = run_dir / "checkpoints" / step_dir_name(4)
    data = bytearray((newest / MODEL).read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
    (newest / MODEL).write_bytes(bytes(data))
    assert CheckpointManager(run_dir / "checkpoints").damage(newest) == [
        f"{MODEL}: changed (its SHA-256 differs from the manifest's)"
    ]
    assert CheckpointManager(run_dir / "checkpoints", verify="size").damage(newest) == []


def test_a_damaged_checkpoint_picked_by_hand_is_refused_naming_the_intact_one(trained, tmp_path):
    run_dir = _copy(trained, tmp_path)
    newest = run_dir / "checkpoints" / step_dir_name(4)
    (newest / OPTIMIZER).unlink()
    with pytest.raises(CheckpointError) as e:
        CheckpointManager(tmp_path / "elsewhere").resolve_resume(str(newest))
    assert f"{OPTIMIZER}: missing" in str(e.value)
    assert f"checkpoint.resume={run_dir / 'checkpoints' / step_dir_name(2)} (intact)" in str(e.value)


def test_when_every_checkpoint_is_damaged_the_resume_stops_instead_of_starting_over(trained, tmp_path):
    run_dir = _copy(trained, tmp_path)
    for step in (2, 4):
        (run_dir / "checkpoints" / step_dir_name(step) / "driver_state.json").unlink()
    with pytest.raises(CheckpointError, match="no intact checkpoint .* checkpoint.resume=never"):
        CheckpointManager(run_dir / "checkpoints").resolve_resume("auto", lambda _: None)


def test_a_resume_past_a_damaged_checkpoint_says_so_before_anything_starts_and_trains_on(trained, tmp_path):
    run_dir = _copy(trained, tmp_path)
    _truncate(run_dir / "checkpoints" / step_dir_name(4) / MODEL)
    r = subprocess.run(
        [str(BIN / "rlhf-run"), "--resume", str(run_dir), "trainer.max_steps=6"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=ceiling(300),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    damaged = next(i for i, line in enumerate(lines) if "is damaged, not resuming from it" in line)
    assert f"{MODEL}: truncated" in lines[damaged]
    first_data = next(i for i, line in enumerate(lines) if line.startswith("train prompt:"))
    assert damaged < first_data  # said before the data, the model or any process was built
    assert f"resumed from {run_dir / 'checkpoints' / step_dir_name(2)} at step 2" in r.stderr
    assert "Traceback" not in r.stderr
    assert CheckpointManager(run_dir / "checkpoints").latest() == run_dir / "checkpoints" / step_dir_name(6)


def test_a_resume_with_nothing_intact_stops_before_torch_or_ray_is_imported(trained, tmp_path):
    run_dir = _copy(trained, tmp_path)
    for step in (2, 4):
        _truncate(run_dir / "checkpoints" / step_dir_name(step) / OPTIMIZER)
    r = subprocess.run(
        [str(BIN / "rlhf-run"), "--resume", str(run_dir), "trainer.max_steps=6"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=without_modules(tmp_path, "torch", "ray", "transformers"),
        timeout=ceiling(120),
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert f"{OPTIMIZER}: truncated" in r.stderr
    assert "no intact checkpoint" in r.stderr and "checkpoint.resume=never" in r.stderr
    assert "Traceback" not in r.stderr

"""W&B's run file read back: records spanning 32 KiB blocks are joined, and a file torn by a killed process yields
the records before the tear."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("wandb")

from rlhf.tracking.wandb_files import BLOCK, raw_records, read_run_file, run_files  # noqa: E402


def _offline_run(tmp_path: Path) -> Path:
    import wandb

    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_git=True, save_code=False)
    run = wandb.init(mode="offline", project="p", dir=str(tmp_path), group="g", settings=settings)
    run.config.update({f"k{i}": "v" * 200 for i in range(400)})  # ~90 KB of config: records across blocks
    for step in range(1, 200):
        run.log({"train/loss": 1.0 / step, "eval/x": step * 0.5}, step=step)
    run.finish(exit_code=0)
    wandb.teardown()
    (path,) = run_files(tmp_path / "wandb", run.id)
    return path.path


def test_records_across_blocks_and_a_torn_tail(tmp_path):
    path = _offline_run(tmp_path)
    assert path.stat().st_size > 2 * BLOCK
    held = read_run_file(path)
    assert held.group == "g" and held.project == "p" and held.exit_code == 0
    assert held.config["k399"] == "v" * 200
    assert [row["_step"] for row in held.history] == list(range(1, 200))
    assert [row["train/loss"] for row in held.history] == [1.0 / s for s in range(1, 200)]

    whole = list(raw_records(path))
    torn = tmp_path / "torn.wandb"
    torn.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])  # cut inside some record
    kept = list(raw_records(torn))
    assert 0 < len(kept) < len(whole) and kept == whole[: len(kept)]

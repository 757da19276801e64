"""``rlhf-run --hydra-help`` prints Hydra's own help, listing the launchers and sweepers a sweep can use (the
``ray_cluster`` launcher that ships with rlhf among them), whether or not a recipe is on the command line. Hydra
composes that help from its own config alone, without rlhf's primary config, so the recipe rlhf-run adds by default
(and any other override of rlhf's groups) used to end it in a traceback: "In 'recipe/quickstart_cpu': Could not
override 'algorithm'"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

BIN = Path(sys.executable).parent


def hydra_help(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    command = [str(BIN / "rlhf-run"), "--hydra-help", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=ceiling(120))


def groups(stdout: str) -> dict[str, list[str]]:
    """The ``group: option, option`` lines of Hydra's help."""
    found = {}
    for line in stdout.splitlines():
        name, sep, options = line.partition(": ")
        if sep and name.startswith("hydra/"):
            found[name] = [o.strip() for o in options.split(",")]
    return found


@pytest.mark.parametrize(
    "args",
    [(), ("+recipe=grpo_tiny_cpu", "trainer.lr=1e-5"), ("hydra/launcher=ray_cluster", "algorithm=rloo")],
    ids=["bare", "with a recipe", "with a hydra override"],
)
def test_hydra_help_lists_our_launchers_and_sweepers(tmp_path, args):
    done = hydra_help(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Could not override" not in done.stderr
    assert done.stdout.startswith("Hydra (")
    listed = groups(done.stdout)
    assert {"basic", "ray_cluster"} <= set(listed["hydra/launcher"])
    assert "basic" in listed["hydra/sweeper"]
    assert not list(tmp_path.iterdir())  # help starts no run: no run folder, no tracker store

"""The built wheel carries conf/, recipes/ and examples/: +recipe=NAME works from an installed package."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from ceilings import ceiling

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_installed_wheel_plans_a_shipped_recipe(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=ceiling(300),
    )
    (wheel,) = tmp_path.glob("rlhf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "rlhf/_conf/config.yaml" in names and "rlhf/_recipes/grpo_llama3_8b.yaml" in names
    assert "rlhf/_examples/agents/arith_env.py" in names and "rlhf/data/builtin/arith.jsonl" in names
    assert "rlhf/models/__init__.py" in names  # a package of the wheel, not data files beside rlhf
    # rlhf's Hydra plugins, in Hydra's namespace package (which must stay without an __init__.py)
    assert "hydra_plugins/rlhf_plugins/ray_cluster_launcher.py" in names
    assert "hydra_plugins/rlhf_plugins/search_path.py" in names and "hydra_plugins/__init__.py" not in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=ceiling(300),
    )
    # The wheel's copy first, the current environment's dependencies after it (no editable finder: no .pth).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])}
    code = "import sys, rlhf; print(rlhf.__file__); from rlhf.cli.plan import main; main(sys.argv[1:])"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, "+recipe=agent_arith_tiny_cpu"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=ceiling(120),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[0].startswith(str(target))
    assert "verdict: fits" in out.stdout
    # Hydra finds the installed launcher plugin, and -cd reaches the search path from the wheel too
    conf = tmp_path / "my_conf" / "recipe"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("# @package _global_\n# mine\ndefaults:\n  - override /algorithm: rloo\n")
    code = (
        "from rlhf.spec.build import compose; import hydra_plugins.rlhf_plugins as p; print(p.__file__);"
        "c = compose(['hydra/launcher=ray_cluster', '+recipe=mine'], config_dir='my_conf', return_hydra_config=True);"
        "print(c.hydra.launcher._target_, c.algorithm.name)"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=ceiling(120)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[0].startswith(str(target))
    assert "RayClusterLauncher rloo" in out.stdout

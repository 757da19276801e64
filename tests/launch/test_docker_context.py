"""Finding 8 of issue 17 (the image): docker/Dockerfile.gpu's build context holds every file the package needs. The
context is built the way Docker would from the Dockerfile's COPY lines, in a temporary folder, and the package is
built and installed from it without Docker; the installed copy plans a GPU recipe."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from ceilings import ceiling

ROOT = Path(__file__).resolve().parents[2]


def _copy_lines(dockerfile: Path) -> list[tuple[list[str], str]]:
    out = []
    for line in dockerfile.read_text().splitlines():
        m = re.match(r"^\s*COPY\s+(?!--)(.+)$", line)
        if m:
            *sources, dest = m.group(1).split()
            out.append((sources, dest))
    return out


def _build_context(dockerfile: Path, workdir: Path) -> None:
    for sources, dest in _copy_lines(dockerfile):
        for src in sources:
            path = ROOT / src
            target = workdir / dest if not dest.endswith("/") else workdir / dest / path.name
            if dest in ("./", "."):
                target = workdir / path.name
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


@pytest.mark.slow
def test_the_gpu_image_context_builds_and_installs_the_package(tmp_path):
    dockerfile = ROOT / "docker" / "Dockerfile.gpu"
    context = tmp_path / "opt-rlhf"
    context.mkdir()
    _build_context(dockerfile, context)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
         str(context)],
        check=True, capture_output=True, timeout=ceiling(300),
    )
    (wheel,) = wheels.glob("rlhf-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("rlhf/_conf/config.yaml", "rlhf/_recipes/grpo_llama3_8b.yaml", "rlhf/_examples/agents/arith_env.py",
                   "hydra_plugins/rlhf_plugins/search_path.py", "rlhf/data/builtin/arith.jsonl"):
        assert needed in names, needed
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "rlhf-plan" in entry and "rlhf-run" in entry
    # the image installs ".[vllm]": that extra exists
    assert '".[vllm]"' in dockerfile.read_text()
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True, capture_output=True, timeout=ceiling(300),
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])}
    code = "import sys, rlhf; print(rlhf.__file__); from rlhf.cli.plan import main; main(sys.argv[1:])"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, "+recipe=grpo_qwen2_5_0_5b_h200"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=ceiling(120),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert str(target) in out.stdout and "verdict: fits" in out.stdout

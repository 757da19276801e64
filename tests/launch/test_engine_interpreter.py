"""Finding 1 of issue 17 (no vLLM interpreter on a GPU install): the engine's interpreter is this one whenever vllm
imports here, $RLHF_VLLM_PYTHON overrides, .venv-vllm is the CPU set-up's; none of them is an error naming all
three."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlhf.backends.rollout.vllm import interpreter as paths
from rlhf.backends.rollout.vllm.descriptor import find_vllm_python, vllm_runtime_env


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A ``vllm`` package importable in this interpreter (what every GPU install has)."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("__version__ = '0.32.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(paths.VLLM_PYTHON_ENV, raising=False)


def test_a_gpu_install_runs_the_engine_with_this_interpreter(fake_vllm):
    assert find_vllm_python() == Path(sys.executable).absolute()
    assert vllm_runtime_env(cpu_threads=None)["py_executable"] == str(Path(sys.executable).absolute())


def test_the_environment_variable_overrides_this_interpreter(fake_vllm, tmp_path, monkeypatch):
    other = tmp_path / "venv" / "bin" / "python"
    other.parent.mkdir(parents=True)
    other.symlink_to(sys.executable)
    monkeypatch.setenv(paths.VLLM_PYTHON_ENV, str(other))
    assert find_vllm_python() == other.absolute()


def test_without_any_vllm_the_error_names_all_three_ways(tmp_path, monkeypatch):
    monkeypatch.delenv(paths.VLLM_PYTHON_ENV, raising=False)
    monkeypatch.setattr(paths, "vllm_importable_here", lambda: False)
    monkeypatch.setattr(paths, "source_root", lambda: tmp_path)  # a checkout without .venv-vllm
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        find_vllm_python()
    msg = str(err.value)
    assert 'pip install -e ".[vllm]"' in msg and paths.VLLM_PYTHON_ENV in msg and "setup_vllm_cpu.sh" in msg


def test_preflight_names_a_missing_engine_interpreter_before_anything_starts(tmp_path, monkeypatch):
    from rlhf.planning.preflight.engine import check_rollout_engine
    from rlhf.spec.build import load_spec

    monkeypatch.delenv(paths.VLLM_PYTHON_ENV, raising=False)
    monkeypatch.setattr(paths, "vllm_importable_here", lambda: False)
    monkeypatch.setattr(paths, "source_root", lambda: tmp_path)
    monkeypatch.chdir(tmp_path)
    (finding,) = check_rollout_engine(load_spec(["+recipe=grpo_llama3_8b"]))
    assert finding.key == "rollout.backend" and 'pip install -e ".[vllm]"' in finding.problem

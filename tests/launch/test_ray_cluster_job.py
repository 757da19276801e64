"""The body of a hydra/launcher=ray_cluster job (what each job's Ray task runs), here in this process with a real
Hydra config and no Ray: a failed job comes back with its failure as text beside its JobReturn, which hands the
failure out as a JobFailed through Hydra's public getter; a completed job returns what its task returned."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.singleton import Singleton
from hydra.core.utils import JobStatus
from hydra.types import HydraContext
from omegaconf import DictConfig, open_dict

from hydra_plugins.rlhf_plugins._ray_cluster import _run_job_here
from rlhf.launch.reservation import RESERVED_ENV
from rlhf.launch.sweep import JobFailed


class _NoCallbacks:
    def on_job_start(self, **_: Any) -> None: ...

    def on_job_end(self, **_: Any) -> None: ...


@pytest.fixture
def run_job_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(RESERVED_ENV, "")  # the job body sets it; restored after the test
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text("x: 1\n")
    overrides = [f"hydra.sweep.dir={tmp_path / 'sweep'}", "hydra.sweep.subdir=0", "hydra/job_logging=none"]
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.job.num = 0
            cfg.hydra.job.id = "job_0"
        context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=_NoCallbacks())

        def run(task: Any) -> Any:
            return _run_job_here(context, task, cfg, Singleton.get_state(), os.getcwd(), "test", [])

        yield run


def test_a_failed_jobs_error_comes_back_as_text_and_as_a_job_failed(run_job_here):
    def task(cfg: DictConfig) -> float:
        raise ValueError(f"no model at x={cfg.x}")

    ret, error = run_job_here(task)
    assert ret.status == JobStatus.FAILED
    assert error.startswith("job 0: ValueError: no model at x=1") and "Traceback" in error
    with pytest.raises(JobFailed, match="no model at x=1"):
        ret.return_value  # noqa: B018 - Hydra's getter raises a failed job's error


def test_a_completed_job_returns_its_tasks_value_and_no_error(run_job_here):
    ret, error = run_job_here(lambda cfg: cfg.x + 0.5)
    assert (ret.status, ret.return_value, error) == (JobStatus.COMPLETED, 1.5, None)

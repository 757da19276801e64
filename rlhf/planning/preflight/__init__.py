"""Preflight: every static mistake caught before the cluster starts, all reported at once.

    report = preflight(spec)           # PreflightReport: errors and warnings, what was checked, seconds
    require_preflight(spec)            # the same, raising PreflightFailed (a UserError) when there is an error

``rlhf-run`` calls it after validating the spec and before starting anything; ``rlhf-plan --check`` prints it. It
imports neither Ray nor torch and runs none of the user's code. What it checks:

* ``reward.function``: compiled and searched for ``reward_func`` (parsed, not imported: see python_files);
* ``agent.path``: what the ``agent.executor`` loads (AgentInstance / AgentExecutor / run_agent), the same way;
* ``reward.urls``: each endpoint probed, a dead one fails in about a second, a slow one warns (see urls);
* ``data.train_files`` / ``data.eval_files``: local JSON Lines, JSON, CSV and parquet files read far enough to
  name an empty file, a malformed line or a missing column (see data_files);
* ``reward.model_path``: a folder without trained value-head weights, e.g. a policy (see models);
* ``rollout.backend``: what the rollout backend needs to start its engines (vllm: the engine's interpreter -- this
  one when vllm imports here, $RLHF_VLLM_PYTHON, or .venv-vllm -- and a vLLM in the supported range; see engine);
* hub datasets named without the config they need (``openai/gsm8k`` instead of ``openai/gsm8k:main``; see
  hub_datasets: the only check that asks the network, a warning when it cannot).
* ``ray.address``: a host:port to attach to answers (see ray_address);
* ``checkpoint.init_from``: a folder holding a run, a checkpoint or a Hugging Face model that fits model.* and the
  pipeline (rlhf.run_files.init_source, which reads the checkpoint layout and config files only).
"""

from __future__ import annotations

import time

from rlhf.planning.preflight.data_files import check_data_files
from rlhf.planning.preflight.engine import check_rollout_engine
from rlhf.planning.preflight.findings import Finding, PreflightFailed, PreflightReport
from rlhf.planning.preflight.hub_datasets import check_hub_configs, hub_sources
from rlhf.planning.preflight.models import check_reward_model
from rlhf.planning.preflight.python_files import FileFinding, check_agent_file, check_reward_functions
from rlhf.planning.preflight.ray_address import check_ray_address
from rlhf.planning.preflight.urls import probe_urls
from rlhf.spec.schema import ExperimentSpec

__all__ = ["Finding", "PreflightFailed", "PreflightReport", "preflight", "require_preflight"]


def _from_file(key: str, path: str, found: list[FileFinding]) -> list[Finding]:
    return [Finding(key, path, f.problem, f.fix, f.warning) for f in found]


def _check_urls(spec: ExperimentSpec, report: PreflightReport) -> None:
    for i, probe in enumerate(probe_urls(list(spec.reward.urls))):
        key = f"reward.urls[{i}]"
        report.checked.append(f"{key} ({probe.seconds:.2f} s)")
        if probe.problem:
            problem = f"{probe.problem} (after {probe.seconds:.2f} s)"
            report.findings.append(Finding(key, probe.url, problem, probe.fix))
        elif probe.warning:
            report.findings.append(Finding(key, probe.url, probe.warning, warning=True))


def preflight(spec: ExperimentSpec) -> PreflightReport:
    """Every problem the preflight can find in ``spec`` (a validated spec: paths exist), none stopping the others."""
    start = time.monotonic()
    report = PreflightReport()
    if spec.reward.function:
        found, seen = check_reward_functions(spec.reward.function, spec.reward.contract)
        report.findings += _from_file("reward.function", spec.reward.function, found)
        report.checked.append("reward.function" + (f" ({', '.join(seen)})" if seen else ""))
    if spec.agent.path and spec.agent.executor != "single_turn":
        found = check_agent_file(spec.agent.path, spec.agent.executor)
        report.findings += _from_file("agent.path", spec.agent.path, found)
        report.checked.append("agent.path")
    if spec.reward.urls:
        _check_urls(spec, report)
    data = check_data_files(spec)
    report.findings += data
    report.checked.append("data files")
    if spec.algorithm.family == "rl":
        report.findings += check_rollout_engine(spec)
        report.checked.append(f"rollout engine ({spec.rollout.backend})")
    if hub_sources(spec):
        found, unasked = check_hub_configs(spec)
        report.findings += found
        note = f" (hub unreachable here, not asked: {', '.join(unasked)})" if unasked else ""
        report.checked.append("hub dataset configs" + note)
    if spec.reward.model_path:
        report.findings += check_reward_model(spec)
        report.checked.append("reward.model_path")
    if spec.ray.address:
        report.findings += check_ray_address(spec.ray.address)
        report.checked.append("ray.address")
    if spec.checkpoint.init_from:
        from rlhf.run_files.init_source import check as check_init_from

        report.findings += [Finding(p.key, p.value, p.problem, p.fix) for p in check_init_from(spec)]
        report.checked.append("checkpoint.init_from")
    report.seconds = time.monotonic() - start
    return report


def require_preflight(spec: ExperimentSpec) -> PreflightReport:
    """:func:`preflight`, raising :class:`PreflightFailed` (every problem, warnings too) when anything is wrong."""
    report = preflight(spec)
    if report.errors:
        raise PreflightFailed(report)
    return report

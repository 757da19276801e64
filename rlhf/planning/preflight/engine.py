"""The rollout engines' own start-up conditions, before the cluster starts: what the backend of ``rollout.backend``
says would stop them (rlhf.backends.contract.rollout.RolloutBackend.preflight; vLLM: its interpreter and a supported
version), named here instead of failing as the engines start (issue 17, finding 1)."""

from __future__ import annotations

from rlhf.planning.preflight.findings import Finding
from rlhf.spec.schema import ExperimentSpec


def check_rollout_engine(spec: ExperimentSpec) -> list[Finding]:
    """The rollout backend's preflight, for a run with engines; other backends' keys that were changed, as
    warnings (the run ignores them)."""
    from rlhf.spec.derive import derive
    from rlhf.spec.registry import rollout_backend
    from rlhf.spec.rollout_backend_rules import ignored_keys

    if "rollout" not in derive(spec).roles:
        return []
    backend = spec.rollout.backend
    out = [Finding("rollout.backend", backend, problem) for problem in rollout_backend(backend).preflight(spec)]
    for key, value, fix in ignored_keys(spec):
        out.append(Finding(key, value, f"ignored: {fix}", warning=True))
    return out

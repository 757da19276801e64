"""A rollout backend written outside rlhf, as a user's plug-in would be (``rollout.backend=toy``): one folder
(toy_rollout/: this descriptor, its engine object engine.py and the actor hosting it, actor.py, and its own keys
``rollout.toy.*``, config.py), its conf file (conf/rollout/toy.yaml) and its registry line (toy_registry.py, declared
as an entry point). Its engine computes as the hf engine does, so its memory and rules are the hf backend's; the rest
of rlhf.backends.contract.rollout.RolloutBackend is RolloutBackendBase's defaults. Its launch puts the folder's parent
on the engine process's import path: the environment a backend's engine needs is the backend's to say
(RolloutBackend.launch). No torch at import, as the contract asks."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from rlhf.backends.contract.rollout import EngineLaunch, EnginePlacement, RolloutBackendBase, RolloutMemory
from rlhf.backends.rollout.hf.descriptor import BACKEND as HF
from rlhf.spec.schema import ExperimentSpec

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder holding toy_rollout/


class ToyRolloutBackend(RolloutBackendBase):
    name = "toy"

    def describe(self, spec: ExperimentSpec) -> str:
        return f"toy (a plug-in over {HF.describe(spec)}), {spec.rollout.toy.max_batch} sequences per generate call"

    def memory(self, spec: ExperimentSpec, params: int) -> RolloutMemory:
        return HF.memory(spec, params)  # the hf engine's model and KV cache

    def launch(
        self,
        spec: ExperimentSpec,
        placement: EnginePlacement,
        model_path: str,
        *,
        role_env: dict[str, str] | None,
        base_env: dict[str, str],
    ) -> EngineLaunch:
        hf = HF.launch(spec, placement, model_path, role_env=role_env, base_env=base_env)
        env: dict[str, Any] = dict(hf.runtime_env.get("env_vars", {}))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH", "")) if p)
        kwargs = {**hf.kwargs, "max_batch": spec.rollout.toy.max_batch}  # its own key, rollout.toy.max_batch
        return replace(
            hf,
            actor="toy_rollout.actor:ToyRolloutWorker",
            kwargs=kwargs,
            runtime_env={**hf.runtime_env, "env_vars": env},
        )

    def generation_batch(self, spec: ExperimentSpec, sequences: int, kv_tokens: float | None, seq: float) -> int:
        return min(sequences, spec.rollout.toy.max_batch)  # what its engine generates at once (engine.py)

    def label(self, spec: ExperimentSpec) -> str:
        return " toy"

    def problems(self, spec: ExperimentSpec, d: Any) -> list[tuple[str, Any, str]]:
        return HF.problems(spec, d)  # the hf engine's rules: one device per engine


BACKEND = ToyRolloutBackend()

"""The reward model folder (``reward.model_path``) must hold a trained value head: a policy folder would load with a
random head and train the policy on noise. Read from the safetensors headers (rlhf.models.head_check), so it costs
milliseconds; a folder with only ``.bin`` weights or a hub name is not checked here."""

from __future__ import annotations

from pathlib import Path

from rlhf.models.head_check import missing_value_head
from rlhf.planning.preflight.findings import Finding
from rlhf.spec.schema import ExperimentSpec

FIX = (
    "point reward.model_path at a trained reward model (train one with algorithm=rm), or set "
    "reward.value_head_prefix to the name its head is stored under"
)


def check_reward_model(spec: ExperimentSpec) -> list[Finding]:
    path = spec.reward.model_path
    if spec.algorithm.family != "rl" or not path or not Path(path).expanduser().is_dir():
        return []
    untrained = missing_value_head(Path(path).expanduser(), spec.reward.value_head_prefix)
    if untrained is None:
        return []
    return [Finding("reward.model_path", path, untrained.problem, FIX)]

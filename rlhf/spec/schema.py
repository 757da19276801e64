"""The typed experiment spec: one frozen dataclass per config section, assembled here into ExperimentSpec.

These dataclasses are the schema Hydra validates every YAML against (registered in the ConfigStore by
``rlhf.spec.store``), so a misspelt key or a wrong type fails at compose time with its full key. Each field is
declared with :func:`rlhf.spec.keys.key`: its default, its one-line documentation and its domain (allowed range or
values), which validation checks and ``rlhf-recipes explain KEY`` prints. ``rlhf-recipes show NAME`` prints a
recipe's resolved values.

Batch vocabulary (units in the names, everything else derived by ``rlhf.spec.derive``):
    rollout.prompts_per_step      prompts drawn per RL step
    rollout.samples_per_prompt    completions per prompt (group size)
    trainer.global_batch          samples per optimizer step, across all data-parallel ranks
    trainer.micro_batch_per_device samples per forward/backward on one device (on one sequence-parallel group)
Gradient accumulation = global_batch / (micro_batch_per_device * data-parallel size); never typed. The data-parallel
size is a role's ranks / trainer.sequence_parallel_size (its mesh, rlhf.spec.mesh, as the training backend lays it
out).
The sections are declared in rlhf.spec.sections, one module per group (this module exports every class, so
``from rlhf.spec.schema import TrainerSpec`` is the one way to name them). A backend's own keys are declared in its
folder and named by its registry line; ``trainer`` and ``rollout`` get one sub-section per such backend
(rlhf.spec.sections.backends), so adding one edits nothing here.

Imports nothing heavy: composing, validating and planning run without torch, ray or deepspeed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlhf.spec.keys import key
from rlhf.spec.sections.algorithm import (
    AdvantageSpec,
    AlgorithmSpec,
    FilterSpec,
    ISCorrectionSpec,
    KLSpec,
    PolicyLossSpec,
    PreferenceSpec,
    RejectionSpec,
    RMLossSpec,
)
from rlhf.spec.sections.data import DataSpec
from rlhf.spec.sections.hardware import HardwareSpec
from rlhf.spec.sections.launch import LaunchSpec, RaySpec, SweepSpec
from rlhf.spec.sections.model import LoraSpec, ModelSpec
from rlhf.spec.sections.placement import PlacementSpec, RoleDevices
from rlhf.spec.sections.roles import (
    REWARD_AGGREGATIONS,
    REWARD_CONTRACTS,
    CriticSpec,
    ReferenceSpec,
    RewardSpec,
    TeacherSpec,
)
from rlhf.spec.sections.rollout import RolloutSpec
from rlhf.spec.sections.run import AgentSpec, CheckpointSpec, EvalSpec, SFTWarmupSpec
from rlhf.spec.sections.tracking import LoggingSpec, TensorBoardSpec, WandbSpec
from rlhf.spec.sections.trainer import TrainerSpec

ROLES = ("policy", "reference", "teacher", "critic", "reward", "rollout")

__all__ = [
    "REWARD_AGGREGATIONS",
    "REWARD_CONTRACTS",
    "ROLES",
    "AdvantageSpec",
    "AgentSpec",
    "AlgorithmSpec",
    "CheckpointSpec",
    "CriticSpec",
    "DataSpec",
    "EvalSpec",
    "ExperimentSpec",
    "FilterSpec",
    "HardwareSpec",
    "ISCorrectionSpec",
    "RejectionSpec",
    "KLSpec",
    "LaunchSpec",
    "LoggingSpec",
    "LoraSpec",
    "ModelSpec",
    "PlacementSpec",
    "PolicyLossSpec",
    "PreferenceSpec",
    "RMLossSpec",
    "RaySpec",
    "ReferenceSpec",
    "RewardSpec",
    "RoleDevices",
    "RolloutSpec",
    "SFTWarmupSpec",
    "SweepSpec",
    "TeacherSpec",
    "TensorBoardSpec",
    "TrainerSpec",
    "WandbSpec",
]


@dataclass(frozen=True)
class ExperimentSpec:
    """The whole experiment. ``rlhf-run key=value`` overrides any field by its dotted path."""

    recipe: str = key("", "set by +recipe=NAME (informational)")
    seed: int = key(42, "seed of data order, sampling and initialisation", ge=0)
    algorithm: AlgorithmSpec = field(default_factory=AlgorithmSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    placement: PlacementSpec = field(default_factory=PlacementSpec)
    rollout: RolloutSpec = field(default_factory=RolloutSpec)
    hardware: HardwareSpec = field(default_factory=HardwareSpec)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    data: DataSpec = field(default_factory=DataSpec)
    reward: RewardSpec = field(default_factory=RewardSpec)
    critic: CriticSpec = field(default_factory=CriticSpec)
    reference: ReferenceSpec = field(default_factory=ReferenceSpec)
    teacher: TeacherSpec = field(default_factory=TeacherSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    logging: LoggingSpec = field(default_factory=LoggingSpec)
    agent: AgentSpec = field(default_factory=AgentSpec)
    sft_warmup: SFTWarmupSpec = field(default_factory=SFTWarmupSpec)
    launch: LaunchSpec = field(default_factory=LaunchSpec)
    ray: RaySpec = field(default_factory=RaySpec)
    sweep: SweepSpec = field(default_factory=SweepSpec)

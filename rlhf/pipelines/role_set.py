"""The training-side roles as Ray actor groups, built once for every pipeline (SFT, RM, DPO and RL) from the
plan's roles: the plan (rlhf.launch) decides which roles run and where, and whether a frozen model shares a trained
role's processes; this module only starts the actors it was given bundles for and loads their models.

policy      TrainerWorker ranks with the trained model (the reference and the teacher fused into the same
            processes when the plan colocates them with equal ranks)
reference   frozen causal LM (own group unless fused)
teacher     frozen causal LM of on-policy distillation (own group unless fused)
critic      TrainerWorker ranks with the trained value model (gae only); the reward model fused in when colocated
reward      frozen reward model (only when the reward comes from a model)

The groups are created in that order, which is also the order the launcher ends them in (Realized.kill_actors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlhf.spec.derive import role_mesh
from rlhf.spec.schema import ExperimentSpec


@dataclass
class RoleSet:
    """The roles' actor groups as the plan places them; None for a role that does not run. A fused role is None
    until :func:`load_models` has loaded it, then the group whose processes hold it (``reference is policy``)."""

    policy: Any
    reference: Any = None
    teacher: Any = None
    critic: Any = None
    reward: Any = None
    fuse_ref: bool = False
    fuse_teacher: bool = False
    fuse_rm: bool = False

    def groups(self) -> dict[str, Any]:
        """Each group once, by the role it was created for (fused roles are not groups of their own)."""
        out = {"policy": self.policy, "reference": self.reference, "teacher": self.teacher}
        out.update({"critic": self.critic, "reward": self.reward})
        fused = {"reference": self.fuse_ref, "teacher": self.fuse_teacher, "reward": self.fuse_rm}
        return {k: v for k, v in out.items() if v is not None and not fused.get(k, False)}

    def trained_groups(self) -> dict[str, Any]:
        """The groups with optimizer state (what a checkpoint saves)."""
        return {k: v for k, v in (("policy", self.policy), ("critic", self.critic)) if v is not None}


def start_role_actors(spec: ExperimentSpec, realized: Any, env: dict[str, str] | None) -> RoleSet:
    """Create every training-side role's actors in its bundles (nothing loaded yet: constructing a worker touches
    no device). Every pipeline and ``rlhf-plan --rehearse`` start them here."""
    from rlhf.spec.rollout_backend_rules import generates_in_policy
    from rlhf.workers import ModelWorker, TrainerWorker

    roles = set(realized.plan.roles)
    fuse_ref = "reference" in roles and realized.can_fuse("policy", "reference")
    fuse_teacher = "teacher" in roles and realized.can_fuse("policy", "teacher")
    fused = ("reference",) * fuse_ref + ("teacher",) * fuse_teacher  # frozen models in the policy's processes
    if "rollout" in roles and "policy" in roles and generates_in_policy(spec):
        fused += ("rollout",)  # rollout.hf.in_policy: the policy's ranks generate, with the rollout's share too
    out = RoleSet(realized.create_group("policy", TrainerWorker, spec, "policy", fused=fused, env=env))
    out.fuse_ref, out.fuse_teacher = fuse_ref, fuse_teacher
    if "reference" in roles and not fuse_ref:
        out.reference = realized.create_group("reference", ModelWorker, spec, "reference", env=env)
    if "teacher" in roles and not fuse_teacher:
        out.teacher = realized.create_group("teacher", ModelWorker, spec, "teacher", env=env)
    out.fuse_rm = "critic" in roles and "reward" in roles and realized.can_fuse("critic", "reward")
    if "critic" in roles:
        out.critic = realized.create_group(
            "critic", TrainerWorker, spec, "critic", fused=("reward",) if out.fuse_rm else (), env=env
        )
    if "reward" in roles and not out.fuse_rm:
        out.reward = realized.create_group("reward", ModelWorker, spec, "reward", env=env)
    for group in out.groups().values():
        with_mesh(group, spec)
    return out


def with_mesh(group: Any, spec: ExperimentSpec) -> Any:
    """``group`` (a model role's actor group) told how its ranks split the work, as the training backend lays them
    out (rlhf.spec.derive.role_mesh: data x sequence), so its calls hand each sequence-parallel group the same
    micro-batches (rlhf.launch.role_calls.RoleCalls.run_per_rank). Every model role's group is made through here."""
    group.use_mesh(role_mesh(spec, len(group)))
    return group


@dataclass(frozen=True)
class RoleModels:
    """What each role's processes load (the paths the pipeline resolved: RL's policy path, the checked teacher)."""

    total_steps: int  # the trained models' schedules
    policy_kind: str = "causal_lm"  # causal_lm | reward (RM training)
    init_value_head: bool = False  # the policy's value head starts fresh (RM training from a causal LM)
    policy_path: str | None = None  # None: the model the spec names (what the workers load by default)
    reference_path: str | None = None
    teacher_path: str = ""
    # How failure messages name the wait on the loads: None, each call's own method (init_trained, init_frozen);
    # the RL pipeline has always said "init" for all of them.
    what: str | None = None


def load_models(
    roles: RoleSet, spec: ExperimentSpec, models: RoleModels, while_loading: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Build every role's model: all groups start loading before any is waited on (they initialise in parallel),
    ``while_loading()`` runs in between (the RL pipeline starts its rollout engines there), then the frozen models
    fused into a trained role's processes load in those processes. Returns the policy rank 0's init report."""
    pending = [
        (
            roles.policy,
            "init_trained",
            roles.policy.async_run_all(
                "init_trained",
                kind=models.policy_kind,
                total_steps=models.total_steps,
                init_value_head=models.init_value_head,
            ),
        )
    ]
    ref_path = spec.reference.model_path or models.policy_path
    if roles.reference is not None:
        refs = roles.reference.async_run_all(
            "init_frozen", "reference", model_path=ref_path, offload=spec.reference.offload
        )
        pending.append((roles.reference, "init_frozen", refs))
    if roles.teacher is not None:
        refs = roles.teacher.async_run_all(
            "init_frozen", "teacher", model_path=models.teacher_path, offload=spec.teacher.offload
        )
        pending.append((roles.teacher, "init_frozen", refs))
    rm_path = spec.reward.model_path or None
    if roles.critic is not None:
        critic_path = spec.critic.model_path or rm_path or models.policy_path
        refs = roles.critic.async_run_all(
            "init_trained",
            kind="critic",
            model_path=critic_path,
            lr=spec.trainer.critic_lr,
            total_steps=models.total_steps,
            init_value_head=critic_path == models.policy_path,
        )
        pending.append((roles.critic, "init_trained", refs))
    if roles.reward is not None:
        refs = roles.reward.async_run_all(
            "init_frozen", "reward", kind="reward", model_path=rm_path, normalize_reward=spec.reward.normalize
        )
        pending.append((roles.reward, "init_frozen", refs))
    if while_loading is not None:
        while_loading()
    info: dict[str, Any] = {}
    for group, method, refs in pending:
        infos = group.get(refs, models.what or method, startup=True)
        if infos and isinstance(infos[0], dict) and "pid" in infos[0]:
            group.record_pids([i["pid"] for i in infos])  # failure messages then name each rank's log
        if group is roles.policy:
            info = infos[0]
    if roles.fuse_ref:
        roles.policy.start_all("init_frozen", "reference", model_path=ref_path, offload=spec.reference.offload)
        roles.reference = roles.policy
    if roles.fuse_teacher:
        roles.policy.start_all("init_frozen", "teacher", model_path=models.teacher_path, offload=spec.teacher.offload)
        roles.teacher = roles.policy
    if roles.fuse_rm:
        roles.critic.start_all(
            "init_frozen", "reward", kind="reward", model_path=rm_path, normalize_reward=spec.reward.normalize
        )
        roles.reward = roles.critic
    return info


def build_roles(
    spec: ExperimentSpec,
    realized: Any,
    models: RoleModels,
    env: dict[str, str] | None = None,
    while_loading: Callable[[], None] | None = None,
) -> RoleSet:
    """The plan's training-side roles, started and loaded (:func:`start_role_actors` then :func:`load_models`)."""
    roles = start_role_actors(spec, realized, env)
    load_models(roles, spec, models, while_loading)
    return roles

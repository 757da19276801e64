"""TRL's fields -> our config keys, with what became of every setting.

The semantics are carried, not the names: a field the input leaves out means TRL 1.16's default (.vocab), which
is carried where ours differs (GRPO's beta 0 and loss_type dapo, its learning rate, AdamW betas (0.9, 0.999), no
warm-up, gradient checkpointing on).

Batch vocabulary (TRL counts completions, we count samples per optimizer step, the same thing for RL):
    per_device_train_batch_size x devices x gradient_accumulation_steps      -> trainer.global_batch
    per_device_train_batch_size                                               -> trainer.micro_batch_per_device
    per_device_train_batch_size x devices x steps_per_generation / num_generations -> rollout.prompts_per_step
    num_generations -> rollout.samples_per_prompt; num_iterations -> trainer.epochs_per_rollout
so optimizer steps per generation = steps_per_generation / gradient_accumulation_steps x num_iterations, as TRL's
GRPOTrainer steps through its generation buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlhf.importers.conf_options import options
from rlhf.importers.outcomes import Outcome, OutcomeBook
from rlhf.importers.trl import vocab
from rlhf.importers.trl.command import Command

UNSUPPORTED, NOT_NEEDED = vocab.UNSUPPORTED, vocab.NOT_NEEDED
_MODEL_KEY = "model_name_or_path"


@dataclass
class Mapping:
    trainer: str
    values: dict[str, Any]
    carried: dict[str, str]  # our key -> the TRL fields whose defaults it carries
    outcomes: list[Outcome]
    notes: list[str]
    model_path: str
    groups: list[tuple[list[str], int]]
    nodes: int
    devices_per_node: int
    unknown: dict[str, tuple] = field(default_factory=dict)
    rollout_backend: str = "vllm"
    differs: dict[str, str] = field(default_factory=dict)  # TRL field -> how our math differs

    @property
    def family(self) -> str:
        return vocab.FAMILY[self.trainer]


class _Mapper(OutcomeBook):
    def __init__(self, cmd: Command, hardware: str | None) -> None:
        self.cmd = cmd
        self.trainer = cmd.trainer
        self.rl = vocab.FAMILY[cmd.trainer] == "rl"
        self.defaults = vocab.DEFAULTS[cmd.trainer]
        self.hardware = hardware
        self.outcomes = [Outcome() for _ in cmd.settings]
        self.by: dict[str, int] = {}
        self.setting: dict[str, Any] = {}
        for i, s in enumerate(cmd.settings):
            if s.key in self.by:
                self.outcomes[self.by[s.key]].overridden_by = s.text
            self.by[s.key] = i
            self.setting[s.key] = s.value
        self.values: dict[str, Any] = {}
        self.carried: dict[str, str] = {}
        self.notes: list[str] = []
        self.handled: set[str] = set()
        self.unknown: dict[str, tuple] = {}
        self.differs: dict[str, str] = {}
        self.backend = "vllm"
        self.world = 1

    # -- helpers ----------------------------------------------------------------------------------------------------

    def given(self, k: str) -> bool:
        return k in self.setting and not self.cmd.settings[self.by[k]].unknown

    def eff(self, k: str) -> Any:
        """The value TRL runs with: the input's (when known here), else TRL's default."""
        return self.setting[k] if self.given(k) else self.defaults.get(k)

    def put(self, key: str, value: Any, *ks: str, carry: bool = True) -> None:
        """Our ``key`` = ``value``, from TRL's fields ``ks`` (given, or when ``carry`` their defaults)."""
        self.handled.update(ks)
        given = [k for k in ks if self.given(k)]
        if not given and not carry:
            return
        self.values[key] = value
        for k in given:
            o = self._outcome(k)
            if o is not None and key not in o.keys:
                o.keys.append(key)
        if not given and ks:
            self.carried[key] = ", ".join(ks)

    def differ(self, k: str, how: str) -> None:
        self.handled.add(k)
        self.differs[k] = f"{self.differs[k]}; {how}" if k in self.differs else how

    def problem(self, k: str, text: str) -> None:
        self.handled.add(k)
        o = self._outcome(k)
        if o is not None:
            o.problem = text

    def number(self, k: str, kind: type) -> Any:
        """``eff(k)`` when it is a number of ``kind`` (an int serves as a float), else TRL's default, reported."""
        v = self.eff(k)
        ok = isinstance(v, kind) and not isinstance(v, bool) or kind is float and isinstance(v, int)
        if v is None or ok and not isinstance(v, bool):
            return float(v) if kind is float and v is not None else v
        self.problem(k, f"takes a number, got {v!r}; TRL's default used")
        return self.defaults.get(k)

    def _field(self, k: str, default: Any, kind: type) -> Any:
        """A field TRL's defaults table leaves out (ModelConfig's): the input's number, else ``default``."""
        v = self.setting.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or kind is int and not isinstance(v, int):
            self.problem(k, f"takes a number, got {v!r}; TRL's default {default} used")
            return default
        return kind(v)

    # -- the whole mapping ------------------------------------------------------------------------------------------

    def run(self) -> Mapping:
        nodes, per_node = self._devices()
        world = self.world = nodes * per_node
        self._model()
        self._data()
        self._optimizer()
        self._schedule(world)
        self._engine()
        self._logging()
        if self.rl:
            self._rl_batches(world)
            self._rl_loss()
            self._rollout()
            self._reward()
        else:
            self._offline()
        groups = self._groups(world)
        for i, s in enumerate(self.cmd.settings):
            out = self.outcomes[i]
            if s.key in self.handled or out.overridden_by or s.unknown:
                continue
            if s.key in vocab.NO_EQUIVALENT:
                self.none(s.key, *vocab.NO_EQUIVALENT[s.key])
            elif s.origin == "accelerate":
                self.none(s.key, NOT_NEEDED, "an accelerate launch option; the run places its own processes")
            else:
                out.problem = (
                    f"not a field of TRL's {vocab.CONFIG_CLASS[self.trainer]}, ModelConfig or ScriptArguments as "
                    "this importer knows them"
                )
        model_path = str(self.eff(_MODEL_KEY) or "")
        return Mapping(
            self.trainer,
            self.values,
            self.carried,
            self.outcomes,
            self.notes,
            model_path,
            groups,
            nodes,
            per_node,
            self.unknown,
            self.backend,
            self.differs,
        )

    # -- devices and engine -----------------------------------------------------------------------------------------

    def _devices(self) -> tuple[int, int]:
        """(nodes, devices per node): accelerate's --num_processes/--num_machines, else its config file's, else the
        --hardware option's, else one device (a plain `trl grpo` runs one process)."""
        acc = self.cmd.accelerate
        procs = self.setting.get("num_processes", acc.get("num_processes"))
        machines = self.setting.get("num_machines", acc.get("num_machines", 1))
        self.handled.update(("num_processes", "num_machines"))
        if isinstance(procs, int) and procs >= 1 and isinstance(machines, int) and machines >= 1:
            where = [k for k in ("num_processes", "num_machines") if k in self.setting]
            for k in where or [k for k in ("config_file", "accelerate_config") if k in self.setting][-1:]:
                self.explain(k, f"hardware: {machines} node(s) x {procs // machines} device(s)")
            return machines, max(procs // machines, 1)
        opts = options("hardware")
        if self.hardware in opts:
            o = opts[self.hardware]
            self.notes.append(
                f"devices: the command does not say how many processes run; hardware={self.hardware}'s "
                f"{o['nodes'] * o['devices_per_node']} assumed for TRL's batch arithmetic"
            )
            return o["nodes"], o["devices_per_node"]
        self.notes.append(
            "devices: the command does not say how many processes run (accelerate's num_processes); one assumed for "
            "TRL's batch arithmetic (pass --hardware to say more)"
        )
        return 1, 1

    def _engine(self) -> None:
        """The accelerate config: a shipped name (--accelerate_config zero3) or a file's DeepSpeed/FSDP settings."""
        name = self.cmd.accelerate_file
        keys = [k for k in ("accelerate_config", "config_file") if k in self.setting]
        self.handled.update(keys)
        if not name:
            return
        k = keys[-1] if keys else ""
        acc = self.cmd.accelerate
        if not acc and name in vocab.ACCELERATE_NAMES:
            backend, stage = vocab.ACCELERATE_NAMES[name]
        elif acc:
            dist = str(acc.get("distributed_type", "")).upper()
            ds = acc.get("deepspeed_config") or {}
            backend = "deepspeed" if dist == "DEEPSPEED" else "fsdp2" if dist == "FSDP" else "ddp"
            stage = ds.get("zero_stage") if isinstance(ds, dict) else None
            if isinstance(ds, dict) and ds.get("offload_optimizer_device") == "cpu":
                self.put("trainer.offload_optimizer", True, k)
            if isinstance(ds, dict) and ds.get("offload_param_device") == "cpu":
                self.put("trainer.offload_params", True, k)
        else:
            o = self._outcome(k)
            if o is not None:
                o.none = (
                    f"{UNSUPPORTED}: {name} is not here, so its zero_stage, distributed_type and num_processes are "
                    "unknown; the defaults here stand (import where the file is, or set trainer.zero_stage)"
                )
            return
        if backend == "ddp":
            self.put("trainer.backend", "deepspeed", k)
            self.put("trainer.zero_stage", 0, k)
            self.explain(k, "plain data parallelism: DeepSpeed ZeRO stage 0 here")
            return
        self.put("trainer.backend", backend, k)
        if backend == "deepspeed" and isinstance(stage, int):
            self.put("trainer.zero_stage", stage, k)

    # -- model, data, optimizer, logging ----------------------------------------------------------------------------

    def _model(self) -> None:
        k = _MODEL_KEY
        self.handled.add(k)
        if k in self.setting and self.cmd.settings[self.by[k]].unknown:
            s = self.cmd.settings[self.by[k]]
            self.unknown["model.path"] = (s.text, s.unknown)
        elif k not in self.setting:
            self.notes.append(f"model: the input does not set {k}; give model.path=... (or model=OPTION)")
        if self.eff("use_peft"):
            # ModelConfig's LoRA defaults: r 16, alpha 32, dropout 0.05.
            rank = self._field("lora_r", 16, int)
            self.put("model.lora.rank", rank, "use_peft", "lora_r")
            self.put("model.lora.alpha", self._field("lora_alpha", 32, int), "lora_alpha")
            self.put("model.lora.dropout", self._field("lora_dropout", 0.05, float), "lora_dropout")
            if "lora_target_modules" in self.setting:
                mods = self.setting["lora_target_modules"]
                self.put("model.lora.target_modules", mods if isinstance(mods, list) else [mods], "lora_target_modules")
        else:
            for lk in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules"):
                if lk in self.setting:
                    self.none(lk, NOT_NEEDED, "read by TRL only with use_peft")
            self.handled.add("use_peft")

    def _data(self) -> None:
        name = self.eff("dataset_name")
        self.handled.update(("dataset_name", "dataset_config", "dataset_train_split"))
        if name:
            config = self.eff("dataset_config")
            ref = f"{name}:{config}" if config else str(name)
            self.put("data.train_files", [ref], "dataset_name", "dataset_config", carry=False)
            split = self.eff("dataset_train_split")
            self.put("data.train_split", split, "dataset_train_split")
        elif "datasets" in self.setting:
            self.none("datasets", UNSUPPORTED, "a dataset mixture: list its files in data.train_files")
        else:
            self.notes.append("data: the input names no dataset (dataset_name); give data.train_files=[...]")
        if self.rl:  # TRL's rule: a string prompt is used as it is, a message list rendered with the chat template
            self.values["data.apply_chat_template"] = False
            self.notes.append(
                "data: as in TRL, the data's format decides the chat template (data.apply_chat_template=false): a "
                "string prompt is used as it is and reward functions get strings; a message-list prompt is rendered "
                "with the template and they get message lists"
            )
        # The data keys are left to the columns: a file in TRL's formats is read by its column names here too.
        self.notes.append(
            "data: TRL's dataset formats are read by their columns (prompt; prompt/completion; messages; "
            "prompt/chosen/rejected; prompt/completion/label); every column but the prompt reaches the reward "
            "functions by name"
            if self.rl
            else "data: TRL's dataset formats are read by their columns (prompt/completion, messages, text, "
            "prompt/chosen/rejected, prompt/completion/label); set data.*_key to read others"
        )
        if "max_length" in self.defaults:
            self.put("data.max_len", self.number("max_length", int), "max_length")
        if "max_prompt_length" in self.setting:
            v = self.number("max_prompt_length", int)
            self.put("data.max_prompt_len", v, "max_prompt_length", carry=False)
            self.explain("max_prompt_length", "older TRL's field (1.16 has none); the prompt limit here")

    def _optimizer(self) -> None:
        self.put("trainer.lr", self.number("learning_rate", float), "learning_rate")
        b1, b2 = self.number("adam_beta1", float), self.number("adam_beta2", float)
        self.put("trainer.betas", [b1, b2], "adam_beta1", "adam_beta2")
        self.put("trainer.weight_decay", self.number("weight_decay", float), "weight_decay")
        self.put("trainer.max_norm", self.number("max_grad_norm", float), "max_grad_norm")
        self.put("trainer.gradient_checkpointing", bool(self.eff("gradient_checkpointing")), "gradient_checkpointing")
        fp16, bf16 = bool(self.eff("fp16")), self.eff("bf16")
        precision = "fp16" if fp16 else "bf16" if bf16 in (True, None) else "fp32"
        self.put("trainer.precision", precision, "bf16", "fp16")
        sched = self.eff("lr_scheduler_type")
        k = "lr_scheduler_type"
        self.handled.add(k)
        if sched in ("constant", "constant_with_warmup"):
            self.put("trainer.lr_scheduler", sched, k)
        elif sched == "cosine":
            self.put("trainer.lr_scheduler", "cosine_with_min_lr", k)
            self.put("trainer.min_lr_ratio", 0.0, k)
        elif self.given(k):
            self.put("trainer.lr_scheduler", "cosine_with_min_lr", k)
            self.put("trainer.min_lr_ratio", 0.0, k)
            self.differ(k, f"no {sched} schedule here: a cosine decay to 0 instead")
        else:
            self.notes.append(
                "trainer.lr_scheduler: TRL decays the learning rate linearly to 0 by default; there is no linear "
                "schedule here, so the option's cosine_with_min_lr stands (give trainer.lr_scheduler=constant to "
                "keep it flat)"
            )
        for wk in ("warmup_steps", "warmup_ratio"):
            v = self.eff(wk)
            if isinstance(v, float) and 0 <= v < 1:
                self.put("trainer.warmup_ratio", v, wk)
            elif v == 0:
                self.put("trainer.warmup_ratio", 0.0, wk)
            elif wk in self.setting:
                self.none(wk, UNSUPPORTED, "a warm-up in steps; trainer.warmup_ratio is a fraction")

    def _schedule(self, world: int) -> None:
        """Epochs, steps, checkpoints."""
        epochs = self.number("num_train_epochs", float)
        ours = max(int(math.ceil(epochs)), 1) if isinstance(epochs, float) else 1
        self.put("trainer.num_episodes" if self.rl else "trainer.epochs", ours, "num_train_epochs")
        if isinstance(epochs, float) and epochs != ours:
            self.differ("num_train_epochs", f"a fraction of an epoch: {ours} whole pass(es) here (cap with max_steps)")
        steps = self.number("max_steps", int)
        self.handled.add("max_steps")
        if isinstance(steps, int) and steps > 0:
            if self.rl:
                per = self._optimizer_steps_per_generation()
                rl_steps = max(math.ceil(steps / per), 1)
                self.put("trainer.max_steps", rl_steps, "max_steps")
                self.explain("max_steps", f"TRL counts optimizer steps: {steps} / {per:g} per generation")
            else:
                self.put("trainer.max_steps", steps, "max_steps")
        save = self.eff("save_steps")
        if isinstance(save, int) and save > 0:
            per = self._optimizer_steps_per_generation() if self.rl else 1
            self.put("checkpoint.save_steps", max(math.ceil(save / per), 1), "save_steps")
        self.put("seed", self.number("seed", int), "seed")
        out = self.eff("output_dir")
        self.put("checkpoint.dir", str(out), "output_dir")

    def _optimizer_steps_per_generation(self) -> float:
        ga = self.eff("gradient_accumulation_steps") or 1
        spg = self.eff("steps_per_generation") or ga
        return spg / ga * (self.eff("num_iterations") or 1)

    def _logging(self) -> None:
        self.put("logging.log_every", self.number("logging_steps", int), "logging_steps")
        to = self.eff("report_to")
        names = to if isinstance(to, list) else [to]
        if names in (["none"], [None], []):
            self.put("logging.trackers", ["console"], "report_to")
            return
        if names == ["all"]:
            self.put("logging.trackers", ["mlflow", "tensorboard", "wandb"], "report_to")
            return
        ours = [vocab.TRACKERS[n] for n in names if n in vocab.TRACKERS]
        self.put("logging.trackers", ours or ["console"], "report_to")
        other = [str(n) for n in names if n not in vocab.TRACKERS]
        if other:
            self.explain("report_to", f"{', '.join(other)}: no such tracker here")

    # -- RL ---------------------------------------------------------------------------------------------------------

    def _rl_batches(self, world: int) -> None:
        per = self.number("per_device_train_batch_size", int) or 1
        ga = self.number("gradient_accumulation_steps", int) or 1
        spg = self.number("steps_per_generation", int) or ga
        n = self.number("num_generations", int) or 1
        step = per * world * ga
        gen = per * world * spg
        if gen % n:
            self.problem(
                "num_generations",
                f"TRL needs the generation batch ({per} x {world} device(s) x {spg} = {gen}) divisible by it",
            )
        prompts = max(gen // n, 1)
        batch = ("per_device_train_batch_size", "gradient_accumulation_steps")
        self.put("trainer.global_batch", step, *batch)
        self.put("trainer.micro_batch_per_device", per, "per_device_train_batch_size")
        self.put("rollout.samples_per_prompt", n, "num_generations")
        self.put("rollout.prompts_per_step", prompts, "per_device_train_batch_size", "steps_per_generation")
        self.put("trainer.epochs_per_rollout", self.number("num_iterations", int), "num_iterations")
        self.explain(
            "per_device_train_batch_size",
            f"TRL counts completions: {per} per device x {world} device(s) x {ga} accumulation = {step} samples per "
            f"optimizer step; generation batch {per} x {world} x {spg} = {gen} completions = {prompts} prompt(s) x {n}",
        )
        self.notes.append(
            f"batch: TRL's per_device_train_batch_size={per} counts completions; trainer.global_batch={step} counts "
            f"samples per optimizer step ({per} x {world} device(s) x {ga} accumulation), rollout.prompts_per_step="
            f"{prompts} x samples_per_prompt={n} = {prompts * n} per generation"
        )

    def _rl_loss(self) -> None:
        eps = self.number("epsilon", float)
        high = self.number("epsilon_high", float)
        high = eps if high is None else high
        beta = self.number("beta", float)
        self.put("algorithm.kl.coef", beta, "beta")
        if self.trainer == "rloo":
            self.put("algorithm.advantage.estimator", "rloo")
            self.put("algorithm.kl.estimator", "k1", "beta")
            self.put("algorithm.kl.placement", "reward", "beta")
            self.put("algorithm.kl.before_baseline", True, "beta")
            self.put("algorithm.policy_loss.eps_clip_low", eps, "epsilon")
            self.put("algorithm.policy_loss.eps_clip_high", high, "epsilon_high", "epsilon")
            self.notes.append(
                "loss: TRL's RLOO clips one sequence ratio of summed log-probs per sample; here the token ratio of "
                "policy_loss.type=ppo (equal for on-policy steps, num_iterations=1)"
            )
            if self.given("normalize_advantages"):
                self.differ("normalize_advantages", "advantages are not re-normalised over the batch here")
            return
        if beta > 0:
            self.put("algorithm.kl.estimator", "k3", "beta")
            self.put("algorithm.kl.placement", "loss", "beta")
            # TRL adds beta x KL to each token's loss before the loss_type's aggregation: the policy loss's here.
            self.put("algorithm.policy_loss.terms_aggregation", "policy", "beta")
        self._bias_corrected_kl(beta)
        self._scale_rewards()
        loss = self.eff("loss_type")
        k = "loss_type"
        self.handled.add(k)
        if loss in vocab.LOSS_TYPES:
            ptype, agg = vocab.LOSS_TYPES[loss]
        elif loss in vocab.OTHER_LOSS_TYPES:
            ptype, agg = "ppo", "seq_mean"
            self.differ(k, vocab.OTHER_LOSS_TYPES[loss])
        else:
            self.problem(k, f"{loss!r} is not a loss_type of TRL 1.16; dapo's (TRL's default) used")
            ptype, agg = vocab.LOSS_TYPES["dapo"]
        if self.eff("importance_sampling_level") == "sequence":
            self.handled.add("importance_sampling_level")
            if ptype == "ppo":
                ptype = "gspo"
                self.put("algorithm.policy_loss.type", ptype, "importance_sampling_level")
                # TRL aggregates the sequence-ratio loss by its loss_type, as any other.
                self.put("algorithm.policy_loss.seq_ratio_aggregation", "configured", "importance_sampling_level")
            else:
                self.differ("importance_sampling_level", f"the token ratio of {ptype} here")
        self.put("algorithm.policy_loss.type", ptype, k)
        self.put("algorithm.policy_loss.aggregation", agg, k)
        if loss == "bnpo" and self.values["trainer.global_batch"] != self.values["trainer.micro_batch_per_device"]:
            self.differ(k, "TRL averages each micro-batch's token mean; here one token mean over the optimizer step")
        if loss == "dr_grpo":
            self.put("algorithm.policy_loss.aggregation_norm", self.eff("max_completion_length"), k)
        if ptype == "cispo":
            # TRL caps CISPO's ratio at epsilon_high itself (no lower bound); ours at 1 + eps_clip_high, and
            # eps_clip_low >= 1 leaves it unbounded below.
            self.put("algorithm.policy_loss.eps_clip_low", 1.0, k)
            if high > 1:
                self.put("algorithm.policy_loss.eps_clip_high", high - 1.0, "epsilon_high")
            else:
                self.problem("epsilon_high", f"CISPO caps the ratio at epsilon_high={high}: give one above 1 (e.g. 5)")
            self.handled.add("epsilon")
        else:
            self.put("algorithm.policy_loss.eps_clip_low", eps, "epsilon")
            self.put("algorithm.policy_loss.eps_clip_high", high, "epsilon_high", "epsilon")
        if self.eff("delta") is not None:
            self.put("algorithm.policy_loss.dual_clip", self.number("delta", float), "delta")
            self.differ("delta", "TRL caps the ratio at delta for every advantage; a dual clip caps negative ones")

    def _bias_corrected_kl(self, beta: float) -> None:
        """TRL 1.16 multiplies each token's KL by the (not detached) ratio pi/pi_old by default; here the KL term is
        the plain k3 estimate, TRL's with use_bias_correction_kl false."""
        k = "use_bias_correction_kl"
        self.handled.add(k)
        if not self.eff(k):
            if self.given(k):
                self.explain(k, "the KL term here is the plain k3 estimate, as TRL's with it off")
            return
        if beta > 0:
            self.differ(
                k if self.given(k) else "beta",
                "TRL multiplies each token's KL by the ratio pi/pi_old (use_bias_correction_kl, on by default); "
                "here the plain k3 estimate (TRL's with --use_bias_correction_kl false)",
            )
        elif self.given(k):
            self.explain(k, "read by TRL only with beta > 0")

    def _scale_rewards(self) -> None:
        k = "scale_rewards"
        self.handled.add(k)
        scale = self.eff(k)
        if scale not in vocab.SCALE_REWARDS:
            self.problem(k, f"{scale!r}: TRL takes group, batch or none; group (its default) used")
            scale = "group"
        est = vocab.SCALE_REWARDS[scale]
        if est is None:
            self.put("algorithm.advantage.estimator", "reinforce_baseline", k)
            self.differ(
                k,
                "the group-centred rewards are divided by their own std over the batch, TRL's by the raw rewards' std",
            )
            return
        self.put("algorithm.advantage.estimator", est, k)
        if est == "group_norm":
            # TRL divides by the group's (unbiased) std + 1e-4 (GRPOTrainer._generate_and_score_completions).
            self.put("algorithm.advantage.std_eps", vocab.GROUP_STD_EPS, k)

    def _rollout(self) -> None:
        if self.eff("mask_truncated_completions"):
            self.none(
                "mask_truncated_completions",
                UNSUPPORTED,
                "completions cut at max_completion_length still train here",
            )
        if self.given("entropy_coef"):
            self.put("algorithm.policy_loss.entropy_coef", self.number("entropy_coef", float), "entropy_coef")
            self.differ("entropy_coef", "the bonus is averaged as algorithm.policy_loss.terms_aggregation says here")
        for key in ("top_entropy_quantile", "min_p", "repetition_penalty"):
            if key in self.setting:
                self.none(key, UNSUPPORTED, "no such knob here yet")
        self.handled.add("mask_truncated_completions")
        self.put("rollout.max_new_tokens", self.number("max_completion_length", int), "max_completion_length")
        self.put("rollout.temperature", self.number("temperature", float), "temperature")
        self.put("rollout.top_p", self.number("top_p", float), "top_p")
        top_k = self.number("top_k", int)
        self.put("rollout.top_k", -1 if not top_k or top_k < 0 else top_k, "top_k")
        vllm = bool(self.eff("use_vllm"))
        self.handled.update(("use_vllm", "vllm_mode"))
        self.backend = "vllm" if vllm else "hf"
        o = self._outcome("use_vllm")
        if o is not None:
            o.note = f"placement: rollout={self.backend}" + ("" if vllm else " (transformers' generate, as TRL)")
        if vllm and self.eff("vllm_mode") == "server":
            self.differ("vllm_mode", "TRL's engines run on other GPUs (trl vllm-serve); here on the training devices")
        if vllm:
            if "vllm_gpu_memory_utilization" in self.setting:
                v = self.number("vllm_gpu_memory_utilization", float)
                self.put("rollout.vllm.gpu_memory_utilization", v, "vllm_gpu_memory_utilization")
            if "vllm_tensor_parallel_size" in self.setting:
                v = self.number("vllm_tensor_parallel_size", int)
                self.put("rollout.tensor_parallel_size", v, "vllm_tensor_parallel_size")
            self.notes.append(
                "rollout: TRL corrects for vLLM's sampling mismatch by default (sequence_mask, cap 3); here "
                "algorithm.is_correction stays off unless you set it"
            )
        else:
            self.put("rollout.hf.in_policy", True, "use_vllm")

    def _reward(self) -> None:
        funcs = self.eff("reward_funcs")
        self.handled.update(("reward_funcs", "reward_weights", "reward_model_name_or_path"))
        if funcs:
            names = funcs if isinstance(funcs, list) else [funcs]
            refs = [vocab.REWARD_NAMES.get(str(f), str(f)) for f in names]
            self.put("reward.function", refs, "reward_funcs")
            self.put("reward.contract", "trl", "reward_funcs")
            weights = self.eff("reward_weights")
            if weights is not None:
                ws = weights if isinstance(weights, list) else [weights]
                if len(ws) != len(refs) or not all(isinstance(w, (int, float)) for w in ws):
                    self.problem("reward_weights", f"one number per reward function ({len(refs)}), got {weights!r}")
                else:
                    self.put("reward.weights", [float(w) for w in ws], "reward_weights")
        model = self.eff("reward_model_name_or_path")
        if model:
            self.put("reward.model_path", str(model), "reward_model_name_or_path")
        if not funcs and not model:
            self.notes.append("reward: the input names no reward_funcs; give reward.function=FILE.py (or a list)")
        agg = self.eff("multi_objective_aggregation")
        if agg is not None:
            self.put("reward.multi_objective_aggregation", agg, "multi_objective_aggregation")

    # -- SFT, RM, DPO, KTO ------------------------------------------------------------------------------------------

    def _offline(self) -> None:
        per = self.number("per_device_train_batch_size", int) or 1
        ga = self.number("gradient_accumulation_steps", int) or 1
        world = self.world
        self.put("trainer.global_batch", per * world * ga, "per_device_train_batch_size", "gradient_accumulation_steps")
        self.put("trainer.micro_batch_per_device", per, "per_device_train_batch_size")
        self.explain(
            "per_device_train_batch_size",
            f"{per} per device x {world} device(s) x {ga} accumulation = {per * world * ga} samples per optimizer step",
        )
        if self.trainer in ("dpo", "kto"):
            self.put("algorithm.preference.beta", self.number("beta", float), "beta")
        if self.trainer == "dpo":
            loss = self.eff("loss_type")
            losses = loss if isinstance(loss, list) else [loss]
            k = "loss_type"
            self.handled.add(k)
            if len(losses) == 1 and losses[0] in vocab.DPO_LOSSES:
                self.put("algorithm.preference.loss", vocab.DPO_LOSSES[losses[0]], k)
            else:
                self.none(k, UNSUPPORTED, f"{loss!r}: the preference losses here are dpo, ipo, kto, simpo, orpo")
        if self.trainer == "kto":
            self.put("algorithm.preference.loss", "kto", "loss_type")
            for tk, ours in (
                ("desirable_weight", "kto_desirable_weight"),
                ("undesirable_weight", "kto_undesirable_weight"),
            ):
                if tk in self.setting:
                    self.put(f"algorithm.preference.{ours}", self.number(tk, float), tk)
        if self.trainer == "sft" and self.given("packing"):
            self.put("data.packing", bool(self.eff("packing")), "packing")

    def _groups(self, world: int) -> list[tuple[list[str], int]]:
        if self.trainer in ("dpo", "kto"):  # the reference model sits on the policy's devices in TRL
            return [(["policy", "reference"], world)]
        if not self.rl:
            return [(["policy"], world)]
        present = ["policy"]
        if self.values.get("algorithm.kl.coef", 0.0) > 0:
            present.append("reference")
        if self.values.get("reward.model_path"):
            present.append("reward")
        present.append("rollout")
        self.put("rollout.num_engines", world)
        return [(present, world)]


def map_command(cmd: Command, hardware: str | None = None) -> Mapping:
    """Every setting of ``cmd`` -> our keys (before choosing presets), with an outcome per setting."""
    return _Mapper(cmd, hardware).run()

"""OpenRLHF's settings -> our config keys, with what became of every flag.

The semantics are carried over, not just the names: where the command leaves a flag out, OpenRLHF's default for it
is what the run would use, so that default is carried (``rollout.batch_size`` 1024, ``data.apply_chat_template``
off, ``algo.kl.init_coef`` 0.01 in the reward with k1, ``lambd`` 1, ...); the recipe then keeps only the values
that differ from the options it picks (rlhf.importers.recipe).

Batch vocabulary (OpenRLHF -> ours; derived values are equal, tests/importers pins them):
    rollout.batch_size (prompts per step)        -> rollout.prompts_per_step
    rollout.n_samples_per_prompt                  -> rollout.samples_per_prompt
    train.batch_size (samples per optimizer step) -> trainer.global_batch
    train.micro_batch_size (per GPU)              -> trainer.micro_batch_per_device
    rollout.micro_batch_size (per GPU, forwards)  -> rollout.micro_batch_per_device
    train.max_epochs                              -> trainer.epochs_per_rollout (RL) / trainer.epochs (SFT, RM, DPO)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhf.importers.common import launcher_devices
from rlhf.importers.openrlhf import flags as vocab
from rlhf.importers.openrlhf.args import Command
from rlhf.importers.outcomes import Outcome, OutcomeBook
from rlhf.importers.recipe import schema_has
from rlhf.spec import names


def openrlhf_grad_accum(train_batch: int, micro_batch: int, world: int, ring: int = 1, tp: int = 1) -> int:
    """DeepSpeed gradient accumulation as OpenRLHF sets it: train.batch_size x ring x tp / micro / world."""
    return train_batch * ring * tp // micro_batch // world


def openrlhf_steps_per_rollout(rollout_batch: int, n_samples: int, train_batch: int, max_epochs: int) -> int:
    """Optimizer steps per RL step in OpenRLHF: rollout.batch_size x n / train.batch_size x max_epochs."""
    return rollout_batch * n_samples // train_batch * max_epochs


@dataclass
class Mapping:
    entry: str
    values: dict[str, Any]  # our dotted key -> value
    carried: dict[str, str]  # key -> the OpenRLHF flags whose defaults it carries (the command did not set them)
    outcomes: list[Outcome]  # one per flag of the command, in order
    notes: list[str]  # choices made and warnings
    model_path: str
    groups: list[tuple[list[str], int]]  # device groups of the roles that run, with their device counts
    nodes: int
    devices_per_node: int
    # Our keys whose value came from a flag the script could not resolve (${SAVE_PATH} set outside it, $(...)):
    # key -> (the flags as written, their unknown pieces). The value in ``values`` is then a stand-in (OpenRLHF's
    # default, or the text as written for a path); the recipe writes a placeholder (rlhf.importers.placeholders).
    unknown: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return FAMILY[self.entry]


FAMILY = {"train_ppo_ray": "rl", "train_sft": "sft", "train_rm": "rm", "train_dpo": "dpo"}


# OpenRLHF flag -> our key, where the value carries over as it is. carry: OpenRLHF's default is what the run
# uses when the flag is absent, so it is carried too (False: a path or a logging detail, ours stands). A row whose
# key this version's schema lacks yet is reported as coming (one line here is all a new flag needs).
_DIRECT_RL = {
    "vllm.enable_prefix_caching": ("rollout.vllm.enable_prefix_caching", True),
    "vllm.enforce_eager": ("rollout.vllm.enforce_eager", True),
    "vllm.gpu_memory_utilization": ("rollout.vllm.gpu_memory_utilization", True),
    "rollout.batch_size": ("rollout.prompts_per_step", True),
    "rollout.micro_batch_size": ("rollout.micro_batch_per_device", True),
    "rollout.n_samples_per_prompt": ("rollout.samples_per_prompt", True),
    "rollout.temperature": ("rollout.temperature", True),
    "rollout.top_p": ("rollout.top_p", True),
    "ds.value_head_prefix": ("reward.value_head_prefix", True),
    "actor.gradient_checkpointing_enable": ("trainer.gradient_checkpointing", True),
    "ref.offload": ("reference.offload", True),
    "reward.offload": ("reward.offload", True),
    "actor.adam.lr": ("trainer.lr", True),
    "critic.adam.lr": ("trainer.critic_lr", True),
    "algo.advantage.estimator": ("algorithm.advantage.estimator", True),
    "algo.advantage.gamma": ("algorithm.advantage.gamma", True),
    "algo.advantage.lambd": ("algorithm.advantage.lambd", True),
    "algo.advantage.no_std_norm": ("algorithm.advantage.no_std_norm", True),
    "algo.kl.init_coef": ("algorithm.kl.coef", True),
    "algo.kl.target": ("algorithm.kl.target", True),
    "algo.kl.horizon": ("algorithm.kl.horizon", True),
    "algo.kl.estimator": ("algorithm.kl.estimator", True),
    "algo.advantage.is_correction_level": ("algorithm.is_correction.level", True),
    "algo.advantage.is_correction_mode": ("algorithm.is_correction.mode", True),
    "algo.advantage.is_correction_gating": ("algorithm.is_correction.gating", True),
    "algo.advantage.is_correction_threshold": ("algorithm.is_correction.threshold", True),
    "algo.dynamic_filtering_enable": ("algorithm.filters.dynamic_filtering", True),
    "algo.dynamic_filtering_range": ("algorithm.filters.dynamic_filtering_range", True),
    "actor.dual_clip": ("algorithm.policy_loss.dual_clip", True),
    "actor.entropy_coef": ("algorithm.policy_loss.entropy_coef", True),
    "critic.value_clip": ("critic.value_clip", True),
    "critic.save_value_network": ("critic.save_value_network", True),
    "reward.clip_range": ("reward.clip_range", True),
    "reward.normalize_enable": ("reward.normalize", True),
    "reward.overlong_buffer_len": ("algorithm.filters.overlong_buffer_len", True),
    "reward.overlong_penalty_factor": ("algorithm.filters.overlong_penalty_factor", True),
    "reward.stop_properly_penalty_coef": ("algorithm.filters.stop_properly_penalty_coef", True),
    "train.batch_size": ("trainer.global_batch", True),
    "train.micro_batch_size": ("trainer.micro_batch_per_device", True),
    "train.max_epochs": ("trainer.epochs_per_rollout", True),
    "train.num_episodes": ("trainer.num_episodes", True),
    "critic.model_name_or_path": ("critic.model_path", False),
    "data.prompt_split": ("data.train_split", True),
    "data.input_key": ("data.input_key", True),
    "data.label_key": ("data.label_key", True),
    "eval.temperature": ("eval.temperature", True),
    "eval.n_samples_per_prompt": ("eval.samples_per_prompt", True),
}
_DIRECT_SUPERVISED = {
    "model.gradient_checkpointing_enable": ("trainer.gradient_checkpointing", True),
    "adam.lr": ("trainer.lr", True),
    "train.batch_size": ("trainer.global_batch", True),
    "train.micro_batch_size": ("trainer.micro_batch_per_device", True),
    "train.max_epochs": ("trainer.epochs", True),
    "data.dataset_split": ("data.train_split", True),
    "data.input_key": ("data.input_key", True),
    "data.output_key": ("data.output_key", True),
    "data.multiturn": ("data.multiturn", True),
    "data.tokenizer_chat_template": ("model.chat_template", False),
    "model.pretrain_mode_enable": ("data.pretrain_mode", True),
    "data.prompt_key": ("data.prompt_key", True),
    "data.chosen_key": ("data.chosen_key", True),
    "data.rejected_key": ("data.rejected_key", True),
    "ds.value_head_prefix": ("reward.value_head_prefix", True),
    "ref.model_name_or_path": ("reference.model_path", False),
    "ref.offload": ("reference.offload", True),
    "model.beta": ("algorithm.preference.beta", True),
    "model.label_smoothing": ("algorithm.preference.label_smoothing", True),
    "model.nll_loss_coef": ("algorithm.preference.nll_coef", True),
}
_DIRECT_COMMON = {
    "train.seed": ("seed", True),
    "ds.zero_stage": ("trainer.zero_stage", True),
    "ds.lora.rank": ("model.lora.rank", True),
    "ds.lora.alpha": ("model.lora.alpha", True),
    "ds.lora.target_modules": ("model.lora.target_modules", True),
    "ds.lora.dropout": ("model.lora.dropout", True),
    "data.input_template": ("data.input_template", True),
    "data.apply_chat_template": ("data.apply_chat_template", True),  # off unless asked, in OpenRLHF
    "data.max_samples": ("data.max_samples", False),
    "logger.logging_steps": ("logging.log_every", False),
    "logger.wandb.project": ("logging.experiment", False),
    "logger.wandb.run_name": ("logging.run_name", False),
    "ckpt.output_dir": ("checkpoint.output_dir", False),
    "ckpt.path": ("checkpoint.dir", False),
    "ckpt.max_num": ("checkpoint.max_keep", False),
}
# Optimiser settings, per role in OpenRLHF's PPO, shared by every trained role here.
_OPTIM = {
    "adam.betas": "trainer.betas",
    "adam.eps": "trainer.eps",
    "adam.weight_decay": "trainer.weight_decay",
    "lr_warmup_ratio": "trainer.warmup_ratio",
    "min_lr_ratio": "trainer.min_lr_ratio",
    "max_norm": "trainer.max_norm",
}

UNSUPPORTED, GPU_ONLY, SUPERSEDED, NOT_NEEDED = "unsupported", "GPU-only", "superseded", "not needed"
# Flags with no equivalent here. "quiet_default": the value OpenRLHF has anyway, which then changes nothing.
_NONE = {
    "ds.zpg": (UNSUPPORTED, "ZeRO++ hierarchical partitioning is not configurable here", 1),
    "ds.overlap_comm": (UNSUPPORTED, "DeepSpeed's communication overlap is not exposed", False),
    "ds.deepcompile": (UNSUPPORTED, "DeepCompile", False),
    "ds.use_universal_ckpt": (UNSUPPORTED, "universal (world-size independent) checkpoints", False),
    "ds.grad_accum_dtype": (SUPERSEDED, "gradients always accumulate in fp32 here", None),
    "ds.experts_implementation": (UNSUPPORTED, "MoE expert kernels", None),
    "ds.use_liger_kernel": (UNSUPPORTED, "Liger kernels", False),
    "ds.load_in_4bit": (UNSUPPORTED, "4-bit (QLoRA) loading", False),
    "ds.ring_attn_head_stride": (
        NOT_NEEDED,
        "ring attention's kv heads per gather, a memory/speed trade-off of its kernel; Ulysses here exchanges every "
        "head in one all-to-all per tensor, so there is nothing to set",
        1,
    ),
    "local_rank": (NOT_NEEDED, "set by the launcher", -1),
    "use_ms": (UNSUPPORTED, "the ModelScope hub", False),
    "ckpt.disable_ds": (UNSUPPORTED, "checkpoints always hold the DeepSpeed states (needed to resume)", False),
    "ckpt.max_mem": (UNSUPPORTED, "a size cap on checkpoints; checkpoint.max_keep caps their number", None),
    "logger.wandb.key": (SUPERSEDED, "runs are tracked with MLflow here (logging.mlflow; `mlflow ui`)", None),
    "logger.wandb.org": (SUPERSEDED, "runs are tracked with MLflow here", None),
    "logger.wandb.group": (SUPERSEDED, "runs are tracked with MLflow here", None),
    "logger.tensorboard_dir": (SUPERSEDED, "runs are tracked with MLflow here (`mlflow ui` shows the curves)", None),
    "data.disable_fast_tokenizer": (UNSUPPORTED, "tokenizers load with their default (fast) implementation", False),
    "data.dataloader_num_workers": (NOT_NEEDED, "data is tokenised before training starts", 0),
    "train.full_determinism_enable": (UNSUPPORTED, "full determinism (seed sets data order and sampling)", False),
    "actor.gradient_checkpointing_reentrant": (UNSUPPORTED, "reentrant activation checkpointing", False),
    "model.gradient_checkpointing_reentrant": (UNSUPPORTED, "reentrant activation checkpointing", False),
    "vllm.sync_backend": (
        SUPERSEDED,
        "the weight-sync route (CUDA IPC, NCCL broadcast, shared memory) is chosen from the placement",
        "nccl",
    ),
    "vllm.sync_with_ray": (SUPERSEDED, "the weight-sync route is chosen from the placement", False),
    "actor.freeze_visual_encoder": (UNSUPPORTED, "vision-language models", False),
    "data.image_key": (UNSUPPORTED, "vision-language models", "images"),
    "data.max_images_per_prompt": (UNSUPPORTED, "vision-language models", 0),
    "train.enable_ema": (UNSUPPORTED, "an EMA copy of the policy", False),
    "train.ema_beta": (UNSUPPORTED, "an EMA copy of the policy", 0.992),
    "actor.aux_loss_coef": (UNSUPPORTED, "the MoE load-balancing loss", 0.0),
    "model.aux_loss_coef": (UNSUPPORTED, "the MoE load-balancing loss", 0.0),
    "train.async_queue_size": (UNSUPPORTED, "a deeper queue: async generation runs one step ahead here", 1),
    "train.partial_rollout_enable": (UNSUPPORTED, "partial rollouts across weight updates", False),
    "model.compute_fp32_loss_enable": (UNSUPPORTED, "a separate fp32 loss switch", False),
}
_MUON = (UNSUPPORTED, "the Muon optimiser (Adam only here)")


class _Mapper(OutcomeBook):
    def __init__(self, cmd: Command, hardware_type: str) -> None:
        self.cmd = cmd
        self.entry = cmd.entry
        self.rl = cmd.entry == "train_ppo_ray"
        self.defs = vocab.VOCABULARY[cmd.entry]
        self.cpu = hardware_type == "cpu"
        self.setting: dict[str, Any] = {}
        self.by: dict[str, int] = {}
        self.outcomes = [Outcome() for _ in cmd.flags]
        for i, f in enumerate(cmd.flags):
            for c, v in f.sets.items():
                if c in self.by and self.by[c] != i:
                    self.outcomes[self.by[c]].overridden_by = f.text
                self.setting[c] = v
                self.by[c] = i
        # canonical -> the flag index, where the flag setting it last has values this reading cannot know
        self.unknown_c = {c: i for c, i in self.by.items() if cmd.flags[i].unknown}
        self.unknown: dict[str, tuple[int, ...]] = {}
        self.values: dict[str, Any] = {}
        self.carried: dict[str, str] = {}
        self.notes: list[str] = []
        self.handled: set[str] = set()

    # -- helpers ----------------------------------------------------------------------------------------------------

    def given(self, c: str) -> bool:
        return c in self.setting

    def eff(self, c: str) -> Any:
        if c in self.setting:
            return self.setting[c]
        return vocab.definition(self.entry, c).default

    def put(self, key: str, value: Any, *cs: str, carry: bool = True) -> None:
        """Our ``key`` = ``value``, from OpenRLHF's flags ``cs`` (given, or when ``carry`` their defaults)."""
        self.handled.update(cs)
        given = [c for c in cs if self.given(c)]
        if not given and not carry:
            return
        self.values[key] = value
        unknown = tuple(self.unknown_c[c] for c in given if c in self.unknown_c)
        if unknown:
            self.unknown[key] = tuple(dict.fromkeys(self.unknown.get(key, ()) + unknown))
        for c in given:
            o = self._outcome(c)
            if key not in o.keys:
                o.keys.append(key)
        if not given and cs:
            self.carried[key] = ", ".join(f"--{c}" for c in cs)

    # -- the whole mapping ------------------------------------------------------------------------------------------

    def run(self) -> Mapping:
        for c, (key, carry) in {**_DIRECT_COMMON, **(_DIRECT_RL if self.rl else _DIRECT_SUPERVISED)}.items():
            if c not in self.defs:
                continue
            if schema_has(key):
                self.put(key, self.eff(c), c, carry=carry)
            elif self.given(c):  # a row may land before its key (another change adds it): said, never dropped
                self.none(c, "coming", f"{key}={self.eff(c)} once that key exists here")
            else:
                self.handled.add(c)
        self._none_flags()
        self._trainer()
        self._checkpoint_and_eval()
        self._data()
        if self.rl:
            self._algorithm()
            self._reward_and_agent()
            self._lengths()
            groups, nodes, per_node = self._placement()
        else:
            self._supervised_algorithm()
            groups, nodes, per_node = self._supervised_devices()
        model = "actor.model_name_or_path" if self.rl else "model.model_name_or_path"
        self.explain(model, "model: the closest conf/model option (rlhf.importers.recipe.choose_model)")
        if model in self.unknown_c:
            self.unknown["model.path"] = (self.unknown_c[model],)
        unknown = {k: self._as_written(idx) for k, idx in self.unknown.items()}
        if not self.given(model):  # OpenRLHF requires one; here the recipe must not run on an option's default
            unknown["model.path"] = (f"no model flag (--pretrain / --{model})", ())
        for c in self.setting:
            if c not in self.handled:  # a flag of the vocabulary nobody maps: say so rather than drop it
                self.none(c, UNSUPPORTED, "not carried over by this importer")
        return Mapping(
            self.entry,
            self.values,
            self.carried,
            self.outcomes,
            self.notes,
            self.eff(model) or "",
            groups,
            nodes,
            per_node,
            unknown,
        )

    def _as_written(self, flags: tuple[int, ...]) -> tuple[str, tuple[str, ...]]:
        text = " ".join(self.cmd.flags[i].text for i in flags)
        return text, tuple(dict.fromkeys(s for i in flags for s in self.cmd.flags[i].unknown))

    def _none_flags(self) -> None:
        for c, (category, reason, quiet) in _NONE.items():
            if c not in self.defs:
                continue
            if self.given(c) and self.eff(c) == quiet:
                self.explain(c, "OpenRLHF's default; nothing to carry over")
            else:
                self.none(c, category, reason)
        for prefix in ("actor.", "critic.", ""):
            if f"{prefix}optim" not in self.defs:
                continue
            for k in ("muon.lr", "muon.momentum", "muon.ns_steps", "muon.nesterov", "muon.no_nesterov"):
                self.none(f"{prefix}{k}", *_MUON)
            if self.eff(f"{prefix}optim") == "adam":
                self.explain(f"{prefix}optim", "Adam, as here")
            else:
                self.none(f"{prefix}optim", *_MUON)
        self._ring_attention()
        c = "ds.tensor_parallel_size"
        if c not in self.defs:
            return
        if self.eff(c) == 1:
            self.explain(c, "OpenRLHF's default; nothing to carry over")
        else:
            self.none(
                c,
                UNSUPPORTED,
                "DeepSpeed tensor parallelism (AutoTP); every training rank here is data-parallel, so the gradient "
                f"accumulation differs from OpenRLHF's (which divides the world by tensor_parallel_size={self.eff(c)})",
            )

    def _ring_attention(self) -> None:
        """``--ds.ring_attn_size N``: each sample split over N ranks, here by Ulysses (an all-to-all of q, k, v
        between columns and heads) where OpenRLHF runs ring attention (keys and values gathered round the group):
        the same exact attention. Each group of N ranks takes the same micro-batch in both, so the batch, the
        gradient accumulation (train_batch / (micro x world / N)) and the token budget per GPU mean the same."""
        c = "ds.ring_attn_size"
        if c not in self.defs:
            return
        n = self.eff(c)
        if n == 1:
            self.explain(c, "OpenRLHF's default; nothing to carry over")
        elif not schema_has("trainer.sequence_parallel_size"):
            self.none(
                c, UNSUPPORTED, "sequence parallelism (this version's schema has no trainer.sequence_parallel_size)"
            )
        else:
            self.put("trainer.sequence_parallel_size", n, c)
            self.explain(
                c,
                f"each sample split over {n} ranks by Ulysses (all-to-all of q, k, v between columns and heads) where "
                "OpenRLHF runs ring attention (keys and values passed round the group): the same attention; the "
                f"data-parallel size is the world / {n} in both, so the gradient accumulation is OpenRLHF's",
            )

    def _trainer(self) -> None:
        p = "actor." if self.rl else ""
        dtype = self.eff("ds.param_dtype")
        if self.cpu:
            self.put("trainer.precision", "fp32", "ds.param_dtype")
            self.explain("ds.param_dtype", "fp32 on CPU hardware (faster there than bf16; fp16 needs a GPU)")
        elif dtype in names.PRECISIONS:
            self.put("trainer.precision", dtype, "ds.param_dtype")
        else:
            self.none("ds.param_dtype", UNSUPPORTED, f"{dtype}; one of {', '.join(names.PRECISIONS)}")
        if self.eff("ds.adam_offload"):
            self.put("trainer.offload_optimizer", True, "ds.adam_offload")
            self.put("trainer.optimizer", "cpu_adam", "ds.adam_offload")
        else:
            self.handled.add("ds.adam_offload")
        attn = self.eff("ds.attn_implementation")
        if self.given("ds.attn_implementation"):
            if attn not in names.ATTN_IMPLEMENTATIONS:
                self.none(
                    "ds.attn_implementation", UNSUPPORTED, f"{attn}; one of {', '.join(names.ATTN_IMPLEMENTATIONS)}"
                )
            elif attn == "flash_attention_2" and self.cpu:
                self.none("ds.attn_implementation", GPU_ONLY, "flash-attn needs CUDA; sdpa on CPU")
            else:
                self.put("model.attn_implementation", attn, "ds.attn_implementation")
        self.handled.add("ds.attn_implementation")
        sched = self.eff(f"{p}lr_scheduler")
        if sched in names.LR_SCHEDULERS:
            self.put("trainer.lr_scheduler", sched, f"{p}lr_scheduler")
        else:
            self.none(f"{p}lr_scheduler", UNSUPPORTED, f"{sched}; one of {', '.join(names.LR_SCHEDULERS)}")
        for k, key in _OPTIM.items():
            self.put(key, self.eff(f"{p}{k}"), f"{p}{k}")
            if self.rl:
                self._shared(f"critic.{k}", f"actor.{k}", key)
        if self.rl:
            self._shared("critic.lr_scheduler", "actor.lr_scheduler", "trainer.lr_scheduler")

    def _shared(self, critic: str, actor: str, key: str) -> None:
        if self.eff(critic) == self.eff(actor):
            self.explain(critic, f"the actor's value too: {key} is shared by policy and critic here")
        else:
            self.none(critic, UNSUPPORTED, f"a critic value of its own; {key} is shared here, the actor's is kept")

    def _checkpoint_and_eval(self) -> None:
        self.put("checkpoint.save_steps", max(self.eff("ckpt.save_steps"), 0), "ckpt.save_steps", carry=False)
        self.put("eval.steps", max(self.eff("eval.steps"), 0), "eval.steps", carry=False)
        if self.eff("ckpt.load_enable"):
            self.put("checkpoint.resume", "auto", "ckpt.load_enable")
        elif self.given("ckpt.path"):
            self.values["checkpoint.resume"] = "never"
            self.carried["checkpoint.resume"] = "--ckpt.load_enable (off: OpenRLHF starts afresh)"
        self.handled.add("ckpt.load_enable")
        if self.eff("ckpt.save_hf"):
            if self.rl:
                self.none(
                    "ckpt.save_hf",
                    UNSUPPORTED,
                    "RL checkpoints are DeepSpeed states; the final model and best_model/ are Hugging Face folders",
                )
            else:
                self.put("checkpoint.save_hf_every_checkpoint", True, "ckpt.save_hf")
        self.handled.add("ckpt.save_hf")
        for c in ("ckpt.output_dir", "ckpt.path"):
            if self.given(c) and not str(self.eff(c)).startswith("/"):
                self.explain(c, "a relative path is inside the run directory here (outputs/<recipe>/<time>/)")
        best = self.eff("ckpt.best_metric_key")
        self.put("eval.best_metric", {"": "auto", "none": "none"}.get(best, best), "ckpt.best_metric_key", carry=False)
        if self.given("eval.dataset"):
            self.put("data.eval_files", _split(self.eff("eval.dataset")), "eval.dataset")
            self.put("data.eval_split", self.eff("eval.split"), "eval.split")  # DPO's default is "test"
        else:
            self.handled.update(("eval.dataset",))
            if self.given("eval.split"):
                self.explain("eval.split", "no effect without an eval dataset (OpenRLHF's neither)")

    def _data(self) -> None:
        key = "data.prompt_dataset" if self.rl else "data.dataset"
        if self.given(key):
            files = _split(self.eff(key))
            self.put("data.train_files", files, key)
            if any("@" in f for f in files):
                self.explain(key, "OpenRLHF's name@data_dir form is kept as written; give the folder itself instead")
        self.handled.add(key)
        probs = "data.prompt_probs" if self.rl else "data.dataset_probs"
        if self.given(probs):
            try:
                self.put("data.train_probs", [float(x) for x in _split(self.eff(probs))], probs)
            except ValueError:
                self.none(probs, UNSUPPORTED, f"not a comma-separated list of numbers: {self.eff(probs)!r}")
        self.handled.add(probs)
        if not self.rl:
            self.put("data.max_len", self.eff("data.max_len"), "data.max_len")
            if self.entry == "train_sft":
                self.put("data.packing", self.eff("ds.packing_samples"), "ds.packing_samples")
        if "ds.packing_samples" in self.defs and self.entry != "train_sft":
            # packed forwards are on by default here (trainer.packing); a command that says so is already so
            if self.given("ds.packing_samples") and schema_has("trainer.packing"):
                self.put("trainer.packing", bool(self.eff("ds.packing_samples")), "ds.packing_samples")
            self.handled.add("ds.packing_samples")
        self._token_budgets()

    def _token_budgets(self) -> None:
        """OpenRLHF's dynamic batching: micro-batches cut by a token budget per GPU for training and for the
        forwards (``rollout.max_tokens_per_gpu``, else the training one); it forces packing, as here."""
        flags = ("train.dynamic_batch_enable", "train.max_tokens_per_gpu", "rollout.max_tokens_per_gpu")
        if "train.dynamic_batch_enable" not in self.defs:
            return
        if not self.eff("train.dynamic_batch_enable") or not schema_has("trainer.max_tokens_per_micro_batch"):
            for c in flags:
                if c in self.defs and self.given(c) and c != "train.dynamic_batch_enable":
                    self.explain(c, "used only with --train.dynamic_batch_enable (off), as OpenRLHF does")
                elif c in self.defs:
                    self.handled.add(c)
            return
        budget = _positive_int(self.eff("train.max_tokens_per_gpu"))
        forward = self.eff("rollout.max_tokens_per_gpu") if "rollout.max_tokens_per_gpu" in self.defs else None
        forward_budget = budget if forward in (None, "", 0) else _positive_int(forward)
        if budget is None:
            self.none("train.max_tokens_per_gpu", UNSUPPORTED, "not a positive whole number of tokens")
            self.handled.update(flags)
            return
        self.put("trainer.packing", True, "train.dynamic_batch_enable")
        self.put("trainer.max_tokens_per_micro_batch", budget, "train.dynamic_batch_enable", "train.max_tokens_per_gpu")
        if forward_budget is None:
            self.none("rollout.max_tokens_per_gpu", UNSUPPORTED, "not a positive whole number of tokens")
        else:
            self.put("trainer.max_tokens_per_forward", forward_budget, "rollout.max_tokens_per_gpu", carry=False)
            if "trainer.max_tokens_per_forward" not in self.values:  # the forwards take the training budget
                self.put("trainer.max_tokens_per_forward", budget, "train.max_tokens_per_gpu")

    # -- RL -----------------------------------------------------------------------------------------------------------

    def _algorithm(self) -> None:
        gspo = self.eff("actor.policy_loss_type") == "gspo"
        self.put("algorithm.policy_loss.type", self.eff("actor.policy_loss_type"), "actor.policy_loss_type")
        # OpenRLHF: --actor.loss_agg_mode (0.11.2; a token mean before), except GSPO's sequence-level loss.
        agg = "seq_mean" if gspo else names.canonical_aggregation(self.eff("actor.loss_agg_mode"))
        self.put("algorithm.policy_loss.aggregation", agg, "actor.policy_loss_type", "actor.loss_agg_mode")
        if gspo and self.given("actor.loss_agg_mode"):
            self.explain("actor.loss_agg_mode", "GSPO's loss is a sequence mean whatever it says, as in OpenRLHF")
        low_high = self.eff("actor.eps_clip_low_high")
        if low_high:
            low, high = low_high
        else:
            low = high = self.eff("actor.eps_clip")
        self.put("algorithm.policy_loss.eps_clip_low", low, "actor.eps_clip", "actor.eps_clip_low_high")
        self.put("algorithm.policy_loss.eps_clip_high", high, "actor.eps_clip", "actor.eps_clip_low_high")
        if low_high and self.given("actor.eps_clip"):
            self.explain("actor.eps_clip", "--actor.eps_clip_low_high takes precedence, as in OpenRLHF")
        self.put("algorithm.kl.placement", "loss" if self.eff("algo.kl.use_loss") else "reward", "algo.kl.use_loss")
        unbiased = bool(self.eff("algo.kl.unbiased_gradient"))
        self.put(
            "algorithm.kl.unbiased_gradient",
            unbiased and bool(self.eff("algo.kl.use_loss")),
            "algo.kl.unbiased_gradient",
        )
        if unbiased and not self.eff("algo.kl.use_loss"):
            self.explain("algo.kl.unbiased_gradient", "no effect with the KL in the reward (no --algo.kl.use_loss)")
        # Before 0.11.2 the correction was a switch and a type: the same keys as the 0.11.2 flags (direct rows).
        old = ("algo.advantage.is_correction_enable", "algo.advantage.is_correction_type")
        kind = str(self.eff(old[1])).replace("-", "_")
        if self.eff(old[0]) and kind in names.IS_CORRECTION_TYPES:
            for axis, value in zip(("level", "mode", "gating"), names.IS_CORRECTION_TYPES[kind], strict=True):
                self.put(f"algorithm.is_correction.{axis}", value, *old)
        elif self.eff(old[0]):
            self.put("algorithm.is_correction.type", kind, *old)  # not a type: validation names the valid ones
        else:
            self.handled.update(old)
            if self.given(old[1]):
                self.explain(old[1], "no effect without the correction enabled")
        critic_steps = self.eff("critic.freezing_steps")
        self.put("critic.freezing_steps", max(critic_steps, 0), "critic.freezing_steps")
        if self.given("rollout.vllm_generate_batch_size"):
            if self.eff("rollout.vllm_generate_batch_size") in (None, self.eff("rollout.batch_size")):
                self.explain("rollout.vllm_generate_batch_size", "the prompts per step; nothing to carry over")
            else:
                self.none(
                    "rollout.vllm_generate_batch_size",
                    UNSUPPORTED,
                    "oversampling (generating for more prompts than are trained on)",
                )
        self.handled.add("rollout.vllm_generate_batch_size")
        if self.given("algo.advantage.gamma") and self.eff("algo.advantage.estimator") in names.GAMMA_ONE_ESTIMATORS:
            self.explain("algo.advantage.gamma", "estimators with a baseline use 1 whatever it says, as in OpenRLHF")

    def _reward_and_agent(self) -> None:
        remote, agent = self.eff("reward.remote_url"), self.eff("train.agent_func_path")
        rm = self.eff("reward.model_name_or_path")
        self.handled.update(("reward.remote_url", "train.agent_func_path", "reward.model_name_or_path"))
        self.reward_model = False
        if agent:
            self.put("agent.path", agent, "train.agent_func_path")
            executor = _agent_executor(agent)
            self.put("agent.executor", executor, "train.agent_func_path")
            if remote:
                self.none(
                    "reward.remote_url", SUPERSEDED, "the agent scores its episodes (OpenRLHF sets it to 'agent')"
                )
            if rm:
                self.none("reward.model_name_or_path", SUPERSEDED, "the agent scores its episodes; no reward model")
        elif remote:
            urls = _split(remote)
            if all(u.endswith(".py") for u in urls):
                self.put("reward.function", urls[0], "reward.remote_url")
                if len(urls) > 1:
                    self.explain("reward.remote_url", f"only the first reward file is used ({len(urls)} given)")
            else:
                self.put("reward.urls", urls, "reward.remote_url")
            if rm:
                self.none(
                    "reward.model_name_or_path",
                    SUPERSEDED,
                    "OpenRLHF builds no reward model when --reward.remote_url is given",
                )
        elif rm:
            models = _split(rm)
            self.put("reward.model_path", models[0], "reward.model_name_or_path")
            self.reward_model = True
            if len(models) > 1:
                self.explain("reward.model_name_or_path", "one reward model here: the first is used")

    def _lengths(self) -> None:
        new_tokens = self.eff("rollout.max_new_tokens")
        if self.given("data.max_len"):
            max_len = self.eff("data.max_len")
            if self.given("legacy.prompt_max_len"):
                self.put("data.max_prompt_len", self.eff("legacy.prompt_max_len"), "legacy.prompt_max_len")
        elif self.given("legacy.prompt_max_len"):
            prompt = self.eff("legacy.prompt_max_len")
            new_tokens = 1024 if new_tokens is None else new_tokens  # the old --generate_max_len default
            max_len = prompt + new_tokens  # so the prompt budget is max_len - max_new_tokens, as derived here
            self.explain(
                "legacy.prompt_max_len",
                f"prompt budget; data.max_len = prompt_max_len + generate_max_len = {max_len}",
            )
        else:
            max_len = self.eff("data.max_len")
        self.put("data.max_len", max_len, "data.max_len", "legacy.prompt_max_len")
        if new_tokens is None:
            new_tokens = max(max_len // 2, 1)
            self.notes.append(
                f"rollout.max_new_tokens={new_tokens}: OpenRLHF lets each sample generate what its prompt leaves of "
                f"data.max_len ({max_len}); here the budget is fixed, so half of it was chosen (set "
                "rollout.max_new_tokens to change it)"
            )
        self.put("rollout.max_new_tokens", new_tokens, "rollout.max_new_tokens")

    def _placement(self) -> tuple[list[tuple[list[str], int]], int, int]:
        """OpenRLHF's placement groups (section 5.2) as device groups of the roles that run."""
        present = {"policy": True, "rollout": True}
        present["reference"] = self.eff("algo.kl.init_coef") > 0
        present["critic"] = self.eff("algo.advantage.estimator") in names.CRITIC_ESTIMATORS
        present["reward"] = self.reward_model
        size = {
            role: self.eff(f"{flag}.num_nodes") * self.eff(f"{flag}.num_gpus_per_node")
            for role, flag in (("policy", "actor"), ("reference", "ref"), ("critic", "critic"), ("reward", "reward"))
        }
        tp = self.eff("vllm.tensor_parallel_size")
        engines = self.eff("vllm.num_engines")
        colocate_all, actor_ref = self.eff("train.colocate_all"), self.eff("train.colocate_actor_ref")
        critic_reward, is_async = self.eff("train.colocate_critic_reward"), self.eff("train.async_enable")
        if not engines:
            engines = max(size["policy"] // tp, 1) if colocate_all and not is_async else 1
            self.notes.append(
                f"rollout.num_engines={engines}: the command names no vLLM engines, which OpenRLHF needs for "
                "generation; set rollout.num_engines to change it"
            )
        trainers = ["policy", "reference", "critic", "reward"]
        if colocate_all and not is_async:
            raw = [(trainers + ["rollout"], size["policy"])]
        elif colocate_all:
            raw = [(trainers, size["policy"]), (["rollout"], engines * tp)]
        else:
            raw = [(["policy", "reference"], size["policy"])] if actor_ref else [(["policy"], size["policy"])]
            if not actor_ref:
                raw.append((["reference"], size["reference"]))
            raw += (
                [(["critic", "reward"], size["critic"])]
                if critic_reward
                else [
                    (["critic"], size["critic"]),
                    (["reward"], size["reward"]),
                ]
            )
            raw.append((["rollout"], engines * tp))
        groups = [([r for r in g if present[r]], n) for g, n in raw]
        groups = [(g, n) for g, n in groups if g]
        per_node = max([self.eff(f"{flag}.num_gpus_per_node") for role, flag in _ROLE_FLAGS if present[role]] + [tp])
        total = sum(n for _, n in groups)
        nodes = max(math.ceil(total / per_node), 1)
        summary = ", ".join(f"{'+'.join(g)} on {n}" for g, n in groups)
        for role, flag in _ROLE_FLAGS:
            for c in (f"{flag}.num_nodes", f"{flag}.num_gpus_per_node"):
                if present[role]:
                    self.explain(c, f"placement: {summary}")
                    self.handled.add(c)
                else:
                    why = {
                        "reference": "no reference model: the KL coefficient is 0",
                        "critic": f"no critic: {self.eff('algo.advantage.estimator')} needs none",
                        "reward": "no reward model: rewards come from the reward function, URL or agent",
                    }[role]
                    self.none(c, NOT_NEEDED, f"{why} (OpenRLHF does not start it either)")
        for c in ("train.colocate_all", "train.colocate_actor_ref", "train.colocate_critic_reward"):
            self.explain(c, f"placement: {summary}")
        self.put("rollout.num_engines", engines, "vllm.num_engines")
        self.put("rollout.tensor_parallel_size", tp, "vllm.tensor_parallel_size")
        self.put("rollout.async_mode", bool(is_async), "train.async_enable")
        sleep = bool(self.eff("vllm.enable_sleep") or self.eff("ds.enable_sleep")) and colocate_all and not is_async
        self.put("rollout.enable_sleep", sleep, "vllm.enable_sleep", "ds.enable_sleep")
        for c in ("vllm.enable_sleep", "ds.enable_sleep"):
            if self.eff(c) and not sleep:
                self.explain(c, "OpenRLHF turns it off without --colocate_all_models (or with async); so here")
        if self.given("ds.enable_sleep"):
            self.explain("ds.enable_sleep", "one switch here offloads the training states and sleeps the engines")
        if colocate_all and not is_async and engines * tp != size["policy"]:
            self.notes.append(
                f"OpenRLHF requires actor GPUs ({size['policy']}) = vLLM engines x TP ({engines} x {tp}) under "
                "--colocate_all_models; the converted recipe keeps both, and validation reports the mismatch"
            )
        return groups, nodes, per_node

    # -- SFT, RM, DPO -------------------------------------------------------------------------------------------------

    def _supervised_algorithm(self) -> None:
        if self.entry == "train_rm":
            loss = self.eff("model.loss_type")
            self.put("algorithm.rm.loss", "sigmoid" if loss == "sigmoid" else "logexp", "model.loss_type")
            if loss not in ("sigmoid", "logexp"):
                self.explain("model.loss_type", "OpenRLHF uses LogExp for anything but sigmoid")
            if self.eff("model.margin_loss_enable"):
                self.put("algorithm.rm.use_margin", True, "model.margin_loss_enable")
                self.put("data.margin_key", "margin", "model.margin_loss_enable")
            self.handled.add("model.margin_loss_enable")
        if self.entry == "train_dpo":
            self.put("algorithm.preference.loss", "ipo" if self.eff("model.ipo_enable") else "dpo", "model.ipo_enable")
            if self.eff("model.ipo_enable") and self.given("model.label_smoothing"):
                self.explain("model.label_smoothing", "IPO ignores it, in OpenRLHF too")
        for c in ("ds.enable_sleep",):
            self.handled.add(c)

    def _supervised_devices(self) -> tuple[list[tuple[list[str], int]], int, int]:
        nodes, per_node = launcher_devices(self.cmd.launcher)
        if nodes is None or per_node is None:
            self.notes.append(
                f"devices: the launcher does not say how many GPUs; {nodes or 1} node(s) x {per_node or 8} assumed "
                "(deepspeed uses every GPU of the node; pass --hardware to choose)"
            )
        nodes, per_node = nodes or 1, per_node or 8
        roles = ["policy", "reference"] if self.entry == "train_dpo" else ["policy"]
        return [(roles, nodes * per_node)], nodes, per_node


_ROLE_FLAGS = (("policy", "actor"), ("reference", "ref"), ("critic", "critic"), ("reward", "reward"))


def _split(value: Any) -> list[str]:
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _agent_executor(path: str) -> str:
    """multi_turn for OpenRLHF's AgentExecutor/AgentInstance files; openai for a bare run_agent file."""
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError:
        return "multi_turn"
    has_class = "class AgentExecutor" in text or "class AgentInstance" in text
    return "openai" if not has_class and "def run_agent" in text else "multi_turn"


def map_command(cmd: Command, hardware_type: str = "h100") -> Mapping:
    """Every flag of ``cmd`` -> our keys (before choosing presets), with an outcome per flag."""
    return _Mapper(cmd, hardware_type).run()


def _positive_int(value: Any) -> int | None:
    """A token budget as OpenRLHF reads it (an int flag), or None for a value that is not one (never raises)."""
    try:
        n = int(str(value))
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None

"""veRL's settings -> our config keys, with what became of every override.

As for OpenRLHF, the semantics are carried, not the names: a key the command leaves out means veRL's default
(rlhf.importers.verl.vocab), so that default is carried where ours differs (rollout TP 2, gpu_memory 0.5,
AdamW betas (0.9, 0.999) and weight decay 0.01, dual-clip c = 3, gradient checkpointing on, ...).

Batch vocabulary (veRL -> ours; the derived values are equal, tests/importers pins them):
    data.train_batch_size (prompts per step)             -> rollout.prompts_per_step
    actor_rollout_ref.rollout.n                          -> rollout.samples_per_prompt
    actor.ppo_mini_batch_size (prompts per optimizer step) x n -> trainer.global_batch (samples per optimizer step)
    actor.ppo_micro_batch_size_per_gpu (samples)         -> trainer.micro_batch_per_device
    actor.ppo_epochs                                     -> trainer.epochs_per_rollout
so optimizer steps per RL step = train_batch_size / ppo_mini_batch_size x ppo_epochs and gradient accumulation =
ppo_mini_batch_size x n / data-parallel ranks / micro batch, as veRL's trainer computes them (ray_trainer.py
``_update_actor``: the mini-batch is multiplied by rollout.n, then split over the data-parallel ranks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlhf.importers.common import launcher_devices
from rlhf.importers.outcomes import Outcome, OutcomeBook
from rlhf.importers.recipe import schema_allows, schema_has
from rlhf.importers.verl import vocab
from rlhf.importers.verl.overrides import Command
from rlhf.spec import names

UNSUPPORTED, GPU_ONLY, SUPERSEDED, NOT_NEEDED = vocab.UNSUPPORTED, vocab.GPU_ONLY, vocab.SUPERSEDED, vocab.NOT_NEEDED
COMING = "coming"
# veRL's default scorer by its import path (rlhf.rewards.loader runs our copy of it when veRL is not installed)
VERL_DEFAULT_SCORER = "verl.utils.reward_score.default_compute_score"

_ARA = "actor_rollout_ref"
_ACTOR, _ROLLOUT, _REF, _MODEL = f"{_ARA}.actor", f"{_ARA}.rollout", f"{_ARA}.ref", f"{_ARA}.model"


def verl_steps_per_rollout(train_batch_size: int, ppo_mini_batch_size: int, ppo_epochs: int) -> int:
    """Optimizer steps per RL step in veRL: the rollout batch is cut into mini-batches of ppo_mini_batch_size
    prompts (x rollout.n samples), each one optimizer step, ppo_epochs times."""
    return train_batch_size // ppo_mini_batch_size * ppo_epochs


def verl_grad_accum(ppo_mini_batch_size: int, n: int, data_parallel: int, micro_per_gpu: int) -> int:
    """Micro-batches per optimizer step on each rank in veRL: mini x n samples over the ranks, micro per pass."""
    return ppo_mini_batch_size * n // data_parallel // micro_per_gpu


#: veRL's epsilon on the group std (core_algos.compute_grpo_outcome_advantage's default).
VERL_GROUP_STD_EPS = 1e-6
# veRL's estimator -> ours, where the arithmetic is the same (rlhf.algo.advantages; veRL's core_algos.py).
ESTIMATORS = {
    "gae": "gae",
    "grpo": "group_norm",
    "grpo_vectorized": "group_norm",
    "rloo": "rloo",
    "rloo_vectorized": "rloo",
    "reinforce_plus_plus": "reinforce",  # discounted returns, KL in the reward, whitened over the batch
    "reinforce_plus_plus_baseline": "reinforce_baseline",  # group mean subtracted, then whitened over the batch
    "gpg": "gpg",  # group mean subtracted, scaled by batch size / non-zero scores
    "opo": "opo",  # the group's length-weighted mean subtracted
    "grpo_passk": "grpo_passk",  # only the best of each group: (best - second) / (std + epsilon)
    "remax": "remax",  # the reward of a greedy response to the prompt subtracted
}
# Estimators with no equivalent here: why, and the closest one the recipe uses instead.
OTHER_ESTIMATORS = {
    "optimal_token_baseline": ("the optimal token baseline", "reinforce_baseline"),
    "tir_optimal_token_baseline": ("the tool-integrated optimal token baseline", "reinforce_baseline"),
    "gdpo": ("GDPO (grouped decoupled rewards)", "group_norm"),
}
POLICY_LOSSES = {
    "vanilla": "ppo",
    "gspo": "gspo",
    "cispo": "cispo",
    "gpg": "gpg",
    "sapo": "sapo",
    "geo_mean": "geo_mean",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
}
OTHER_POLICY_LOSSES = {
    "dppo_tv": "DPPO (total-variation trust region)",
    "dppo_kl": "DPPO (KL trust region)",
    "dro": "DRO",
    "bypass_mode": "the rollout-correction bypass mode",
}
# veRL's policy losses that aggregate by seq-mean-token-mean (sapo) or a mean over sequences (geo_mean) whatever
# loss_agg_mode says: seq_mean here.
SEQUENCE_MEAN_LOSSES = ("sapo", "geo_mean")
# veRL's KL estimator names (core_algos.kl_penalty) -> ours.
KL = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3", "abs": "abs"}
AGGREGATIONS = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
    "token-sum": "token_sum",
}
TRACKERS = {"console": "console", "wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow"}
# Keys whose value is a path or a name: an unresolved one stands in as written (it still says what it is).
_TEXT_KEYS = {
    "data.train_files",
    "data.val_files",
    f"{_MODEL}.path",
    "model.partial_pretrain",
    "model.path",
    "critic.model.path",
    "reward_model.model.path",
    "custom_reward_function.path",
    "trainer.default_local_dir",
    "trainer.project_name",
    "trainer.experiment_name",
    "trainer.resume_from_path",
    f"{_MODEL}.tokenizer_path",
    f"{_MODEL}.custom_chat_template",
}


@dataclass
class Mapping:
    entry: str
    values: dict[str, Any]
    carried: dict[str, str]  # key -> the veRL keys whose defaults it carries
    outcomes: list[Outcome]
    notes: list[str]
    model_path: str
    groups: list[tuple[list[str], int]]
    nodes: int
    devices_per_node: int
    unknown: dict[str, tuple] = field(default_factory=dict)  # key -> (written, pieces[, why])
    rollout_backend: str = "vllm"
    model_key: str = ""  # the veRL key naming the policy model
    differs: dict[str, str] = field(default_factory=dict)  # veRL key -> how our math differs under what it wrote

    @property
    def family(self) -> str:
        return vocab.FAMILY[self.entry]


def _optional(key: str) -> bool:
    """Whether our ``key`` takes null (``int | None``): a null for any other would not compose."""
    from rlhf.spec.keys import find_key
    from rlhf.spec.schema import ExperimentSpec

    info = find_key(ExperimentSpec, key)
    return info is None or "None" in info.type


class _Mapper(OutcomeBook):
    def __init__(self, cmd: Command, hardware_type: str) -> None:
        self.cmd = cmd
        self.entry = cmd.entry
        self.rl = cmd.entry == "main_ppo"
        self.defaults = vocab.DEFAULTS[cmd.entry]
        self.cpu = hardware_type == "cpu"
        self.outcomes = [Outcome() for _ in cmd.overrides]
        self.setting: dict[str, Any] = {}
        self.by: dict[str, int] = {}
        for i, o in enumerate(cmd.overrides):
            if not o.key or o.problem or o.prefix == "~":
                continue
            if o.key in self.by:
                self.outcomes[self.by[o.key]].overridden_by = o.text
            self.setting[o.key] = o.value
            self.by[o.key] = i
        self.unknown_k = {k: i for k, i in self.by.items() if cmd.overrides[i].unknown}
        self.values: dict[str, Any] = {}
        self.carried: dict[str, str] = {}
        self.notes: list[str] = []
        self.handled: set[str] = set()
        self.unknown: dict[str, tuple] = {}
        self.differs: dict[str, str] = {}

    # -- helpers ----------------------------------------------------------------------------------------------------

    def given(self, k: str) -> bool:
        return k in self.setting

    def eff(self, k: str, kind: type | tuple[type, ...] | None = None) -> Any:
        """The value veRL runs with: the command's, else veRL's default; checked against ``kind``."""
        default = self.defaults.get(k)
        if k not in self.setting:
            return default
        if k in self.unknown_k:
            raw = self.setting[k]
            return raw if k in _TEXT_KEYS else default
        v = self.setting[k]
        kind = kind or (type(default) if default is not None else None)
        if kind is None or v is None:
            return v
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(v, bool) and bool not in kinds:
            ok = False
        else:
            ok = isinstance(v, kinds)
        if not ok:
            o = self._outcome(k)
            if o is not None and not o.problem:
                names_ = "/".join(t.__name__ for t in kinds)
                o.problem = f"takes {'an' if names_[0] in 'aeiou' else 'a'} {names_}, got {v!r}; veRL's default used"
            return default
        return v

    def put(self, key: str, value: Any, *ks: str, carry: bool = True) -> None:
        """Our ``key`` = ``value``, from veRL's keys ``ks`` (given, or when ``carry`` their defaults)."""
        self.handled.update(ks)
        given = [k for k in ks if self.given(k)]
        if not given and not carry:
            return
        if value is None and not _optional(key):  # a malformed value fell back to a null default: ours stands
            return
        self.values[key] = value
        unknown = [k for k in given if k in self.unknown_k]
        if unknown:
            o = self.cmd.overrides[self.unknown_k[unknown[0]]]
            self.unknown[key] = (" ".join(self.cmd.overrides[self.unknown_k[k]].text for k in unknown), o.unknown)
        for k in given:
            o = self._outcome(k)
            if key not in o.keys:
                o.keys.append(key)
        if not given and ks:
            self.carried[key] = ", ".join(ks)

    def need(self, key: str, stand_in: Any, written: str, why: str, by: str = "") -> None:
        """A value the recipe needs and no veRL key can give (it would mean something else here): ``???``; ``by``:
        the veRL key whose line in the report says so."""
        self.values[key] = stand_in
        self.unknown[key] = (written, (), why)
        o = self._outcome(by) if by else None
        if o is not None and key not in o.keys:
            o.keys.append(key)
        self.handled.add(by)

    def differ(self, k: str, how: str) -> None:
        """What ``k`` wrote computes something else than veRL does, in the way ``how`` says (the report's ``~>``)."""
        self.handled.add(k)
        self.differs[k] = f"{self.differs[k]}; {how}" if k in self.differs else how

    def coming(self, k: str, key: str, value: Any, meanwhile: str) -> None:
        """``key`` is not in this version's schema yet (another change adds it): say what it will be."""
        self.none(k, COMING, f"{key}={value} once that key exists here; meanwhile {meanwhile}")

    # -- the whole mapping ------------------------------------------------------------------------------------------

    def run(self) -> Mapping:
        if self.rl:
            self._algorithm()
            self._kl()
            self._batches()
            self._policy_loss()
            self._correction()
            self._rollout()
            self._reward()
            self._data_rl()
        else:
            self._sft()
        self._optimizer()
        self._engine()
        self._model()
        self._trainer()
        self._logging()
        nodes, per_node = self._hardware()
        groups = self._placement(nodes * per_node) if self.rl else [(["policy"], nodes * per_node)]
        self._config_flags()
        model_key = (
            f"{_MODEL}.path" if self.rl else ("model.partial_pretrain" if self.entry != "sft_trainer" else "model.path")
        )
        model_path = str(self.eff(model_key, str) or "")
        if model_key in self.unknown_k:
            o = self.cmd.overrides[self.unknown_k[model_key]]
            self.unknown["model.path"] = (o.text, o.unknown)
        self.explain(model_key, "model: the closest conf/model option (rlhf.importers.recipe.choose_model)")
        if not self.given(model_key):
            self.notes.append(f"model: the command does not set {model_key}; veRL's default {model_path} is carried")
        for i, o in enumerate(self.cmd.overrides):
            out = self.outcomes[i]
            if o.key in self.handled and not (out.keys or out.none or out.note or out.problem or o.problem):
                out.note = "read by veRL only with settings this command does not use; no effect here either"
            if not o.key or o.problem or out.problem or o.prefix == "~" or o.key in self.handled or out.overridden_by:
                continue
            why = vocab.no_equivalent(o.key)
            if why is not None:
                self.none(o.key, *why)
            elif vocab.is_verl_section(o.key):
                self.none(o.key, UNSUPPORTED, "a veRL setting with no equivalent here")
            else:
                out.problem = "not a key of veRL's trainer config"
        return Mapping(
            self.entry,
            self.values,
            self.carried,
            self.outcomes,
            self.notes,
            model_path,
            groups,
            nodes,
            per_node,
            self.unknown,
            getattr(self, "backend", "vllm"),
            model_key,
            self.differs,
        )

    # -- RL: algorithm ----------------------------------------------------------------------------------------------

    def _algorithm(self) -> None:
        k = "algorithm.adv_estimator"
        est = self.eff(k, str)
        if est in ESTIMATORS:
            ours = ESTIMATORS[est]
            if ours == "group_norm" and self.eff("algorithm.norm_adv_by_std_in_grpo", bool) is False:
                ours = "dr_grpo"
                self.explain("algorithm.norm_adv_by_std_in_grpo", "GRPO without dividing by the std: dr_grpo here")
            self.put("algorithm.advantage.estimator", ours, k)
            if ours in ("group_norm", "grpo_passk"):
                # veRL's compute_grpo(_passk)_outcome_advantage: ... / (std + epsilon), epsilon 1e-6
                self.put("algorithm.advantage.std_eps", VERL_GROUP_STD_EPS, k)
            if ours == "grpo_passk" and self.eff("algorithm.norm_adv_by_std_in_grpo", bool) is False:
                self.differ(
                    "algorithm.norm_adv_by_std_in_grpo",
                    "grpo_passk divides the best sample's gap by the group std here whatever it says",
                )
            if ESTIMATORS[est] in ("gae", "reinforce", "reinforce_baseline"):
                # veRL's masked_whiten divides by the unbiased (N/(N-1)) variance
                self.put("algorithm.advantage.whiten_variance", "unbiased", k)
            if ESTIMATORS[est] in ("gae", "reinforce"):
                # veRL's GAE and REINFORCE++ returns step over masked tokens inside a response (multi-turn)
                self.put("algorithm.advantage.skip_masked_tokens", True, k)
        else:
            what, closest = OTHER_ESTIMATORS.get(est, (f"{est!r}", "group_norm"))
            self.put("algorithm.advantage.estimator", closest, k)
            self.none(k, UNSUPPORTED, f"{what}; the recipe uses {closest}, the closest estimator here")
        self.handled.add("algorithm.norm_adv_by_std_in_grpo")
        self.put("algorithm.advantage.gamma", self.eff("algorithm.gamma", float), "algorithm.gamma")
        self.put("algorithm.advantage.lambd", self.eff("algorithm.lam", float), "algorithm.lam")
        if self.given("algorithm.gamma") and self.values["algorithm.advantage.estimator"] in names.GROUP_ESTIMATORS:
            self.explain("algorithm.gamma", "group estimators use 1 whatever it says, in veRL too")
        # veRL whitens REINFORCE++ advantages over the batch; GRPO divides by the group's std (no_std_norm: ours).
        filt = self.eff("algorithm.filter_groups.enable", bool)
        self.put("algorithm.filters.dynamic_filtering", bool(filt), "algorithm.filter_groups.enable")
        if filt:
            self.explain(
                "algorithm.filter_groups.enable",
                "DAPO's dynamic sampling: groups whose samples all score alike are dropped and refilled",
            )
            rounds = self.eff("algorithm.filter_groups.max_num_gen_batches", int)
            if rounds and rounds > 0:
                self.put("algorithm.filters.max_refill_rounds", rounds, "algorithm.filter_groups.max_num_gen_batches")
            else:
                self.explain("algorithm.filter_groups.max_num_gen_batches", "0 (no limit) in veRL; a limit here")
        self.handled.update(("algorithm.filter_groups.metric", "algorithm.filter_groups.max_num_gen_batches"))
        if self.given("algorithm.filter_groups.metric"):
            self.explain("algorithm.filter_groups.metric", "the groups' reward decides here (acc and score alike)")

    def _kl(self) -> None:
        loss, in_reward = self.eff(f"{_ACTOR}.use_kl_loss", bool), self.eff("algorithm.use_kl_in_reward", bool)
        kinds = (f"{_ACTOR}.kl_loss_type", "algorithm.kl_penalty")
        self.handled.update(
            (
                f"{_ACTOR}.use_kl_loss",
                "algorithm.use_kl_in_reward",
                f"{_ACTOR}.kl_loss_coef",
                "algorithm.kl_ctrl.kl_coef",
            )
            + kinds
            + ("algorithm.kl_ctrl.type", "algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.horizon")
        )
        if loss:
            coef, kind_key, coef_key = self.eff(f"{_ACTOR}.kl_loss_coef", float), kinds[0], f"{_ACTOR}.kl_loss_coef"
            self.put("algorithm.kl.placement", "loss", f"{_ACTOR}.use_kl_loss")
        elif in_reward:
            coef, kind_key, coef_key = (
                self.eff("algorithm.kl_ctrl.kl_coef", float),
                kinds[1],
                "algorithm.kl_ctrl.kl_coef",
            )
            self.put("algorithm.kl.placement", "reward", "algorithm.use_kl_in_reward")
            if self.eff("algorithm.kl_ctrl.type", str) == "adaptive":
                self.put(
                    "algorithm.kl.target", self.eff("algorithm.kl_ctrl.target_kl", float), "algorithm.kl_ctrl.type"
                )
                # veRL's apply_kl_penalty feeds the controller the mean of the sequences' token means
                self.put("algorithm.kl.controller_kl", "seq_mean", "algorithm.kl_ctrl.type")
                self.put(
                    "algorithm.kl.horizon", self.eff("algorithm.kl_ctrl.horizon", int), "algorithm.kl_ctrl.horizon"
                )
        else:
            self.put("algorithm.kl.coef", 0.0, f"{_ACTOR}.use_kl_loss", "algorithm.use_kl_in_reward")
            for k in (f"{_ACTOR}.kl_loss_coef", "algorithm.kl_ctrl.kl_coef", *kinds):
                if self.given(k):
                    self.explain(k, "no effect: veRL uses no KL (neither use_kl_loss nor use_kl_in_reward)")
            return
        self.put("algorithm.kl.coef", coef, coef_key, f"{_ACTOR}.use_kl_loss" if loss else "algorithm.use_kl_in_reward")
        if in_reward and not loss and self.values.get("algorithm.advantage.estimator") in names.GROUP_ESTIMATORS:
            # veRL takes the sequence's summed KL off the score before the group baseline (apply_kl_penalty, then
            # the estimator sums the token rewards).
            self.put("algorithm.kl.before_baseline", True, "algorithm.use_kl_in_reward")
        other = "algorithm.use_kl_in_reward" if loss else f"{_ACTOR}.use_kl_loss"
        if self.given(other) and not self.eff(other, bool):
            self.explain(other, f"off: the KL is in the {'loss' if loss else 'reward'}")
        kind = str(self.eff(kind_key, str))
        straight = kind.endswith("+")
        base = kind[:-1] if straight else kind
        if base in KL:
            self.put("algorithm.kl.estimator", KL[base], kind_key)
            if base in ("low_var_kl", "k3"):
                self.explain(kind_key, "k3; veRL clamps each token's value to [-10, 10]")
            if straight and loss and KL[base] != "k2":
                # veRL's kl_penalty: the estimator's value, k2's gradient (no importance weight)
                self.put("algorithm.kl.straight_through", True, kind_key)
            elif straight:
                self.explain(kind_key, "'+' changes only a KL loss's gradient: no effect here, nor in veRL")
            if KL[base] in ("k1", "k2", "abs"):
                # veRL clamps k3 alone
                self.put("algorithm.kl.clamp_k3_only", True, kind_key)
        else:
            self.none(kind_key, UNSUPPORTED, f"the {kind} KL estimator; one of {', '.join(sorted(set(KL)))}")
        if loss and in_reward:
            self.differ("algorithm.use_kl_in_reward", "veRL applies both; here the KL is in one place: the loss")

    def _batches(self) -> None:
        mini_k, micro_k, n_k = (
            f"{_ACTOR}.ppo_mini_batch_size",
            f"{_ACTOR}.ppo_micro_batch_size_per_gpu",
            f"{_ROLLOUT}.n",
        )
        n = self.eff(n_k, int)
        self.put("rollout.prompts_per_step", self.eff("data.train_batch_size", int), "data.train_batch_size")
        self.put("rollout.samples_per_prompt", n, n_k)
        mini = self.eff(mini_k, int)
        self.put("trainer.global_batch", mini * n, mini_k, n_k)
        self.explain(mini_k, f"prompts per optimizer step x rollout.n ({n}) = samples per optimizer step")
        micro = self.eff(micro_k, int)
        if micro is None and self.given(f"{_ACTOR}.ppo_micro_batch_size"):
            total = self.eff(f"{_ACTOR}.ppo_micro_batch_size", int)
            world = self.eff("trainer.nnodes", int) * self.eff("trainer.n_gpus_per_node", int)
            micro = max(total // max(world, 1), 1) if isinstance(total, int) else None
            if micro is not None:
                self.put("trainer.micro_batch_per_device", micro, f"{_ACTOR}.ppo_micro_batch_size")
                self.explain(f"{_ACTOR}.ppo_micro_batch_size", f"a global micro batch: {total} / {world} ranks")
        elif micro is not None:
            self.put("trainer.micro_batch_per_device", micro, micro_k)
        if micro is None:
            dynamic = self.eff(f"{_ACTOR}.use_dynamic_bsz", bool)
            self.values["trainer.micro_batch_per_device"] = 1
            self.notes.append(
                "trainer.micro_batch_per_device=1: the command sets no ppo_micro_batch_size_per_gpu"
                + (" (veRL packs micro-batches by tokens: use_dynamic_bsz)" if dynamic else " (veRL requires one)")
            )
        self.handled.add(f"{_ACTOR}.ppo_micro_batch_size")
        self.put("trainer.epochs_per_rollout", self.eff(f"{_ACTOR}.ppo_epochs", int), f"{_ACTOR}.ppo_epochs")
        for k in (f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu", f"{_REF}.log_prob_micro_batch_size_per_gpu"):
            if self.given(k) and isinstance(self.eff(k, int), int):
                self.put("rollout.micro_batch_per_device", self.eff(k, int), k)
                break
        for k in (f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu", f"{_REF}.log_prob_micro_batch_size_per_gpu"):
            if self.given(k) and "rollout.micro_batch_per_device" in self._outcome(k).keys:
                continue
            if self.given(k):
                self.explain(k, "one forward micro-batch here for log-probs, values and rewards: the first one given")
        self.handled.update(
            (f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu", f"{_REF}.log_prob_micro_batch_size_per_gpu")
        )
        cmicro = "critic.ppo_micro_batch_size_per_gpu"
        if self.given(cmicro):
            if self.eff(cmicro, int) == self.values.get("trainer.micro_batch_per_device"):
                self.explain(cmicro, "the policy's too: trainer.micro_batch_per_device is shared here")
            else:
                self.none(cmicro, UNSUPPORTED, "a critic micro batch of its own; shared here, the policy's is kept")
        cmini = "critic.ppo_mini_batch_size"
        if self.given(cmini) and self.eff(cmini, int) != mini:
            self.none(cmini, UNSUPPORTED, "a critic mini-batch of its own; trainer.global_batch is shared here")
        self.handled.update((cmicro, cmini))
        self._token_budgets()

    def _token_budgets(self) -> None:
        """veRL's dynamic batch size: micro-batches cut by a token budget per GPU, for the policy's updates
        (``actor.ppo_max_token_len_per_gpu``) and for the log-prob passes (``rollout``/``ref``
        ``log_prob_max_token_len_per_gpu``, which default to the actor's switch and budget). One budget for the
        updates and one for the passes without gradients here: trainer.max_tokens_per_micro_batch and
        trainer.max_tokens_per_forward, shared by every role. Budgets are packed tokens, as veRL's are."""
        dyn_k, budget_k = f"{_ACTOR}.use_dynamic_bsz", f"{_ACTOR}.ppo_max_token_len_per_gpu"
        dynamic = bool(self.eff(dyn_k, bool))
        budget = self.eff(budget_k, int)
        if dynamic and isinstance(budget, int) and budget > 0:
            self.put("trainer.packing", True, dyn_k)
            self.put("trainer.max_tokens_per_micro_batch", budget, dyn_k, budget_k)
        elif dynamic:
            self.none(budget_k, UNSUPPORTED, "not a positive whole number of tokens; micro-batches by samples here")
        else:
            if self.given(dyn_k):
                self.explain(dyn_k, "off, as here")
            if self.given(budget_k):
                self.explain(budget_k, "used only with use_dynamic_bsz=true (off), as veRL does")
        self.handled.update((dyn_k, budget_k))
        passes = []  # (switch key, budget key) of each log-prob pass veRL makes with a token budget
        for role in (_ROLLOUT, _REF):
            pdyn_k, pbudget_k = f"{role}.log_prob_use_dynamic_bsz", f"{role}.log_prob_max_token_len_per_gpu"
            on = self.eff(pdyn_k, bool) if self.given(pdyn_k) else dynamic
            if on:
                passes.append((pdyn_k, pbudget_k))
            elif self.given(pbudget_k):
                self.explain(pbudget_k, "used only with log_prob_use_dynamic_bsz=true (off), as veRL does")
            if self.given(pdyn_k) and not on:
                self.explain(pdyn_k, "off, as here")
            self.handled.update((pdyn_k, pbudget_k))
        chosen = None
        for pdyn_k, pbudget_k in passes:
            value = self.eff(pbudget_k, int) if self.given(pbudget_k) else budget
            if not isinstance(value, int) or value <= 0:
                self.none(pbudget_k, UNSUPPORTED, "not a positive whole number of tokens")
            elif chosen is None:
                chosen = value
                self.put("trainer.packing", True, pdyn_k)
                self.put("trainer.max_tokens_per_forward", value, pdyn_k, pbudget_k)
            elif value != chosen:
                self.none(pbudget_k, UNSUPPORTED, f"a budget of its own; one forward budget here ({chosen}), kept")
            elif self.given(pbudget_k):
                self.explain(pbudget_k, "the same budget, shared: trainer.max_tokens_per_forward")
        self._critic_budgets(dynamic, budget)

    def _critic_budgets(self, dynamic: bool, budget: Any) -> None:
        """The critic's budgets (``critic.use_dynamic_bsz`` defaults to the actor's): shared with the policy here."""
        dyn_k = "critic.use_dynamic_bsz"
        keys = (dyn_k, "critic.ppo_max_token_len_per_gpu", "critic.forward_max_token_len_per_gpu")
        on = self.eff(dyn_k, bool) if self.given(dyn_k) else dynamic
        shared = {"critic.ppo_max_token_len_per_gpu": "trainer.max_tokens_per_micro_batch"}
        shared["critic.forward_max_token_len_per_gpu"] = "trainer.max_tokens_per_forward"
        for k in keys[1:]:
            if not self.given(k):
                continue
            ours = self.values.get(shared[k])
            if not on:
                self.explain(k, "used only with critic.use_dynamic_bsz=true (off), as veRL does")
            elif self.eff(k, int) == ours:
                self.explain(k, f"the policy's too: {shared[k]} is shared here")
            else:
                self.none(k, UNSUPPORTED, f"a critic budget of its own; {shared[k]} is shared here, the policy's kept")
        if self.given(dyn_k) and bool(on) != dynamic:
            self.none(dyn_k, UNSUPPORTED, "the critic's own switch; token budgets are shared here, the policy's kept")
        self.handled.update(keys)

    def _policy_loss(self) -> None:
        k = f"{_ACTOR}.policy_loss.loss_mode"
        mode = self.eff(k, str)
        if mode in POLICY_LOSSES:
            self.put("algorithm.policy_loss.type", POLICY_LOSSES[mode], k)
            if mode == "gspo":
                # veRL's GSPO is GSPO-token: aggregated by loss_agg_mode, each token's loss times its rollout IS
                # weight, no dual clip (below).
                self.put("algorithm.policy_loss.seq_ratio_aggregation", "configured", k)
                self.put("algorithm.policy_loss.seq_ratio_is_correction", "token_weights", k)
                self.put("algorithm.policy_loss.seq_ratio_gradient", "token", k)
        else:
            self.put("algorithm.policy_loss.type", "ppo", k)
            self.none(k, UNSUPPORTED, f"{OTHER_POLICY_LOSSES.get(mode, repr(mode))}; the recipe uses the PPO clip loss")
        self._loss_settings(mode)
        clip_k = f"{_ACTOR}.clip_ratio"
        clip = self.eff(clip_k, float)
        low = self.eff(f"{_ACTOR}.clip_ratio_low", float)
        high = self.eff(f"{_ACTOR}.clip_ratio_high", float)
        # veRL 0.9.1 falls back to clip_ratio only for a null bound; its yaml sets both bounds to 0.2.
        self.put("algorithm.policy_loss.eps_clip_low", clip if low is None else low, f"{_ACTOR}.clip_ratio_low")
        self.put("algorithm.policy_loss.eps_clip_high", clip if high is None else high, f"{_ACTOR}.clip_ratio_high")
        self.handled.add(clip_k)
        if self.given(clip_k) and low is not None and high is not None:
            self.explain(clip_k, "no effect in veRL 0.9.1: clip_ratio_low and clip_ratio_high (0.2 by default) win")
        c_k = f"{_ACTOR}.clip_ratio_c"
        if POLICY_LOSSES.get(mode) in names.NO_DUAL_CLIP_LOSSES or mode == "gspo":
            self.handled.add(c_k)
            if self.given(c_k):
                why = "it applies no dual clip" if mode == "gspo" else "no clipped surrogate to bound"
                self.explain(c_k, f"not read by veRL's {mode} loss ({why}), nor here")
        else:
            # veRL's vanilla loss always applies dual-clip PPO (c = clip_ratio_c, 3 by default) to negative advantages.
            self.put("algorithm.policy_loss.dual_clip", self.eff(c_k, float), c_k)
        agg_k = f"{_ACTOR}.loss_agg_mode"
        agg = self.eff(agg_k, str)
        if mode in SEQUENCE_MEAN_LOSSES:
            # veRL's sapo and geo_mean losses ignore loss_agg_mode (its KL-loss and entropy terms do not).
            self.put("algorithm.policy_loss.aggregation", "seq_mean", agg_k)
            self.explain(agg_k, f"veRL's {mode} loss is a mean over sequences whatever it says, as seq_mean here")
            if agg not in ("token-mean", "seq-mean-token-mean") and (
                self.eff(f"{_ACTOR}.use_kl_loss", bool) or self.eff(f"{_ACTOR}.entropy_coeff", float)
            ):
                self.differ(agg_k, f"the KL-loss and entropy terms aggregate by seq_mean here, by {agg} in veRL")
        elif agg in AGGREGATIONS:
            self.put("algorithm.policy_loss.aggregation", AGGREGATIONS[agg], agg_k)
        else:
            self.none(agg_k, UNSUPPORTED, f"{agg}; one of {', '.join(AGGREGATIONS)}")
        scale = self.eff(f"{_ACTOR}.loss_scale_factor", int)
        if scale is not None:
            self.put("algorithm.policy_loss.aggregation_norm", scale, f"{_ACTOR}.loss_scale_factor")
        elif agg == "seq-mean-token-sum-norm":
            # veRL pads each micro-batch to its longest response and divides by that width.
            self.put("algorithm.policy_loss.aggregation_norm_from", "micro_batch_width", agg_k)
        self.handled.add(f"{_ACTOR}.loss_scale_factor")
        if agg != "token-mean" and agg in AGGREGATIONS and mode not in SEQUENCE_MEAN_LOSSES:
            # veRL's actor aggregates its KL-loss and entropy terms with loss_agg_mode too.
            self.put("algorithm.policy_loss.terms_aggregation", "policy", agg_k)
        self._critic_aggregation(agg)
        ent = self.eff(f"{_ACTOR}.entropy_coeff", float)
        if ent:
            self.put("algorithm.policy_loss.entropy_coef", ent, f"{_ACTOR}.entropy_coeff")
            temp = self.eff(f"{_ROLLOUT}.temperature", float)
            if temp not in (None, 1.0):
                self.differ(f"{_ACTOR}.entropy_coeff", "entropy of the untempered logits here, the tempered in veRL")
        elif self.given(f"{_ACTOR}.entropy_coeff"):
            self.explain(f"{_ACTOR}.entropy_coeff", "0: no entropy bonus, as here")
        self.handled.add(f"{_ACTOR}.entropy_coeff")
        sp = self.eff(f"{_ACTOR}.ulysses_sequence_parallel_size", int)
        if sp and sp > 1:
            self.none(
                f"{_ACTOR}.ulysses_sequence_parallel_size",
                UNSUPPORTED,
                f"sequence parallelism (Ulysses, {sp} ranks per sequence); every rank is data-parallel here, so the "
                "gradient accumulation differs from veRL's",
            )
        elif self.given(f"{_ACTOR}.ulysses_sequence_parallel_size"):
            self.explain(f"{_ACTOR}.ulysses_sequence_parallel_size", "1: none, as here")

    def _loss_settings(self, mode: str) -> None:
        """The settings veRL's sapo, clip_cov and kl_cov losses read (its defaults carried: actor.yaml's)."""
        p = f"{_ACTOR}.policy_loss"
        keys = {
            "sapo": (
                ("algorithm.policy_loss.sapo_tau_pos", f"{_ACTOR}.tau_pos"),
                ("algorithm.policy_loss.sapo_tau_neg", f"{_ACTOR}.tau_neg"),
            ),
            "clip_cov": (("algorithm.policy_loss.cov_fraction", f"{p}.clip_cov_ratio"),),
            "kl_cov": (
                ("algorithm.policy_loss.cov_fraction", f"{p}.kl_cov_ratio"),
                ("algorithm.policy_loss.kl_cov_coef", f"{p}.ppo_kl_coef"),
            ),
        }
        for ours, theirs in keys.get(mode, ()):
            self.put(ours, self.eff(theirs, float), theirs)
        if mode == "clip_cov":
            low, high = self.eff(f"{p}.clip_cov_lb", float), self.eff(f"{p}.clip_cov_ub", float)
            self.put("algorithm.policy_loss.clip_cov_bounds", [low, high], f"{p}.clip_cov_lb", f"{p}.clip_cov_ub")
        every = (
            f"{_ACTOR}.tau_pos",
            f"{_ACTOR}.tau_neg",
            f"{p}.clip_cov_ratio",
            f"{p}.clip_cov_lb",
            f"{p}.clip_cov_ub",
            f"{p}.kl_cov_ratio",
            f"{p}.ppo_kl_coef",
        )
        for k in every:
            if k not in self.handled:
                self.handled.add(k)
                if self.given(k):
                    self.explain(k, f"not read by veRL's {mode} loss, nor here")

    def _critic_aggregation(self, actor_agg: str) -> None:
        """veRL's critic aggregates its loss by critic.loss_agg_mode, the actor's by default."""
        k = "critic.loss_agg_mode"
        self.handled.add(k)
        agg = self.eff(k, str) or actor_agg
        if self.values.get("algorithm.advantage.estimator") not in names.CRITIC_ESTIMATORS:
            if self.given(k):
                self.explain(k, "no critic with this estimator")
            return
        if agg in AGGREGATIONS:
            self.put("critic.aggregation", AGGREGATIONS[agg], k, f"{_ACTOR}.loss_agg_mode")
        else:
            self.none(k, UNSUPPORTED, f"{agg}; one of {', '.join(AGGREGATIONS)}")

    def _correction(self) -> None:
        """veRL's rollout IS weights (rollout_corr_helper.compute_rollout_correction_weights): per token (the token
        ratio) or per sequence (the product of its token ratios), truncated at a number (TIS: clip into [0, HIGH])
        or zeroed outside a "LOW_HIGH" band (IcePop: mask), optionally divided by their batch mean."""
        p = "algorithm.rollout_correction"
        k, thr_k, norm_k = f"{p}.rollout_is", f"{p}.rollout_is_threshold", f"{p}.rollout_is_batch_normalize"
        level = self.eff(k, (str, type(None)))
        self.handled.update((k, thr_k, norm_k))
        if level in ("token", "sequence"):
            mode, band = self._is_band(thr_k)
            if level == "token":
                self.put("algorithm.is_correction.type", "tis" if mode == "clip" else "icepop", k)
            else:
                self.put("algorithm.is_correction.level", "seq", k)
                self.put("algorithm.is_correction.mode", mode, k, thr_k)
                self.put("algorithm.is_correction.gating", "ratio", k)
                self.put("algorithm.is_correction.seq_ratio", "product", k)
            self.put("algorithm.is_correction.threshold", list(band), thr_k)
            unit = "token weights" if level == "token" else "each sequence's weight (the product of its token ratios)"
            how = "capped at the threshold (TIS)" if mode == "clip" else "zeroed outside the band (IcePop)"
            self.explain(k, f"{unit} {how}")
            if self.eff(norm_k, bool):
                self.put("algorithm.is_correction.batch_normalize", True, norm_k)
                self.explain(norm_k, "mean 1 over the rollout batch")
            elif self.given(norm_k):
                self.explain(norm_k, "off, as here")
        else:
            if level is not None:
                self.none(k, UNSUPPORTED, f"{level!r}: veRL's levels are token and sequence")
            if self.given(norm_k) and self.eff(norm_k, bool):
                self.explain(norm_k, "no IS weights to normalise (rollout_is unset), in veRL as here")
            elif self.given(norm_k):
                self.explain(norm_k, "off, as here")
        why = {
            "rollout_rs": "veRL's rejection sampling: drops tokens or sequences from the response mask by its own "
            "divergence statistics (k1/k3 bounds); the nearest here is algorithm.is_correction mode=mask",
            "rollout_rs_threshold": "the bounds of veRL's rejection sampling (rollout_rs), not carried",
            "bypass_mode": "veRL's bypass mode: the rollout engine's log-probs stand in for the old policy's (no "
            "recomputation); here the trainer always recomputes them (or reuses its own on one step per rollout)",
            "loss_type": "the policy loss of veRL's bypass mode (ppo_clip against the rollout log-probs, or an "
            "IS-weighted REINFORCE), which is not carried",
        }
        bypass = bool(self.eff(f"{p}.bypass_mode", bool))
        for rest, reason in why.items():
            rk = f"{p}.{rest}"
            self.handled.add(rk)
            if not self.given(rk):
                continue
            if rest == "loss_type":  # read by bypass mode only
                if bypass:
                    self.none(rk, UNSUPPORTED, reason)
                else:
                    self.explain(rk, "read by veRL's bypass mode only, which is off")
            elif self.eff(rk) not in (None, False):
                self.none(rk, UNSUPPORTED, reason)
            else:
                self.explain(rk, "off, as here")

    def _is_band(self, thr_k: str) -> tuple[str, tuple[float, float]]:
        """Our mode and ``(low, high)`` of veRL's rollout_is_threshold: a number HIGH (TIS: clip, low 0) or a string
        "LOW_HIGH" (IcePop: mask); veRL's default (TIS at 2) when it is neither."""
        raw = self.eff(thr_k, (float, str))
        text = str(raw).strip()
        try:
            low, high = (float(x) for x in text.split("_", 1)) if "_" in text else (0.0, float(text))
        except ValueError:
            self.none(thr_k, UNSUPPORTED, f"{raw!r}: a number HIGH (TIS) or LOW_HIGH (IcePop); veRL's 2.0 used")
            return "clip", (0.0, 2.0)
        if not 0 <= low < high:
            self.none(thr_k, UNSUPPORTED, f"{raw!r}: need 0 <= LOW < HIGH; veRL's 2.0 used")
            return "clip", (0.0, 2.0)
        return ("mask" if "_" in text else "clip"), (low, high)

    def _vllm_keys(self) -> None:
        """vLLM's own keys (``rollout.vllm.*``), written for rollout=vllm only: under rollout=hf they would be
        ignored (the preflight says so), so they are reported instead."""
        keys = {
            "gpu_memory_utilization": float,
            "enforce_eager": bool,
            "enable_prefix_caching": bool,
            "max_num_seqs": int,
        }
        for name, kind in keys.items():
            k = f"{_ROLLOUT}.{name}"
            if self.backend != "vllm":
                self.none(k, NOT_NEEDED, f"vLLM's own key (rollout.vllm.{name}); rollout={self.backend} has none")
            elif name != "max_num_seqs" or self.given(k):  # max_num_seqs: ours sizes itself unless the command set it
                self.put(f"rollout.vllm.{name}", self.eff(k, kind), k)
            self.handled.add(k)

    def _rollout(self) -> None:
        name_k = f"{_ROLLOUT}.name"
        name = self.eff(name_k, str)
        self.backend = "vllm"
        if name in ("vllm", "hf"):
            self.backend = name
            self.explain(name_k, f"rollout={name}")
        elif name is None:
            self.notes.append(f"rollout: the command does not set {name_k} (veRL requires it); vllm chosen")
        else:
            self.none(name_k, UNSUPPORTED, f"{name} as a rollout engine; the recipe uses vllm")
        self.handled.add(name_k)
        tp = self.eff(f"{_ROLLOUT}.tensor_model_parallel_size", int)
        self.put("rollout.tensor_parallel_size", tp, f"{_ROLLOUT}.tensor_model_parallel_size")
        greedy = self.eff(f"{_ROLLOUT}.do_sample", bool) is False
        temp = 0.0 if greedy else self.eff(f"{_ROLLOUT}.temperature", float)
        self.put("rollout.temperature", temp, f"{_ROLLOUT}.temperature", f"{_ROLLOUT}.do_sample")
        self.put("rollout.top_p", self.eff(f"{_ROLLOUT}.top_p", float), f"{_ROLLOUT}.top_p")
        self.put("rollout.top_k", self.eff(f"{_ROLLOUT}.top_k", int), f"{_ROLLOUT}.top_k")
        self.put(
            "rollout.enable_sleep", self.eff(f"{_ROLLOUT}.free_cache_engine", bool), f"{_ROLLOUT}.free_cache_engine"
        )
        self._vllm_keys()
        vgreedy = self.eff(f"{_ROLLOUT}.val_kwargs.do_sample", bool) is False
        vtemp = 0.0 if vgreedy else self.eff(f"{_ROLLOUT}.val_kwargs.temperature", float)
        self.put("eval.temperature", vtemp, f"{_ROLLOUT}.val_kwargs.temperature", f"{_ROLLOUT}.val_kwargs.do_sample")
        self.put("eval.samples_per_prompt", self.eff(f"{_ROLLOUT}.val_kwargs.n", int), f"{_ROLLOUT}.val_kwargs.n")
        tools = [f"{_ROLLOUT}.multi_turn.{k}" for k in ("tool_config_path", "interaction_config_path")]
        config = next((str(o.value) for o in self.cmd.overrides if o.flag in ("--config-name", "-cn")), "")
        if (
            self.eff(f"{_ROLLOUT}.multi_turn.enable", bool)
            or any(self.given(k) for k in tools)
            or "multiturn" in config
        ):
            if self.given(f"{_ROLLOUT}.multi_turn.enable"):
                self.none(f"{_ROLLOUT}.multi_turn.enable", *vocab.no_equivalent(f"{_ROLLOUT}.multi_turn.enable"))
            self.notes.append(
                "multi-turn: veRL's tool-calling rollouts have no equivalent here; the recipe trains single-turn "
                "(an agent file of OpenRLHF's protocol would be agent.path=FILE)"
            )

    def _reward(self) -> None:
        custom, rm = "custom_reward_function.path", "reward_model.enable"
        self.handled.update((custom, "custom_reward_function.name", rm, "reward_model.model.path"))
        self.reward_model = False
        if self.eff(custom, str):
            # veRL's own contract, read as it is: compute_score(data_source, solution_str, ground_truth, extra_info)
            name = self.eff("custom_reward_function.name", str) or "compute_score"
            self.put("reward.function", f"{self.eff(custom, str)}:{name}", custom, "custom_reward_function.name")
            self.values["reward.contract"] = "verl"
            self.carried["reward.contract"] = (
                "veRL's compute_score(data_source, solution_str, ground_truth, extra_info)"
            )
        elif self.eff(rm, bool):
            path = self.eff("reward_model.model.path", str)
            if path:
                self.put("reward.model_path", path, "reward_model.model.path", rm)
            else:
                self.need("reward.model_path", "", f"{rm}=True", "the reward model's folder (reward_model.model.path)")
            self.reward_model = True
        else:
            # veRL's built-in scorers, chosen per row by data_source (GSM8K's strict '#### N', MATH's boxed answer):
            # ours reproduce veRL 0.9.1's scores (rlhf.rewards.verl_scorers; veRL's own code when it is installed).
            self.values["reward.function"] = VERL_DEFAULT_SCORER
            self.carried["reward.function"] = "veRL's rule-based scorer per data_source (default_compute_score)"
            self.values["reward.contract"] = "verl"
            self.carried["reward.contract"] = (
                "veRL's compute_score(data_source, solution_str, ground_truth, extra_info)"
            )
        # veRL never clips scores; our default clip range would.
        self.values["reward.clip_range"] = None
        self.carried["reward.clip_range"] = "veRL's scoring, which never clips"
        buf = "reward_model.reward_kwargs.overlong_buffer_cfg"
        self.handled.update(f"{buf}.{x}" for x in ("enable", "len", "penalty_factor", "log"))
        self.handled.add("reward_model.reward_kwargs.max_resp_len")
        if self.eff(f"{buf}.enable", bool):
            length = self.eff(f"{buf}.len", int)
            if isinstance(length, int):
                self.put("algorithm.filters.overlong_buffer_len", length, f"{buf}.len", f"{buf}.enable")
            factor = self.eff(f"{buf}.penalty_factor", float)
            if isinstance(factor, float):
                self.put("algorithm.filters.overlong_penalty_factor", factor, f"{buf}.penalty_factor")
            self.explain("reward_model.reward_kwargs.max_resp_len", "rollout.max_new_tokens bounds the buffer here")
        manager = "reward_model.reward_manager"
        self.handled.add(manager)
        if self.given(manager):
            self.explain(manager, "scores go straight to the policy's advantages here (no reward manager)")

    def _data_rl(self) -> None:
        self._files()
        prompt, response = self.eff("data.max_prompt_length", int), self.eff("data.max_response_length", int)
        self.put("data.max_prompt_len", prompt, "data.max_prompt_length")
        self.put("rollout.max_new_tokens", response, "data.max_response_length")
        self.put("data.max_len", prompt + response, "data.max_prompt_length", "data.max_response_length")
        self.put("data.input_key", self.eff("data.prompt_key", str), "data.prompt_key")
        self.put("data.datasource_key", self.eff("data.reward_fn_key", str), "data.reward_fn_key")
        self.put("data.apply_chat_template", True, "data.prompt_key")
        if self.values.get("reward.verifier") or "reward.function" in self.values:
            # veRL's reward managers read every row's answer from this nested field; read here as it is
            self.values["data.label_key"] = "reward_model.ground_truth"
            self.carried["data.label_key"] = "veRL's reward managers: the row's reward_model.ground_truth"
        self._lengths_policy("data.max_prompt_length")

    def _lengths_policy(self, length_key: str) -> None:
        drop = self.eff("data.filter_overlong_prompts", bool) if self.rl else False
        trunc = self.eff("data.truncation", str)
        if drop:
            self.put("data.on_too_long", "drop", "data.filter_overlong_prompts")
        else:
            self.put("data.on_too_long", "truncate", "data.truncation")
            if trunc == "error":
                self.explain("data.truncation", "veRL stops on a row past the limit; here such rows are truncated")
        if drop and self.given("data.truncation"):
            self.explain("data.truncation", "overlong rows are dropped before it applies, in veRL too")
        self.handled.update(("data.filter_overlong_prompts", "data.truncation"))
        samples = self.eff("data.train_max_samples", int)
        if isinstance(samples, int) and samples > 0:
            self.put("data.max_samples", samples, "data.train_max_samples")
        self.handled.add("data.train_max_samples")

    def _files(self) -> None:
        def files(k: str) -> list[str]:
            v = self.eff(k, (str, list))
            if v is None:
                return []
            return [str(x) for x in v] if isinstance(v, list) else [str(v)]

        train = files("data.train_files")
        self.put("data.train_files", train, "data.train_files")
        if "" in train and "data.train_files" not in self.unknown_k:
            self.need("data.train_files", train, "data.train_files=", "empty in the script: the training data to use")
        val = files("data.val_files")
        test_freq = self.eff("trainer.test_freq", int)
        self.handled.add("data.val_files")
        if val and isinstance(test_freq, int) and test_freq > 0:
            self.put("data.eval_files", val, "data.val_files")
            if "" in val and "data.val_files" not in self.unknown_k:
                self.need("data.eval_files", val, "data.val_files=", "empty in the script: the eval data to use")
        elif self.given("data.val_files"):
            self.put("data.eval_files", val, "data.val_files", carry=False)
            if not self.rl or test_freq is None or test_freq <= 0:
                self.explain("data.val_files", "evaluated at the end of each epoch (SFT) or never (test_freq -1)")

    # -- SFT --------------------------------------------------------------------------------------------------------

    def _sft(self) -> None:
        self._files()
        engine = self.entry == "sft_trainer"
        if engine or self.eff("data.multiturn.enable", bool):
            key = "data.messages_key" if engine else "data.multiturn.messages_key"
            self.put("data.multiturn", True, key if engine else "data.multiturn.enable")
            self.put("data.input_key", self.eff(key, str), key)
            self.handled.update(("data.multiturn.enable", key))
            for k in ("data.prompt_key", "data.response_key", "data.prompt_dict_keys", "data.response_dict_keys"):
                if self.given(k):
                    self.explain(k, "multi-turn rows: the conversation column (data.input_key) holds every turn")
        else:
            self.put("data.input_key", self.eff("data.prompt_key", str), "data.prompt_key")
            self.put("data.output_key", self.eff("data.response_key", str), "data.response_key")
            for side, ours in (("prompt", "data.input_key"), ("response", "data.output_key")):
                dk = f"data.{side}_dict_keys"
                keys = self.eff(dk, (list, str))
                if keys:  # veRL reads the field nested in that column: a dotted key here reads it as it is
                    nested = ".".join(map(str, keys)) if isinstance(keys, list) else str(keys)
                    self.put(ours, f"{self.values[ours]}.{nested}", f"data.{side}_key", dk)
                self.handled.add(dk)
        self.put("data.max_len", self.eff("data.max_length", int), "data.max_length")
        self._lengths_policy("data.max_length")
        self.put("trainer.global_batch", self.eff("data.train_batch_size", int), "data.train_batch_size")
        micro = self.eff("data.micro_batch_size_per_gpu", int)
        self.put("trainer.micro_batch_per_device", micro, "data.micro_batch_size_per_gpu", "data.micro_batch_size")
        if self.given("data.micro_batch_size"):
            self.explain("data.micro_batch_size", "deprecated in veRL for micro_batch_size_per_gpu (used instead)")
        if self.given("data.chat_template"):
            self.put("model.chat_template", self.eff("data.chat_template", str), "data.chat_template")
        self.handled.add("data.chat_template")
        # veRL's SFT trainer (the engine one) cuts micro-batches by tokens by default: data.max_token_len_per_gpu.
        budget_k = "data.max_token_len_per_gpu"
        budget = self.eff(budget_k, int)
        if self.eff("data.use_dynamic_bsz", bool) and isinstance(budget, int) and budget > 0:
            self.put("trainer.packing", True, "data.use_dynamic_bsz")
            self.put("trainer.max_tokens_per_micro_batch", budget, "data.use_dynamic_bsz", budget_k)
            self.put("trainer.max_tokens_per_forward", budget, budget_k)
        elif self.eff("data.use_dynamic_bsz", bool):
            self.none(budget_k, UNSUPPORTED, "not a positive whole number of tokens; micro-batches by samples here")
        elif self.given(budget_k):
            self.explain(budget_k, "used only with data.use_dynamic_bsz=true (off), as veRL does")
        self.handled.update(("data.use_dynamic_bsz", budget_k))
        self.put("data.apply_chat_template", True, "data.prompt_key")
        sp = self.eff("ulysses_sequence_parallel_size", int)
        if sp and sp > 1:
            self.none("ulysses_sequence_parallel_size", UNSUPPORTED, "sequence parallelism (Ulysses)")
        self.handled.add("ulysses_sequence_parallel_size")

    # -- shared by RL and SFT ---------------------------------------------------------------------------------------

    def _optimizer(self) -> None:
        p = f"{_ACTOR}.optim." if self.rl else "optim."
        sched_k = p + ("lr_scheduler_type" if self.rl else "lr_scheduler")
        self.put("trainer.lr", self.eff(p + "lr", float), p + "lr")
        if self.rl:
            self.put("trainer.critic_lr", self.eff("critic.optim.lr", float), "critic.optim.lr")
        betas = self.eff(p + "betas", list)
        if isinstance(betas, list) and len(betas) == 2 and all(isinstance(b, (int, float)) for b in betas):
            self.put("trainer.betas", [float(b) for b in betas], p + "betas")
        else:
            self.none(p + "betas", UNSUPPORTED, f"{betas!r}: two numbers")
        self.put("trainer.weight_decay", self.eff(p + "weight_decay", float), p + "weight_decay")
        self.put("trainer.max_norm", self.eff(p + "clip_grad", float), p + "clip_grad")
        ratio = self.eff(p + "lr_warmup_steps_ratio", float)
        steps = self.eff(p + "lr_warmup_steps", int) if self.rl else None
        self.put("trainer.warmup_ratio", ratio, p + "lr_warmup_steps_ratio")
        if isinstance(steps, int) and steps > 0:
            self.none(p + "lr_warmup_steps", UNSUPPORTED, "a warm-up in steps; trainer.warmup_ratio is a fraction")
        self.handled.add(p + "lr_warmup_steps")
        sched = self.eff(sched_k, str)
        min_ratio = self.eff(p + "min_lr_ratio", float)
        if sched == "cosine":
            self.put("trainer.lr_scheduler", "cosine_with_min_lr", sched_k)
            self.put("trainer.min_lr_ratio", min_ratio, p + "min_lr_ratio", sched_k)
        elif sched == "constant":
            self.put("trainer.lr_scheduler", "constant_with_warmup" if ratio else "constant", sched_k)
        else:
            self.none(sched_k, UNSUPPORTED, f"the {sched} schedule; constant or cosine")
        self.handled.add(p + "min_lr_ratio")
        if self.given(p + "optimizer") and str(self.eff(p + "optimizer", str)).lower() != "adamw":
            self.none(p + "optimizer", UNSUPPORTED, f"{self.eff(p + 'optimizer')}; AdamW here")
        elif self.given(p + "optimizer"):
            self.explain(p + "optimizer", "AdamW, as here")
        self.handled.add(p + "optimizer")
        self.values["trainer.precision"] = "fp32" if self.cpu else "bf16"
        self.carried["trainer.precision"] = "veRL's FSDP mixed precision (bf16 compute, fp32 master weights)"

    def _engine(self) -> None:
        if self.rl:
            strat_k, param_k, optim_k = (
                f"{_ACTOR}.strategy",
                f"{_ACTOR}.fsdp_config.param_offload",
                f"{_ACTOR}.fsdp_config.optimizer_offload",
            )
            reshard_k = f"{_ACTOR}.fsdp_config.reshard_after_forward"
        elif self.entry == "sft_trainer":
            strat_k, param_k, optim_k, reshard_k = (
                "engine.strategy",
                "engine.param_offload",
                "engine.optimizer_offload",
                "",
            )
        else:
            strat_k, param_k, optim_k, reshard_k = (
                "model.strategy",
                "model.fsdp_config.offload_params",
                "model.fsdp_config.cpu_offload",
                "",
            )
        self.handled.update(k for k in (strat_k, param_k, optim_k, reshard_k) if k)
        strategy = self.eff(strat_k, str)
        param_off, optim_off = bool(self.eff(param_k, bool)), bool(self.eff(optim_k, bool))
        if strategy == "megatron":
            self.none(
                strat_k,
                UNSUPPORTED,
                "Megatron-LM training (tensor and pipeline parallelism); sharded data "
                "parallelism instead (FSDP2, or DeepSpeed ZeRO-3)",
            )
        fsdp2 = schema_allows("trainer.backend", "fsdp2")
        if fsdp2:
            self.put("trainer.backend", "fsdp2", strat_k)
            if strategy == "fsdp":
                self.explain(strat_k, "veRL's fsdp is FSDP1; FSDP2 here shards parameters, gradients and states alike")
            if param_off or optim_off:
                if schema_has("trainer.fsdp2.cpu_offload"):
                    self.put("trainer.fsdp2.cpu_offload", True, param_k, optim_k)
                    if param_off != optim_off:
                        self.explain(param_k if param_off else optim_k, "FSDP2's CPU offload moves both here")
            elif self.given(param_k) or self.given(optim_k):
                for k in (param_k, optim_k):
                    if self.given(k):
                        self.explain(k, "off, as here")
            if reshard_k and self.given(reshard_k) and schema_has("trainer.fsdp2.reshard_after_forward"):
                self.put("trainer.fsdp2.reshard_after_forward", self.eff(reshard_k, bool), reshard_k)
        else:
            # FSDP's full sharding is ZeRO-3's: parameters, gradients and optimizer states split over the ranks.
            self.put("trainer.zero_stage", 3, strat_k)
            if strategy in ("fsdp", "fsdp2") or strategy is None:
                self.coming(strat_k, "trainer.backend", "fsdp2", "DeepSpeed ZeRO-3, which shards the same way")
                if not self.given(strat_k):
                    self.notes.append(
                        f"trainer.zero_stage=3: veRL trains with FSDP ({strat_k}={strategy}); DeepSpeed ZeRO-3 shards "
                        "parameters, gradients and optimizer states alike; trainer.backend=fsdp2 is coming (import "
                        "again once this version has it)"
                    )
            lora = bool(self.eff(f"{_MODEL}.lora_rank" if self.rl else "model.lora_rank", int))
            if param_off and lora:
                # DeepSpeed here cannot offload ZeRO-3 parameters under LoRA (validation refuses it).
                self.none(
                    param_k,
                    UNSUPPORTED,
                    "parameter offload with LoRA under DeepSpeed ZeRO-3; off (FSDP2's "
                    "CPU offload carries it once trainer.backend=fsdp2 exists)",
                )
                param_off = False
            self.put("trainer.offload_params", param_off, param_k)
            self.put("trainer.offload_optimizer", optim_off, optim_k)
            if optim_off:
                self.put("trainer.optimizer", "cpu_adam", optim_k)
        if self.rl:
            self.put(
                "reference.offload",
                bool(self.eff(f"{_REF}.fsdp_config.param_offload", bool)),
                f"{_REF}.fsdp_config.param_offload",
            )
            for k in ("critic.fsdp.param_offload", "critic.fsdp.optimizer_offload"):
                if self.given(k) and bool(self.eff(k, bool)) != (param_off if "param" in k else optim_off):
                    self.none(k, UNSUPPORTED, "a critic offload of its own; the training engine's settings are shared")
                elif self.given(k):
                    self.explain(k, "the policy's too: shared by every trained role here")
                self.handled.add(k)

    def _model(self) -> None:
        p = f"{_MODEL}." if self.rl else "model."
        self.put(
            "trainer.gradient_checkpointing",
            bool(self.eff(p + "enable_gradient_checkpointing", bool)),
            p + "enable_gradient_checkpointing",
        )
        rank_k = p + "lora_rank"
        if self.rl and self.given(f"{_MODEL}.lora.rank"):
            rank_k = f"{_MODEL}.lora.rank"
        rank = self.eff(rank_k, int) or 0
        self.handled.update(
            (p + "lora_rank", f"{_MODEL}.lora.rank", p + "lora_alpha", f"{_MODEL}.lora.alpha", p + "target_modules")
        )
        if rank:
            alpha_k = f"{_MODEL}.lora.alpha" if self.rl and self.given(f"{_MODEL}.lora.alpha") else p + "lora_alpha"
            self.put("model.lora.rank", rank, rank_k)
            self.put("model.lora.alpha", self.eff(alpha_k, int) or 16, alpha_k)
            mods = self.eff(p + "target_modules", (str, list))
            self.put(
                "model.lora.target_modules",
                [str(m) for m in mods] if isinstance(mods, list) else [str(mods)],
                p + "target_modules",
            )
        self.put("model.trust_remote_code", bool(self.eff(p + "trust_remote_code", bool)), p + "trust_remote_code")
        if self.given(p + "custom_chat_template"):
            self.put("model.chat_template", self.eff(p + "custom_chat_template", str), p + "custom_chat_template")
        self.handled.add(p + "custom_chat_template")
        if self.given(f"{_MODEL}.tokenizer_path"):
            self.put("model.tokenizer_path", self.eff(f"{_MODEL}.tokenizer_path", str), f"{_MODEL}.tokenizer_path")
        self.handled.add(f"{_MODEL}.tokenizer_path")
        if self.rl:
            critic = self.eff("critic.model.path", str)
            policy = self.eff(f"{_MODEL}.path", str)
            if critic and critic != policy:
                self.put("critic.model_path", critic, "critic.model.path")
            elif critic:
                self.explain("critic.model.path", "the policy's model: an empty critic.model_path means it here")
            self.handled.add("critic.model.path")
            self.put("critic.value_clip", self.eff("critic.cliprange_value", float), "critic.cliprange_value")

    def _trainer(self) -> None:
        if self.rl:
            self.put("trainer.num_episodes", self.eff("trainer.total_epochs", int), "trainer.total_epochs")
        else:
            self.put("trainer.epochs", self.eff("trainer.total_epochs", int), "trainer.total_epochs")
        steps = self.eff("trainer.total_training_steps", int)
        if steps is not None:
            self.put("trainer.max_steps", steps, "trainer.total_training_steps")
        self.handled.add("trainer.total_training_steps")
        save = self.eff("trainer.save_freq", int)
        self.handled.add("trainer.save_freq")
        if isinstance(save, int) and save > 0:
            self.put("checkpoint.save_steps", save, "trainer.save_freq")
        elif self.given("trainer.save_freq"):
            self.put("checkpoint.save_steps", 0, "trainer.save_freq")
            self.explain("trainer.save_freq", "veRL saves none; here one at the end and on an interrupt")
        test = self.eff("trainer.test_freq", int)
        self.handled.add("trainer.test_freq")
        if isinstance(test, int) and test > 0:
            self.put("eval.steps", test, "trainer.test_freq")
        elif self.given("trainer.test_freq"):
            self.put("eval.steps", 0, "trainer.test_freq")
        if self.given("trainer.val_before_train"):
            self.explain("trainer.val_before_train", "an evaluating run here evaluates at step 0 too")
        self.handled.add("trainer.val_before_train")
        self.put("checkpoint.dir", self.eff("trainer.default_local_dir", str), "trainer.default_local_dir", carry=False)
        mode = self.eff("trainer.resume_mode", str)
        resume = {"auto": "auto", "disable": "never"}.get(mode)
        if mode == "resume_path":
            resume = self.eff("trainer.resume_from_path", str) or "auto"
        if resume is None:
            self.none("trainer.resume_mode", UNSUPPORTED, f"{mode}; auto, disable or resume_path")
        else:
            self.put("checkpoint.resume", resume, "trainer.resume_mode", "trainer.resume_from_path", carry=False)
        self.handled.update(("trainer.resume_mode", "trainer.resume_from_path"))
        keep = self.eff("trainer.max_actor_ckpt_to_keep", int)
        if isinstance(keep, int) and keep >= 1:
            self.put("checkpoint.max_keep", keep, "trainer.max_actor_ckpt_to_keep")
        self.handled.add("trainer.max_actor_ckpt_to_keep")
        if self.rl:
            warm = self.eff("trainer.critic_warmup", int)
            self.put("critic.freezing_steps", max(warm, 0) if isinstance(warm, int) else 0, "trainer.critic_warmup")
        seed_k = "data.seed" if self.rl else "trainer.seed"
        seed = self.eff(seed_k, int)
        if isinstance(seed, int) and seed >= 0:
            self.put("seed", seed, seed_k)
        self.handled.add(seed_k)
        device = self.eff("trainer.device", str)
        self.handled.add("trainer.device")
        if device not in (None, "cuda"):
            self.none(
                "trainer.device", GPU_ONLY, f"{device}: NVIDIA GPUs (and CPUs) only here; the recipe targets GPUs"
            )

    def _logging(self) -> None:
        k = "trainer.logger"
        self.put("logging.experiment", self.eff("trainer.project_name", str), "trainer.project_name", carry=False)
        self.put("logging.run_name", self.eff("trainer.experiment_name", str), "trainer.experiment_name", carry=False)
        self.handled.add(k)
        if not self.given(k):
            return
        raw = self.eff(k, (list, str))
        wanted = [str(x) for x in raw] if isinstance(raw, list) else [str(raw)]
        ours = [TRACKERS[t] for t in wanted if t in TRACKERS]
        other = [t for t in wanted if t not in TRACKERS]
        if schema_has("logging.trackers"):
            self.put("logging.trackers", ours, k)
            if other:
                self.explain(k, f"{', '.join(other)}: not trackers here (mlflow, tensorboard, wandb, console)")
        else:
            extra = [t for t in ours if t not in ("mlflow", "console")]
            if extra:
                self.coming(
                    k, "logging.trackers", f"[{', '.join(ours)}]", "MLflow logs the run and the console shows progress"
                )
            else:
                self.explain(k, "the console shows progress; MLflow logs the run here")
            if other:
                self.explain(k, f"{', '.join(other)}: not trackers here")

    def _hardware(self) -> tuple[int, int]:
        l_nodes, l_gpus = launcher_devices(self.cmd.launcher)
        nodes = self.eff("trainer.nnodes", int)
        per_node = self.eff("trainer.n_gpus_per_node", int)
        for k in ("trainer.nnodes", "trainer.n_gpus_per_node"):
            self.handled.add(k)
        if not self.rl and (l_nodes or l_gpus):  # torchrun decides the SFT world
            nodes, per_node = l_nodes or nodes, l_gpus or per_node
            for k in ("trainer.nnodes", "trainer.n_gpus_per_node"):
                if self.given(k):
                    self.explain(k, "the launcher's --nnodes / --nproc_per_node decide the devices")
        nodes = nodes if isinstance(nodes, int) and nodes >= 1 else 1
        unknown = (
            not self.rl and any("$" in w for w in self.cmd.launcher)
        ) or "trainer.n_gpus_per_node" in self.unknown_k
        if unknown or not (isinstance(per_node, int) and per_node >= 1):
            per_node = self._devices_the_batch_allows(nodes)
            self.notes.append(
                f"devices: the command's device count is unknown here; {nodes} node(s) x {per_node} assumed (the most, "
                "up to 8, that the batch splits over evenly); pass --hardware to choose"
            )
        for k in ("trainer.nnodes", "trainer.n_gpus_per_node"):
            if self.given(k) and not self._outcome(k).note:
                self.explain(k, f"hardware: {nodes} node(s) x {per_node} devices")
        return nodes, per_node

    def _devices_the_batch_allows(self, nodes: int) -> int:
        """Devices per node when the command does not say: the most (up to 8) over which the global batch splits into
        whole micro-batches on every data-parallel rank."""
        batch, micro = self.values.get("trainer.global_batch"), self.values.get("trainer.micro_batch_per_device")
        if not (isinstance(batch, int) and isinstance(micro, int) and batch > 0 and micro > 0):
            return 8
        return next((n for n in range(8, 0, -1) if batch % (micro * n * nodes) == 0), 1)

    def _placement(self, total: int) -> list[tuple[list[str], int]]:
        """veRL's hybrid engine: every role in one resource pool, the engines on all of it (TP devices each)."""
        present = ["policy", "rollout"]
        if self.values.get("algorithm.kl.coef", 0.0) > 0:
            present.insert(1, "reference")
        if self.values.get("algorithm.advantage.estimator") in names.CRITIC_ESTIMATORS:
            present.insert(-1, "critic")
        if self.reward_model:
            present.insert(-1, "reward")
        tp = self.values.get("rollout.tensor_parallel_size") or 1
        tp = tp if isinstance(tp, int) and tp >= 1 else 1
        self.put("rollout.num_engines", max(total // tp, 1))
        self.notes.append(
            f"rollout.num_engines={max(total // tp, 1)}: veRL runs an engine on every {tp} device(s) of its pool "
            f"({total} devices)"
        )
        if self.eff("reward_model.enable_resource_pool", bool):
            self.notes.append("reward_model.enable_resource_pool: the reward model shares the pool here (colocated)")
        self.handled.add("reward_model.enable_resource_pool")
        return [(present, total)]

    def _config_flags(self) -> None:
        for i, o in enumerate(self.cmd.overrides):
            if not o.flag:
                continue
            out = self.outcomes[i]
            base = str(o.value).removesuffix(".yaml")
            if o.flag in ("--config-name", "-cn") and base == "ppo_megatron_trainer":
                out.none = (
                    f"{UNSUPPORTED}: Megatron-LM's trainer config; the recipe trains with sharded data parallelism"
                )
            elif o.flag in ("--config-name", "-cn") and base in ("ppo_trainer", "sft_trainer"):
                out.note = "veRL's own default config, as read here"
            elif o.flag in ("--config-name", "-cn"):
                out.none = (
                    f"{UNSUPPORTED}: a config file of the script's ({base}); what it sets is not read here, only the "
                    "overrides on the command line (and veRL's defaults)"
                )
            else:
                out.note = "where the config file is; see --config-name"


def map_command(cmd: Command, hardware_type: str = "h100") -> Mapping:
    """Every override of ``cmd`` -> our keys (before choosing presets), with an outcome per override."""
    return _Mapper(cmd, hardware_type).run()

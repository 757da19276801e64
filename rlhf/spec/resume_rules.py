"""What a resumed run may change: the config a run was trained with against the one it is resumed with.

Three kinds of key (compared on the flattened resolved config, ``section.key``):

- **what is trained** (refused): the objective (``algorithm.name`` and the estimator, policy loss, preference and RM
  loss it picks), the model and tokenizer (``model.*``, but for the attention kernel), the training data and how its
  rows become samples (``data.train_*``, the column keys, the template), the optimizer and the backend that saved
  it (``trainer.backend``, ``trainer.optimizer``), and what the checkpoint's training backend lays its files out by:
  the keys its descriptor names (rlhf.backends.contract.training.TrainBackend.checkpoint_bound_keys: DeepSpeed's
  ``trainer.zero_stage``) and a trained role's rank count where it saves the optimizer state split over the ranks
  and cannot reshard it (``optimizer_bound_to_ranks``: DeepSpeed ZeRO 1-3; FSDP2's torch.distributed.checkpoint
  reshards). The checkpoint's weights and optimizer state belong to the old values: a new run from its weights is
  ``checkpoint.init_from``.
- **what extends or observes the run** (silent): the length (``trainer.max_steps``, ``num_episodes``, ``epochs``),
  logging and trackers, evaluation, the checkpoint schedule, timeouts and restarts, the executor and Ray.
- **anything else** (allowed, said in one line): learning rate, sampling, rewards, batch sizes: what HF Trainer and
  torchtune let a resumed run change, named so that a change is never silent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlhf.errors import UserError

TRAINED_KEYS = (
    "algorithm.name",
    "algorithm.family",
    "algorithm.advantage.estimator",
    "algorithm.policy_loss.type",
    "algorithm.preference.loss",
    "algorithm.rm.loss",
    "trainer.backend",
    "trainer.optimizer",
    "data.train_files",
    "data.train_probs",
    "data.train_split",
    "data.input_key",
    "data.output_key",
    "data.prompt_key",
    "data.chosen_key",
    "data.rejected_key",
    "data.label_key",
    "data.input_template",
    "data.apply_chat_template",
    "data.max_samples",
    "data.pretrain_mode",
    "data.multiturn",
)
TRAINED_PREFIXES = ("model.",)
NOT_TRAINED = ("model.attn_implementation",)  # a kernel, the same numbers
OBSERVING_KEYS = ("trainer.max_steps", "trainer.num_episodes", "trainer.epochs", "trainer.max_restarts", "recipe")
OBSERVING_PREFIXES = ("logging.", "eval.", "checkpoint.", "launch.", "ray.", "sweep.")
OBSERVING_SUFFIXES = ("timeout_s",)


@dataclass(frozen=True)
class Change:
    key: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.key}: {self.old!r} -> {self.new!r}"


class ResumeRefused(UserError):
    """A resume with a config that changes what the checkpoint was trained for; nothing was started."""


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values."""
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(flatten(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """Keys whose value differs, among those both configs have (a key added by an upgrade is not a change)."""
    return [Change(k, old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k] != new[k]]


def trains_differently(key: str, bound: tuple[str, ...] = ()) -> bool:
    """Whether a resume refuses a change of ``key``; ``bound``: the checkpoint's backend's own such keys."""
    if key in NOT_TRAINED:
        return False
    return key in TRAINED_KEYS or key in bound or key.startswith(TRAINED_PREFIXES)


def observes(key: str) -> bool:
    return key in OBSERVING_KEYS or key.startswith(OBSERVING_PREFIXES) or key.endswith(OBSERVING_SUFFIXES)


def _backend(flat: dict[str, Any]) -> str:
    """The training backend of a flattened config (one written before the key existed: the default's)."""
    from rlhf.spec.schema import TrainerSpec

    return str(flat.get("trainer.backend") or TrainerSpec().backend)


def sharded_optimizer(flat: dict[str, Any]) -> bool:
    """Whether the optimizer state is split across ranks in a layout its checkpoint cannot reshard."""
    from rlhf.spec.train_backend_rules import optimizer_bound_to_ranks

    return optimizer_bound_to_ranks(_backend(flat), flat)


def bound_keys(flat: dict[str, Any]) -> tuple[str, ...]:
    """The keys the checkpoints of a run trained under ``flat`` are laid out by, as their training backend says
    (none when no line registers it: validation names that backend)."""
    from rlhf.spec.registry import TRAIN_BACKENDS, train_backend

    name = _backend(flat)
    return tuple(train_backend(name).checkpoint_bound_keys()) if name in TRAIN_BACKENDS else ()


def judge(
    old: dict[str, Any],
    new: dict[str, Any],
    old_ranks: dict[str, int] | None = None,
    new_ranks: dict[str, int] | None = None,
) -> tuple[list[Change], list[Change]]:
    """(refused, noted): the changes from ``old`` to ``new`` (flattened configs) that a resume refuses, and those it
    makes while saying so. ``*_ranks``: each trained role's rank count in the old and new plan."""
    found, bound = changes(old, new), bound_keys(old)  # the checkpoint's backend: the old run's
    refused = [c for c in found if trains_differently(c.key, bound)]
    noted = [c for c in found if not trains_differently(c.key, bound) and not observes(c.key)]
    if old_ranks and new_ranks and sharded_optimizer(old) and sharded_optimizer(new):
        backend = _backend(old)
        for role in sorted(old_ranks.keys() & new_ranks.keys()):
            if old_ranks[role] != new_ranks[role]:
                what = f"ranks of {role} (the {backend} optimizer state is split over the ranks that saved it)"
                refused.append(Change(what, old_ranks[role], new_ranks[role]))
    return refused, noted


def refusal(refused: list[Change], run_dir: str) -> str:
    listed = "; ".join(str(c) for c in refused)
    return (
        f"cannot resume {run_dir} with this config: its checkpoints were trained with other values of what they "
        f"train ({listed}). To continue the run, resume without those overrides; to train with "
        f"them from its weights, start a new run: add checkpoint.init_from={run_dir} and a new folder "
        "(drop --resume and hydra.run.dir)"
    )

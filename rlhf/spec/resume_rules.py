"""What a resumed run may change: the config a run was trained with against the one it is resumed with.

Three kinds of key (compared on the flattened resolved config, ``section.key``):

- **what is trained** (refused): the objective (``algorithm.name`` and the estimator, policy loss, preference and RM
  loss it picks), the model and tokenizer (``model.*``, but for the attention kernel), the training data and how its
  rows become samples (``data.train_*``, the column keys, the template), the optimizer and how its state is sharded
  (``trainer.backend``, ``trainer.optimizer``, ``trainer.zero_stage``, and a trained role's rank count where
  DeepSpeed ZeRO shards the optimizer state, which its checkpoints cannot reshard; FSDP2's can). The checkpoint's
  weights and optimizer state belong to the old values: a new run from its weights is ``checkpoint.init_from``.
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
    "trainer.zero_stage",
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


def trains_differently(key: str) -> bool:
    if key in NOT_TRAINED:
        return False
    return key in TRAINED_KEYS or key.startswith(TRAINED_PREFIXES)


def observes(key: str) -> bool:
    return key in OBSERVING_KEYS or key.startswith(OBSERVING_PREFIXES) or key.endswith(OBSERVING_SUFFIXES)


def sharded_optimizer(flat: dict[str, Any]) -> bool:
    """Whether the optimizer state is split across ranks in a layout its checkpoint cannot reshard."""
    from rlhf.spec.train_backend_rules import optimizer_bound_to_ranks

    return optimizer_bound_to_ranks(str(flat.get("trainer.backend")), flat)


def judge(
    old: dict[str, Any],
    new: dict[str, Any],
    old_ranks: dict[str, int] | None = None,
    new_ranks: dict[str, int] | None = None,
) -> tuple[list[Change], list[Change]]:
    """(refused, noted): the changes from ``old`` to ``new`` (flattened configs) that a resume refuses, and those it
    makes while saying so. ``*_ranks``: each trained role's rank count in the old and new plan."""
    found = changes(old, new)
    refused = [c for c in found if trains_differently(c.key)]
    noted = [c for c in found if not trains_differently(c.key) and not observes(c.key)]
    if old_ranks and new_ranks and sharded_optimizer(old) and sharded_optimizer(new):
        for role in sorted(old_ranks.keys() & new_ranks.keys()):
            if old_ranks[role] != new_ranks[role]:
                refused.append(
                    Change(f"ranks of {role} (ZeRO-sharded optimizer state)", old_ranks[role], new_ranks[role])
                )
    return refused, noted


def refusal(refused: list[Change], run_dir: str) -> str:
    listed = "; ".join(str(c) for c in refused)
    return (
        f"cannot resume {run_dir} with this config: its checkpoints were trained with other values of what they "
        f"train ({listed}). To continue the run, resume without those overrides; to train with "
        f"them from its weights, start a new run: add checkpoint.init_from={run_dir} and a new folder "
        "(drop --resume and hydra.run.dir)"
    )

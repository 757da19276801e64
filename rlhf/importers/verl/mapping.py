"""veRL's settings -> our config keys, with what became of every override.

As for OpenRLHF, the semantics are carried, not the names: a key the command leaves out means veRL's default
(rlhf.importers.verl.vocab), so that default is carried where ours differs (rollout TP 2, gpu_memory 0.5,
AdamW betas (0.9, 0.999) and weight decay 0.01, dual-clip c = 3, gradient checkpointing on, ...).

Each group of veRL's settings maps in a module of its own, a function over one command's state
(rlhf.importers.verl.mapper.VerlMapper), run here in order:

    RL (main_ppo)   advantage, kl, batches (veRL's batch vocabulary -> ours), policy_loss, correction, rollout,
                    reward, data
    SFT             sft (with data's files and length policy)
    both            training (optimizer, engine), model, trainer (and logging), placement (devices, roles)

then every override no step looked at is reported (no equivalent, or not a key of veRL's config), never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlhf.importers.outcomes import Outcome
from rlhf.importers.recipe import schema_allows, schema_has
from rlhf.importers.verl import vocab
from rlhf.importers.verl.advantage import map_advantage
from rlhf.importers.verl.batches import map_batches, verl_grad_accum, verl_steps_per_rollout
from rlhf.importers.verl.correction import map_correction
from rlhf.importers.verl.data import map_data_rl
from rlhf.importers.verl.kl import map_kl
from rlhf.importers.verl.mapper import COMING, MODEL, UNSUPPORTED, VerlMapper
from rlhf.importers.verl.model import map_model
from rlhf.importers.verl.overrides import Command
from rlhf.importers.verl.placement import map_hardware, map_placement
from rlhf.importers.verl.policy_loss import map_policy_loss
from rlhf.importers.verl.reward import map_reward
from rlhf.importers.verl.rollout import map_rollout
from rlhf.importers.verl.sequence import map_sequence
from rlhf.importers.verl.sft import map_sft
from rlhf.importers.verl.trainer import map_logging, map_trainer
from rlhf.importers.verl.training import map_engine, map_optimizer

__all__ = ["COMING", "Mapping", "Outcome", "map_command", "verl_grad_accum", "verl_steps_per_rollout"]


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


def map_command(cmd: Command, hardware_type: str = "h100") -> Mapping:
    """Every override of ``cmd`` -> our keys (before choosing presets), with an outcome per override."""
    # The schema is asked through this module's names, read now: a test stands in a schema with keys this one lacks.
    m = VerlMapper(cmd, hardware_type, schema_has, schema_allows)
    if m.rl:
        map_advantage(m)
        map_kl(m)
        map_batches(m)
        map_policy_loss(m)
        map_correction(m)
        map_rollout(m)
        map_reward(m)
        map_data_rl(m)
    else:
        map_sft(m)
    map_optimizer(m)
    map_engine(m)
    map_sequence(m)
    map_model(m)
    map_trainer(m)
    map_logging(m)
    nodes, per_node = map_hardware(m)
    groups = map_placement(m, nodes * per_node) if m.rl else [(["policy"], nodes * per_node)]
    _config_flags(m)
    model_key = f"{MODEL}.path" if m.rl else ("model.partial_pretrain" if m.entry != "sft_trainer" else "model.path")
    model_path = str(m.eff(model_key, str) or "")
    if model_key in m.unknown_k:
        o = cmd.overrides[m.unknown_k[model_key]]
        m.unknown["model.path"] = (o.text, o.unknown)
    m.explain(model_key, "model: the closest conf/model option (rlhf.importers.recipe.choose_model)")
    if not m.given(model_key):
        m.notes.append(f"model: the command does not set {model_key}; veRL's default {model_path} is carried")
    _account_for_the_rest(m)
    return Mapping(
        m.entry,
        m.values,
        m.carried,
        m.outcomes,
        m.notes,
        model_path,
        groups,
        nodes,
        per_node,
        m.unknown,
        m.backend,
        model_key,
        m.differs,
    )


def _account_for_the_rest(m: VerlMapper) -> None:
    """Every override no step looked at: no equivalent (vocab says why), or not a key of veRL's config."""
    for i, o in enumerate(m.cmd.overrides):
        out = m.outcomes[i]
        if o.key in m.handled and not (out.keys or out.none or out.note or out.problem or o.problem):
            out.note = "read by veRL only with settings this command does not use; no effect here either"
        if not o.key or o.problem or out.problem or o.prefix == "~" or o.key in m.handled or out.overridden_by:
            continue
        why = vocab.no_equivalent(o.key)
        if why is not None:
            m.none(o.key, *why)
        elif vocab.is_verl_section(o.key):
            m.none(o.key, UNSUPPORTED, "a veRL setting with no equivalent here")
        else:
            out.problem = "not a key of veRL's trainer config"


def _config_flags(m: VerlMapper) -> None:
    """--config-name / --config-path: which config file the script names (only its overrides are read here)."""
    for i, o in enumerate(m.cmd.overrides):
        if not o.flag:
            continue
        out = m.outcomes[i]
        base = str(o.value).removesuffix(".yaml")
        if o.flag in ("--config-name", "-cn") and base == "ppo_megatron_trainer":
            out.none = f"{UNSUPPORTED}: Megatron-LM's trainer config; the recipe trains with sharded data parallelism"
        elif o.flag in ("--config-name", "-cn") and base in ("ppo_trainer", "sft_trainer"):
            out.note = "veRL's own default config, as read here"
        elif o.flag in ("--config-name", "-cn"):
            out.none = (
                f"{UNSUPPORTED}: a config file of the script's ({base}); what it sets is not read here, only the "
                "overrides on the command line (and veRL's defaults)"
            )
        else:
            out.note = "where the config file is; see --config-name"

"""veRL 0.9.1's own pure functions, read from its wheel, for the parity tests (tests/algo/test_verl_parity.py).

The wheel (``pip download verl==0.9.1 --no-deps``; ``scripts/install.sh --dev`` puts it in ``.cache/reference``
beside OpenRLHF's, git-ignored) is never installed: it would pull ray, transformers, tensordict and its pinned
torch. Nor can its modules be imported as they are: ``verl/trainer/ppo/core_algos.py`` imports omegaconf, the
trainer's and workers' config dataclasses and ``verl.utils`` (whose package imports reach ray and tensordict), and
``verl/utils/torch_functional.py`` imports transformers and tensordict. So, as for OpenRLHF
(tests/algo/openrlhf_reference.py), each module's source is read from the zip and only the top-level definitions
asked for are compiled and run, in a namespace that supplies what they use. Decorators are dropped (they only
register the functions in veRL's own registries or warn of deprecation); the config classes the functions check
with ``isinstance`` are stand-ins (:class:`ActorConfig`), holding the attributes the losses read.
"""

from __future__ import annotations

import ast
import math
import os
import zipfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import torch

VERSION = "0.9.1"
#: Where scripts/install.sh --dev puts the wheel; RLHF_VERL_WHEEL names another file.
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "reference"
HOW_TO_GET = (
    f"the veRL {VERSION} wheel is not in {CACHE} nor named by RLHF_VERL_WHEEL (scripts/install.sh --dev fetches "
    f"it; or pip download verl=={VERSION} --no-deps -d {CACHE})"
)

#: core_algos.py definitions the parity tests call.
CORE = {
    "agg_loss",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_policy_loss_vanilla",
    "compute_policy_loss_gspo",
    "compute_policy_loss_cispo",
    "compute_policy_loss_gpg",
    "compute_policy_loss_sapo",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_dro",
    "compute_policy_loss_reinforce",
    "compute_policy_loss_bypass_mode",
    "compute_value_loss",
    "kl_penalty",
    "kl_penalty_forward",
}
#: verl/trainer/ppo/rollout_corr_helper.py definitions: the rollout IS weights (TIS, IcePop) its trainer hands the
#: policy losses.
ROLLOUT_CORRECTION = {
    "compute_rollout_correction_weights",
    "_parse_rollout_is_threshold",
    "compute_is_metrics",
    # rejection sampling, with the module's constants naming its criteria
    "compute_rollout_rejection_mask",
    "_parse_rollout_rs_thresholds",
    "compute_rs_metrics",
    "SUPPORTED_ROLLOUT_RS_OPTIONS",
    "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS",
    # both together, as the trainer and the bypass mode's loss call them
    "compute_rollout_correction_and_rejection_mask",
    "compute_offpolicy_metrics",
}
#: verl/utils/torch_functional.py definitions core_algos reaches through ``verl_F``, and the actor's entropy and
#: sum pi^2 of the (tempered) logits.
TORCH_FUNCTIONAL = {
    "masked_sum",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "clip_by_value",
    "entropy_from_logits",
    "calculate_sum_pi_squared_from_logits",
}


def wheel_path() -> Path | None:
    """The wheel to read, or None when there is none here."""
    named = os.environ.get("RLHF_VERL_WHEEL")
    if named:
        return Path(named) if Path(named).is_file() else None
    found = sorted(CACHE.glob(f"verl-{VERSION}-*.whl"))
    return found[0] if found else None


class AlgoConfig(SimpleNamespace):
    """Stands for ``verl.trainer.config.AlgoConfig`` (the losses check that they were not given one)."""


class DataProto(SimpleNamespace):
    """Stands for ``verl.protocol.DataProto`` where rollout_corr_helper wraps its IS weights in one."""

    @classmethod
    def from_dict(cls, tensors: dict[str, Any]) -> DataProto:
        return cls(batch=dict(tensors))


class ActorConfig(SimpleNamespace):
    """Stands for ``verl.workers.config.ActorConfig``: the attributes the policy losses read, and ``get``."""

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)


def actor_config(**values: Any) -> ActorConfig:
    """An actor config with veRL 0.9.1's defaults (trainer/config/actor/actor.yaml) where ``values`` say nothing;
    ``global_batch_info`` empty: each call aggregates over its own micro-batch (one rank, no step window)."""
    defaults = {
        "clip_ratio": 0.2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.2,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
        "loss_scale_factor": None,
        "global_batch_info": {},
        "policy_loss": {"loss_mode": "vanilla"},
    }
    return ActorConfig(**{**defaults, **values})


def _source(wheel: zipfile.ZipFile, module: str) -> str:
    return wheel.read(module).decode()


def _definitions(source: str, module: str, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Run only the top-level definitions of ``source`` named in ``names`` (functions and classes, their decorators
    removed, and constants assigned at the top level)."""
    tree = ast.parse(source, filename=module)
    kept = []
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            node.decorator_list = []
            # an import of veRL's own modules inside a function (the bypass loss's): the name comes from the
            # namespace instead, where the loader puts the definition it read
            node.body = [
                s for s in node.body if not (isinstance(s, ast.ImportFrom) and (s.module or "").startswith("verl"))
            ]
            kept.append(node)
            found.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
            kept.append(node)
            found.add(node.target.id)
    missing = names - found
    if missing:
        raise LookupError(f"{module} of veRL {VERSION} defines no {sorted(missing)}")
    code = compile(ast.Module(body=kept, type_ignores=[]), f"verl-{VERSION}/{module}", "exec")
    exec(code, namespace)  # noqa: S102 - the reference's own code, read from its wheel
    return {name: namespace[name] for name in names}


def load(wheel_file: Path) -> SimpleNamespace:
    """The functions of :data:`CORE` (``verl/trainer/ppo/core_algos.py``), of :data:`ROLLOUT_CORRECTION`
    (``SAFETY_BOUND``, its module's constant, supplied) and ``verl_F`` (the masked statistics of
    ``verl/utils/torch_functional.py`` they use)."""
    with zipfile.ZipFile(wheel_file) as wheel:
        functional = _definitions(
            _source(wheel, "verl/utils/torch_functional.py"),
            "verl/utils/torch_functional.py",
            TORCH_FUNCTIONAL,
            {"torch": torch},
        )
        verl_f = SimpleNamespace(**functional)
        core_namespace = {
            "torch": torch,
            "np": np,
            "defaultdict": defaultdict,
            "Optional": Optional,
            "Any": Any,
            "Callable": Callable,
            "DictConfig": dict,
            "AlgoConfig": AlgoConfig,
            "ActorConfig": ActorConfig,
            "verl_F": verl_f,
        }
        core = _definitions(
            _source(wheel, "verl/trainer/ppo/core_algos.py"), "verl/trainer/ppo/core_algos.py", CORE, core_namespace
        )
        correction = _definitions(
            _source(wheel, "verl/trainer/ppo/rollout_corr_helper.py"),
            "verl/trainer/ppo/rollout_corr_helper.py",
            ROLLOUT_CORRECTION,
            {
                "torch": torch,
                "math": math,
                "Any": Any,
                "Optional": Optional,
                "verl_F": verl_f,
                "SAFETY_BOUND": 20.0,
                "DataProto": DataProto,
            },
        )
    # what the bypass loss imports from rollout_corr_helper when it runs
    core_namespace["compute_rollout_correction_and_rejection_mask"] = correction[
        "compute_rollout_correction_and_rejection_mask"
    ]
    return SimpleNamespace(**core, **correction, verl_F=verl_f)

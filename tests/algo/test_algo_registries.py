"""Registries: duplicate names fail, unknown names list the valid ones, and the config strings are pinned."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import rlhf.algo as algo
from rlhf.algo.registry import DuplicateNameError, Registry, UnknownNameError


def test_register_returns_the_object_and_get_finds_it() -> None:
    reg: Registry[object] = Registry("thing")

    @reg.register("a")
    def a() -> None: ...

    assert reg.get("a") is a
    assert "a" in reg and "b" not in reg


def test_duplicate_registration_fails() -> None:
    reg: Registry[int] = Registry("thing")
    reg.add("x", 1)
    with pytest.raises(DuplicateNameError, match="'x' is already registered"):
        reg.add("x", 2)
    with pytest.raises(ValueError):
        reg.register("x")(3)
    assert reg.get("x") == 1  # the first definition survives


def test_unknown_name_lists_valid_names_and_is_both_key_and_value_error() -> None:
    reg: Registry[int] = Registry("thing")
    reg.add("beta", 1)
    reg.add("alpha", 2)
    with pytest.raises(UnknownNameError) as info:
        reg.get("gamma")
    assert str(info.value) == "unknown thing 'gamma'; valid: alpha, beta"
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)


def test_real_registry_unknown_name_lists_every_estimator() -> None:
    with pytest.raises(
        KeyError,
        match="valid: dr_grpo, flash_reinforce, gae, gpg, group_norm, grpo_passk, opd, opo, optimal_token_baseline, "
        "reinforce, reinforce_baseline, remax, rloo, tir_optimal_token_baseline",
    ):
        algo.ADVANTAGE_ESTIMATORS.get("grpo")


@pytest.mark.parametrize(
    ("registry", "names"),
    [
        (
            algo.ADVANTAGE_ESTIMATORS,
            {
                "gae",
                "reinforce",
                "reinforce_baseline",
                "rloo",
                "group_norm",
                "dr_grpo",
                "flash_reinforce",
                "opd",
                "gpg",
                "opo",
                "grpo_passk",
                "remax",
                "optimal_token_baseline",
                "tir_optimal_token_baseline",
            },
        ),
        (
            algo.POLICY_LOSSES,
            {"ppo", "gspo", "cispo", "gpg", "sapo", "geo_mean", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "dro"},
        ),
        (algo.KL_ESTIMATORS, {"k1", "k2", "k3", "abs"}),
        (
            algo.LOSS_AGGREGATIONS,
            {"token_mean", "seq_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum"}
            | {"token-mean", "seq-mean-token-mean"},  # OpenRLHF's --actor.loss_agg_mode names
        ),
        (algo.IS_GATINGS, {"ratio", "binary_kl", "tv"}),
        (algo.IS_MODES, {"mask", "clip"}),
        (algo.PREFERENCE_LOSSES, {"dpo", "cdpo", "ipo", "kto", "simpo", "orpo"}),
        (algo.RM_LOSSES, {"sigmoid", "logexp"}),
    ],
)
def test_registry_names_are_the_config_strings(registry: Registry[object], names: set[str]) -> None:
    assert set(registry.names()) == names


def test_algo_imports_only_torch_the_standard_library_and_the_config_vocabulary() -> None:
    # rlhf.spec.names is the one rlhf module outside algo it may read: the config's names and the estimators'
    # traits are declared there once (validation reads them without torch). Its own imports are the standard library
    # and rlhf.spec.registry (pinned below); loading it runs rlhf/spec/__init__ (omegaconf), as every rlhf process does.
    allowed = set(sys.stdlib_module_names) | {"torch", "rlhf", "__future__"}
    for path in Path(algo.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.name} imports {roots - allowed}"
            if "rlhf" in roots and isinstance(node, ast.ImportFrom):
                assert node.module.startswith("rlhf.algo") or node.module == "rlhf.spec.names", (
                    f"{path.name} imports {node.module}"
                )
    spec_dir = Path(algo.__file__).parent.parent / "spec"
    for name in ("names.py", "registry.py"):
        for node in ast.walk(ast.parse((spec_dir / name).read_text())):
            if isinstance(node, ast.Import):
                modules = {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                modules = {node.module or ""}
            else:
                continue
            allowed_here = {m for m in modules if m.split(".")[0] in sys.stdlib_module_names}
            assert modules - allowed_here <= {"rlhf.spec", "__future__"}, f"spec/{name} imports {modules}"

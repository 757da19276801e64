"""veRL's reward (``custom_reward_function.*``, ``reward_model.*``, or its default scorers by ``data_source``) ->
``reward.*`` in veRL's contract, and DAPO's overlong buffer -> ``algorithm.filters.*``."""

from __future__ import annotations

from rlhf.importers.verl.mapper import VerlMapper

# veRL's default scorer by its import path (rlhf.rewards.loader runs our copy of it when veRL is not installed)
VERL_DEFAULT_SCORER = "verl.utils.reward_score.default_compute_score"


def map_reward(m: VerlMapper) -> None:
    custom, rm = "custom_reward_function.path", "reward_model.enable"
    m.handled.update((custom, "custom_reward_function.name", rm, "reward_model.model.path"))
    m.reward_model = False
    if m.eff(custom, str):
        # veRL's own contract, read as it is: compute_score(data_source, solution_str, ground_truth, extra_info)
        name = m.eff("custom_reward_function.name", str) or "compute_score"
        m.put("reward.function", f"{m.eff(custom, str)}:{name}", custom, "custom_reward_function.name")
        m.values["reward.contract"] = "verl"
        m.carried["reward.contract"] = "veRL's compute_score(data_source, solution_str, ground_truth, extra_info)"
    elif m.eff(rm, bool):
        path = m.eff("reward_model.model.path", str)
        if path:
            m.put("reward.model_path", path, "reward_model.model.path", rm)
        else:
            m.need("reward.model_path", "", f"{rm}=True", "the reward model's folder (reward_model.model.path)")
        m.reward_model = True
    else:
        # veRL's built-in scorers, chosen per row by data_source (GSM8K's strict '#### N', MATH's boxed answer):
        # ours reproduce veRL 0.9.1's scores (rlhf.rewards.verl_scorers; veRL's own code when it is installed).
        m.values["reward.function"] = VERL_DEFAULT_SCORER
        m.carried["reward.function"] = "veRL's rule-based scorer per data_source (default_compute_score)"
        m.values["reward.contract"] = "verl"
        m.carried["reward.contract"] = "veRL's compute_score(data_source, solution_str, ground_truth, extra_info)"
    # veRL never clips scores; our default clip range would.
    m.values["reward.clip_range"] = None
    m.carried["reward.clip_range"] = "veRL's scoring, which never clips"
    buf = "reward_model.reward_kwargs.overlong_buffer_cfg"
    m.handled.update(f"{buf}.{x}" for x in ("enable", "len", "penalty_factor", "log"))
    m.handled.add("reward_model.reward_kwargs.max_resp_len")
    if m.eff(f"{buf}.enable", bool):
        length = m.eff(f"{buf}.len", int)
        if isinstance(length, int):
            m.put("algorithm.filters.overlong_buffer_len", length, f"{buf}.len", f"{buf}.enable")
        factor = m.eff(f"{buf}.penalty_factor", float)
        if isinstance(factor, float):
            m.put("algorithm.filters.overlong_penalty_factor", factor, f"{buf}.penalty_factor")
        m.explain("reward_model.reward_kwargs.max_resp_len", "rollout.max_new_tokens bounds the buffer here")
    manager = "reward_model.reward_manager"
    m.handled.add(manager)
    if m.given(manager):
        m.explain(manager, "scores go straight to the policy's advantages here (no reward manager)")

"""veRL's data settings (``data.*``: files, lengths, keys, overlong rows) -> ``data.*`` and ``rollout.max_new_tokens``;
the files and the length policy serve the SFT trainers too (rlhf.importers.verl.sft)."""

from __future__ import annotations

from rlhf.importers.verl.mapper import VerlMapper


def map_data_rl(m: VerlMapper) -> None:
    map_files(m)
    prompt, response = m.eff("data.max_prompt_length", int), m.eff("data.max_response_length", int)
    m.put("data.max_prompt_len", prompt, "data.max_prompt_length")
    m.put("rollout.max_new_tokens", response, "data.max_response_length")
    m.put("data.max_len", prompt + response, "data.max_prompt_length", "data.max_response_length")
    m.put("data.input_key", m.eff("data.prompt_key", str), "data.prompt_key")
    m.put("data.datasource_key", m.eff("data.reward_fn_key", str), "data.reward_fn_key")
    m.put("data.apply_chat_template", True, "data.prompt_key")
    if m.values.get("reward.verifier") or "reward.function" in m.values:
        # veRL's reward managers read every row's answer from this nested field; read here as it is
        m.values["data.label_key"] = "reward_model.ground_truth"
        m.carried["data.label_key"] = "veRL's reward managers: the row's reward_model.ground_truth"
    map_lengths_policy(m, "data.max_prompt_length")


def map_lengths_policy(m: VerlMapper, length_key: str) -> None:
    drop = m.eff("data.filter_overlong_prompts", bool) if m.rl else False
    trunc = m.eff("data.truncation", str)
    if drop:
        m.put("data.on_too_long", "drop", "data.filter_overlong_prompts")
    else:
        m.put("data.on_too_long", "truncate", "data.truncation")
        if trunc == "error":
            m.explain("data.truncation", "veRL stops on a row past the limit; here such rows are truncated")
    if drop and m.given("data.truncation"):
        m.explain("data.truncation", "overlong rows are dropped before it applies, in veRL too")
    m.handled.update(("data.filter_overlong_prompts", "data.truncation"))
    samples = m.eff("data.train_max_samples", int)
    if isinstance(samples, int) and samples > 0:
        m.put("data.max_samples", samples, "data.train_max_samples")
    m.handled.add("data.train_max_samples")


def map_files(m: VerlMapper) -> None:
    def files(k: str) -> list[str]:
        v = m.eff(k, (str, list))
        if v is None:
            return []
        return [str(x) for x in v] if isinstance(v, list) else [str(v)]

    train = files("data.train_files")
    m.put("data.train_files", train, "data.train_files")
    if "" in train and "data.train_files" not in m.unknown_k:
        m.need("data.train_files", train, "data.train_files=", "empty in the script: the training data to use")
    val = files("data.val_files")
    test_freq = m.eff("trainer.test_freq", int)
    m.handled.add("data.val_files")
    if val and isinstance(test_freq, int) and test_freq > 0:
        m.put("data.eval_files", val, "data.val_files")
        if "" in val and "data.val_files" not in m.unknown_k:
            m.need("data.eval_files", val, "data.val_files=", "empty in the script: the eval data to use")
    elif m.given("data.val_files"):
        m.put("data.eval_files", val, "data.val_files", carry=False)
        if not m.rl or test_freq is None or test_freq <= 0:
            m.explain("data.val_files", "evaluated at the end of each epoch (SFT) or never (test_freq -1)")

"""veRL's SFT trainers (``fsdp_sft_trainer``, ``sft_trainer``): their data, batch and token-budget settings ->
ours. The optimizer, engine, model and trainer settings go through the modules the RL entry uses."""

from __future__ import annotations

from rlhf.importers.verl.data import map_files, map_lengths_policy
from rlhf.importers.verl.mapper import UNSUPPORTED, VerlMapper


def map_sft(m: VerlMapper) -> None:
    map_files(m)
    engine = m.entry == "sft_trainer"
    if engine or m.eff("data.multiturn.enable", bool):
        key = "data.messages_key" if engine else "data.multiturn.messages_key"
        m.put("data.multiturn", True, key if engine else "data.multiturn.enable")
        m.put("data.input_key", m.eff(key, str), key)
        m.handled.update(("data.multiturn.enable", key))
        for k in ("data.prompt_key", "data.response_key", "data.prompt_dict_keys", "data.response_dict_keys"):
            if m.given(k):
                m.explain(k, "multi-turn rows: the conversation column (data.input_key) holds every turn")
    else:
        m.put("data.input_key", m.eff("data.prompt_key", str), "data.prompt_key")
        m.put("data.output_key", m.eff("data.response_key", str), "data.response_key")
        for side, ours in (("prompt", "data.input_key"), ("response", "data.output_key")):
            dk = f"data.{side}_dict_keys"
            keys = m.eff(dk, (list, str))
            if keys:  # veRL reads the field nested in that column: a dotted key here reads it as it is
                nested = ".".join(map(str, keys)) if isinstance(keys, list) else str(keys)
                m.put(ours, f"{m.values[ours]}.{nested}", f"data.{side}_key", dk)
            m.handled.add(dk)
    m.put("data.max_len", m.eff("data.max_length", int), "data.max_length")
    map_lengths_policy(m, "data.max_length")
    m.put("trainer.global_batch", m.eff("data.train_batch_size", int), "data.train_batch_size")
    micro = m.eff("data.micro_batch_size_per_gpu", int)
    m.put("trainer.micro_batch_per_device", micro, "data.micro_batch_size_per_gpu", "data.micro_batch_size")
    if m.given("data.micro_batch_size"):
        m.explain("data.micro_batch_size", "deprecated in veRL for micro_batch_size_per_gpu (used instead)")
    if m.given("data.chat_template"):
        m.put("model.chat_template", m.eff("data.chat_template", str), "data.chat_template")
    m.handled.add("data.chat_template")
    # veRL's SFT trainer (the engine one) cuts micro-batches by tokens by default: data.max_token_len_per_gpu.
    budget_k = "data.max_token_len_per_gpu"
    budget = m.eff(budget_k, int)
    if m.eff("data.use_dynamic_bsz", bool) and isinstance(budget, int) and budget > 0:
        m.put("trainer.packing", True, "data.use_dynamic_bsz")
        m.put("trainer.max_tokens_per_micro_batch", budget, "data.use_dynamic_bsz", budget_k)
        m.put("trainer.max_tokens_per_forward", budget, budget_k)
    elif m.eff("data.use_dynamic_bsz", bool):
        m.none(budget_k, UNSUPPORTED, "not a positive whole number of tokens; micro-batches by samples here")
    elif m.given(budget_k):
        m.explain(budget_k, "used only with data.use_dynamic_bsz=true (off), as veRL does")
    m.handled.update(("data.use_dynamic_bsz", budget_k))
    m.put("data.apply_chat_template", True, "data.prompt_key")

"""veRL's model settings (gradient checkpointing, LoRA, remote code, chat template, tokenizer, the critic's model and
value clip) -> ``model.*``, ``trainer.gradient_checkpointing`` and ``critic.*``."""

from __future__ import annotations

from rlhf.importers.verl.mapper import MODEL, VerlMapper


def map_model(m: VerlMapper) -> None:
    p = f"{MODEL}." if m.rl else "model."
    m.put(
        "trainer.gradient_checkpointing",
        bool(m.eff(p + "enable_gradient_checkpointing", bool)),
        p + "enable_gradient_checkpointing",
    )
    rank_k = p + "lora_rank"
    if m.rl and m.given(f"{MODEL}.lora.rank"):
        rank_k = f"{MODEL}.lora.rank"
    rank = m.eff(rank_k, int) or 0
    m.handled.update(
        (p + "lora_rank", f"{MODEL}.lora.rank", p + "lora_alpha", f"{MODEL}.lora.alpha", p + "target_modules")
    )
    if rank:
        alpha_k = f"{MODEL}.lora.alpha" if m.rl and m.given(f"{MODEL}.lora.alpha") else p + "lora_alpha"
        m.put("model.lora.rank", rank, rank_k)
        m.put("model.lora.alpha", m.eff(alpha_k, int) or 16, alpha_k)
        mods = m.eff(p + "target_modules", (str, list))
        m.put(
            "model.lora.target_modules",
            [str(m) for m in mods] if isinstance(mods, list) else [str(mods)],
            p + "target_modules",
        )
    m.put("model.trust_remote_code", bool(m.eff(p + "trust_remote_code", bool)), p + "trust_remote_code")
    if m.given(p + "custom_chat_template"):
        m.put("model.chat_template", m.eff(p + "custom_chat_template", str), p + "custom_chat_template")
    m.handled.add(p + "custom_chat_template")
    if m.given(f"{MODEL}.tokenizer_path"):
        m.put("model.tokenizer_path", m.eff(f"{MODEL}.tokenizer_path", str), f"{MODEL}.tokenizer_path")
    m.handled.add(f"{MODEL}.tokenizer_path")
    if m.rl:
        critic = m.eff("critic.model.path", str)
        policy = m.eff(f"{MODEL}.path", str)
        if critic and critic != policy:
            m.put("critic.model_path", critic, "critic.model.path")
        elif critic:
            m.explain("critic.model.path", "the policy's model: an empty critic.model_path means it here")
        m.handled.add("critic.model.path")
        m.put("critic.value_clip", m.eff("critic.cliprange_value", float), "critic.cliprange_value")

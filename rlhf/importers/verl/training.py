"""How veRL trains (shared by its RL and SFT entries): the optimizer and its schedule (``optim.*``) -> ``trainer.*``,
and the training engine (FSDP strategy, offload) -> ``trainer.backend`` (FSDP2) or DeepSpeed ZeRO-3, whichever this
schema has."""

from __future__ import annotations

from rlhf.importers.verl.mapper import ACTOR, MODEL, REF, UNSUPPORTED, VerlMapper


def map_optimizer(m: VerlMapper) -> None:
    p = f"{ACTOR}.optim." if m.rl else "optim."
    sched_k = p + ("lr_scheduler_type" if m.rl else "lr_scheduler")
    m.put("trainer.lr", m.eff(p + "lr", float), p + "lr")
    if m.rl:
        m.put("trainer.critic_lr", m.eff("critic.optim.lr", float), "critic.optim.lr")
    betas = m.eff(p + "betas", list)
    if isinstance(betas, list) and len(betas) == 2 and all(isinstance(b, (int, float)) for b in betas):
        m.put("trainer.betas", [float(b) for b in betas], p + "betas")
    else:
        m.none(p + "betas", UNSUPPORTED, f"{betas!r}: two numbers")
    m.put("trainer.weight_decay", m.eff(p + "weight_decay", float), p + "weight_decay")
    m.put("trainer.max_norm", m.eff(p + "clip_grad", float), p + "clip_grad")
    ratio = m.eff(p + "lr_warmup_steps_ratio", float)
    steps = m.eff(p + "lr_warmup_steps", int) if m.rl else None
    m.put("trainer.warmup_ratio", ratio, p + "lr_warmup_steps_ratio")
    if isinstance(steps, int) and steps > 0:
        m.none(p + "lr_warmup_steps", UNSUPPORTED, "a warm-up in steps; trainer.warmup_ratio is a fraction")
    m.handled.add(p + "lr_warmup_steps")
    sched = m.eff(sched_k, str)
    min_ratio = m.eff(p + "min_lr_ratio", float)
    if sched == "cosine":
        m.put("trainer.lr_scheduler", "cosine_with_min_lr", sched_k)
        m.put("trainer.min_lr_ratio", min_ratio, p + "min_lr_ratio", sched_k)
    elif sched == "constant":
        m.put("trainer.lr_scheduler", "constant_with_warmup" if ratio else "constant", sched_k)
    else:
        m.none(sched_k, UNSUPPORTED, f"the {sched} schedule; constant or cosine")
    m.handled.add(p + "min_lr_ratio")
    if m.given(p + "optimizer") and str(m.eff(p + "optimizer", str)).lower() != "adamw":
        m.none(p + "optimizer", UNSUPPORTED, f"{m.eff(p + 'optimizer')}; AdamW here")
    elif m.given(p + "optimizer"):
        m.explain(p + "optimizer", "AdamW, as here")
    m.handled.add(p + "optimizer")
    m.values["trainer.precision"] = "fp32" if m.cpu else "bf16"
    m.carried["trainer.precision"] = "veRL's FSDP mixed precision (bf16 compute, fp32 master weights)"


def map_engine(m: VerlMapper) -> None:
    if m.rl:
        strat_k, param_k, optim_k = (
            f"{ACTOR}.strategy",
            f"{ACTOR}.fsdp_config.param_offload",
            f"{ACTOR}.fsdp_config.optimizer_offload",
        )
        reshard_k = f"{ACTOR}.fsdp_config.reshard_after_forward"
    elif m.entry == "sft_trainer":
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
    m.handled.update(k for k in (strat_k, param_k, optim_k, reshard_k) if k)
    strategy = m.eff(strat_k, str)
    param_off, optim_off = bool(m.eff(param_k, bool)), bool(m.eff(optim_k, bool))
    if strategy == "megatron":
        m.none(
            strat_k,
            UNSUPPORTED,
            "Megatron-LM training (tensor and pipeline parallelism); sharded data "
            "parallelism instead (FSDP2, or DeepSpeed ZeRO-3)",
        )
    fsdp2 = m.schema_allows("trainer.backend", "fsdp2")
    if fsdp2:
        m.put("trainer.backend", "fsdp2", strat_k)
        if strategy == "fsdp":
            m.explain(strat_k, "veRL's fsdp is FSDP1; FSDP2 here shards parameters, gradients and states alike")
        if param_off or optim_off:
            if m.schema_has("trainer.fsdp2.cpu_offload"):
                m.put("trainer.fsdp2.cpu_offload", True, param_k, optim_k)
                if param_off != optim_off:
                    m.explain(param_k if param_off else optim_k, "FSDP2's CPU offload moves both here")
        elif m.given(param_k) or m.given(optim_k):
            for k in (param_k, optim_k):
                if m.given(k):
                    m.explain(k, "off, as here")
        if reshard_k and m.given(reshard_k) and m.schema_has("trainer.fsdp2.reshard_after_forward"):
            m.put("trainer.fsdp2.reshard_after_forward", m.eff(reshard_k, bool), reshard_k)
    else:
        # FSDP's full sharding is ZeRO-3's: parameters, gradients and optimizer states split over the ranks.
        m.put("trainer.zero_stage", 3, strat_k)
        if strategy in ("fsdp", "fsdp2") or strategy is None:
            m.coming(strat_k, "trainer.backend", "fsdp2", "DeepSpeed ZeRO-3, which shards the same way")
            if not m.given(strat_k):
                m.notes.append(
                    f"trainer.zero_stage=3: veRL trains with FSDP ({strat_k}={strategy}); DeepSpeed ZeRO-3 shards "
                    "parameters, gradients and optimizer states alike; trainer.backend=fsdp2 is coming (import "
                    "again once this version has it)"
                )
        lora = bool(m.eff(f"{MODEL}.lora_rank" if m.rl else "model.lora_rank", int))
        if param_off and lora:
            # DeepSpeed here cannot offload ZeRO-3 parameters under LoRA (validation refuses it).
            m.none(
                param_k,
                UNSUPPORTED,
                "parameter offload with LoRA under DeepSpeed ZeRO-3; off (FSDP2's "
                "CPU offload carries it once trainer.backend=fsdp2 exists)",
            )
            param_off = False
        m.put("trainer.offload_params", param_off, param_k)
        m.put("trainer.offload_optimizer", optim_off, optim_k)
        if optim_off:
            m.put("trainer.optimizer", "cpu_adam", optim_k)
    if m.rl:
        m.put(
            "reference.offload",
            bool(m.eff(f"{REF}.fsdp_config.param_offload", bool)),
            f"{REF}.fsdp_config.param_offload",
        )
        for k in ("critic.fsdp.param_offload", "critic.fsdp.optimizer_offload"):
            if m.given(k) and bool(m.eff(k, bool)) != (param_off if "param" in k else optim_off):
                m.none(k, UNSUPPORTED, "a critic offload of its own; the training engine's settings are shared")
            elif m.given(k):
                m.explain(k, "the policy's too: shared by every trained role here")
            m.handled.add(k)

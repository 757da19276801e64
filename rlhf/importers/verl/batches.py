"""veRL's batch sizes and token budgets -> ours (the derived values are equal; tests/importers pins them):

    data.train_batch_size (prompts per step)             -> rollout.prompts_per_step
    actor_rollout_ref.rollout.n                          -> rollout.samples_per_prompt
    actor.ppo_mini_batch_size (prompts per optimizer step) x n -> trainer.global_batch (samples per optimizer step)
    actor.ppo_micro_batch_size_per_gpu (samples)         -> trainer.micro_batch_per_device
    actor.ppo_epochs                                     -> trainer.epochs_per_rollout

so optimizer steps per RL step = train_batch_size / ppo_mini_batch_size x ppo_epochs and gradient accumulation =
ppo_mini_batch_size x n / data-parallel ranks / micro batch, as veRL's trainer computes them (ray_trainer.py
``_update_actor``: the mini-batch is multiplied by rollout.n, then split over the data-parallel ranks). veRL's dynamic
batch size (``use_dynamic_bsz``, token budgets per GPU) -> trainer.packing and the two budgets of ours."""

from __future__ import annotations

from typing import Any

from rlhf.importers.verl.mapper import ACTOR, REF, ROLLOUT, UNSUPPORTED, VerlMapper
from rlhf.importers.verl.sequence import actor_size


def verl_steps_per_rollout(train_batch_size: int, ppo_mini_batch_size: int, ppo_epochs: int) -> int:
    """Optimizer steps per RL step in veRL: the rollout batch is cut into mini-batches of ppo_mini_batch_size
    prompts (x rollout.n samples), each one optimizer step, ppo_epochs times."""
    return train_batch_size // ppo_mini_batch_size * ppo_epochs


def verl_grad_accum(ppo_mini_batch_size: int, n: int, data_parallel: int, micro_per_gpu: int) -> int:
    """Micro-batches per optimizer step on each rank in veRL: mini x n samples over the ranks, micro per pass."""
    return ppo_mini_batch_size * n // data_parallel // micro_per_gpu


def map_batches(m: VerlMapper) -> None:
    mini_k, micro_k, n_k = (
        f"{ACTOR}.ppo_mini_batch_size",
        f"{ACTOR}.ppo_micro_batch_size_per_gpu",
        f"{ROLLOUT}.n",
    )
    n = m.eff(n_k, int)
    m.put("rollout.prompts_per_step", m.eff("data.train_batch_size", int), "data.train_batch_size")
    m.put("rollout.samples_per_prompt", n, n_k)
    mini = m.eff(mini_k, int)
    m.put("trainer.global_batch", mini * n, mini_k, n_k)
    m.explain(mini_k, f"prompts per optimizer step x rollout.n ({n}) = samples per optimizer step")
    micro = m.eff(micro_k, int)
    if micro is None and m.given(f"{ACTOR}.ppo_micro_batch_size"):
        total = m.eff(f"{ACTOR}.ppo_micro_batch_size", int)
        world = m.eff("trainer.nnodes", int) * m.eff("trainer.n_gpus_per_node", int)
        groups = max(world // actor_size(m), 1)  # veRL divides by the data-parallel size (world / Ulysses size)
        micro = max(total // groups, 1) if isinstance(total, int) else None
        if micro is not None:
            m.put("trainer.micro_batch_per_device", micro, f"{ACTOR}.ppo_micro_batch_size")
            m.explain(f"{ACTOR}.ppo_micro_batch_size", f"a global micro batch: {total} / {groups} data-parallel ranks")
    elif micro is not None:
        m.put("trainer.micro_batch_per_device", micro, micro_k)
    if micro is None:
        dynamic = m.eff(f"{ACTOR}.use_dynamic_bsz", bool)
        m.values["trainer.micro_batch_per_device"] = 1
        m.notes.append(
            "trainer.micro_batch_per_device=1: the command sets no ppo_micro_batch_size_per_gpu"
            + (" (veRL packs micro-batches by tokens: use_dynamic_bsz)" if dynamic else " (veRL requires one)")
        )
    m.handled.add(f"{ACTOR}.ppo_micro_batch_size")
    m.put("trainer.epochs_per_rollout", m.eff(f"{ACTOR}.ppo_epochs", int), f"{ACTOR}.ppo_epochs")
    for k in (f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", f"{REF}.log_prob_micro_batch_size_per_gpu"):
        if m.given(k) and isinstance(m.eff(k, int), int):
            m.put("rollout.micro_batch_per_device", m.eff(k, int), k)
            break
    for k in (f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", f"{REF}.log_prob_micro_batch_size_per_gpu"):
        if m.given(k) and "rollout.micro_batch_per_device" in m.outcome(k).keys:
            continue
        if m.given(k):
            m.explain(k, "one forward micro-batch here for log-probs, values and rewards: the first one given")
    m.handled.update((f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", f"{REF}.log_prob_micro_batch_size_per_gpu"))
    cmicro = "critic.ppo_micro_batch_size_per_gpu"
    if m.given(cmicro):
        if m.eff(cmicro, int) == m.values.get("trainer.micro_batch_per_device"):
            m.explain(cmicro, "the policy's too: trainer.micro_batch_per_device is shared here")
        else:
            m.none(cmicro, UNSUPPORTED, "a critic micro batch of its own; shared here, the policy's is kept")
    cmini = "critic.ppo_mini_batch_size"
    if m.given(cmini) and m.eff(cmini, int) != mini:
        m.none(cmini, UNSUPPORTED, "a critic mini-batch of its own; trainer.global_batch is shared here")
    m.handled.update((cmicro, cmini))
    _token_budgets(m)


def _token_budgets(m: VerlMapper) -> None:
    """veRL's dynamic batch size: micro-batches cut by a token budget per GPU, for the policy's updates
    (``actor.ppo_max_token_len_per_gpu``) and for the log-prob passes (``rollout``/``ref``
    ``log_prob_max_token_len_per_gpu``, which default to the actor's switch and budget). One budget for the
    updates and one for the passes without gradients here: trainer.max_tokens_per_micro_batch and
    trainer.max_tokens_per_forward, shared by every role. Budgets are packed tokens, as veRL's are."""
    dyn_k, budget_k = f"{ACTOR}.use_dynamic_bsz", f"{ACTOR}.ppo_max_token_len_per_gpu"
    dynamic = bool(m.eff(dyn_k, bool))
    budget = m.eff(budget_k, int)
    if dynamic and isinstance(budget, int) and budget > 0:
        m.put("trainer.packing", True, dyn_k)
        m.put("trainer.max_tokens_per_micro_batch", budget, dyn_k, budget_k)
    elif dynamic:
        m.none(budget_k, UNSUPPORTED, "not a positive whole number of tokens; micro-batches by samples here")
    else:
        if m.given(dyn_k):
            m.explain(dyn_k, "off, as here")
        if m.given(budget_k):
            m.explain(budget_k, "used only with use_dynamic_bsz=true (off), as veRL does")
    m.handled.update((dyn_k, budget_k))
    passes = []  # (switch key, budget key) of each log-prob pass veRL makes with a token budget
    for role in (ROLLOUT, REF):
        pdyn_k, pbudget_k = f"{role}.log_prob_use_dynamic_bsz", f"{role}.log_prob_max_token_len_per_gpu"
        on = m.eff(pdyn_k, bool) if m.given(pdyn_k) else dynamic
        if on:
            passes.append((pdyn_k, pbudget_k))
        elif m.given(pbudget_k):
            m.explain(pbudget_k, "used only with log_prob_use_dynamic_bsz=true (off), as veRL does")
        if m.given(pdyn_k) and not on:
            m.explain(pdyn_k, "off, as here")
        m.handled.update((pdyn_k, pbudget_k))
    chosen = None
    for pdyn_k, pbudget_k in passes:
        value = m.eff(pbudget_k, int) if m.given(pbudget_k) else budget
        if not isinstance(value, int) or value <= 0:
            m.none(pbudget_k, UNSUPPORTED, "not a positive whole number of tokens")
        elif chosen is None:
            chosen = value
            m.put("trainer.packing", True, pdyn_k)
            m.put("trainer.max_tokens_per_forward", value, pdyn_k, pbudget_k)
        elif value != chosen:
            m.none(pbudget_k, UNSUPPORTED, f"a budget of its own; one forward budget here ({chosen}), kept")
        elif m.given(pbudget_k):
            m.explain(pbudget_k, "the same budget, shared: trainer.max_tokens_per_forward")
    _critic_budgets(m, dynamic, budget)


def _critic_budgets(m: VerlMapper, dynamic: bool, budget: Any) -> None:
    """The critic's budgets (``critic.use_dynamic_bsz`` defaults to the actor's): shared with the policy here."""
    dyn_k = "critic.use_dynamic_bsz"
    keys = (dyn_k, "critic.ppo_max_token_len_per_gpu", "critic.forward_max_token_len_per_gpu")
    on = m.eff(dyn_k, bool) if m.given(dyn_k) else dynamic
    shared = {"critic.ppo_max_token_len_per_gpu": "trainer.max_tokens_per_micro_batch"}
    shared["critic.forward_max_token_len_per_gpu"] = "trainer.max_tokens_per_forward"
    for k in keys[1:]:
        if not m.given(k):
            continue
        ours = m.values.get(shared[k])
        if not on:
            m.explain(k, "used only with critic.use_dynamic_bsz=true (off), as veRL does")
        elif m.eff(k, int) == ours:
            m.explain(k, f"the policy's too: {shared[k]} is shared here")
        else:
            m.none(k, UNSUPPORTED, f"a critic budget of its own; {shared[k]} is shared here, the policy's kept")
    if m.given(dyn_k) and bool(on) != dynamic:
        m.none(dyn_k, UNSUPPORTED, "the critic's own switch; token budgets are shared here, the policy's kept")
    m.handled.update(keys)

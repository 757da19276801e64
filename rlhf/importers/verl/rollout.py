"""veRL's rollout engine and sampling (``actor_rollout_ref.rollout.*``) -> ``rollout.*`` and ``eval.*``.

The engine: veRL's ``rollout.name`` is ours where it names a registered rollout backend (rlhf.spec.registry
ROLLOUT_BACKENDS), so a backend added there is imported without an edit here; anything else runs on vLLM, veRL's
default engine."""

from __future__ import annotations

from rlhf.importers.verl import vocab
from rlhf.importers.verl.mapper import NOT_NEEDED, ROLLOUT, UNSUPPORTED, VerlMapper
from rlhf.spec.registry import ROLLOUT_BACKENDS


def map_rollout(m: VerlMapper) -> None:
    name_k = f"{ROLLOUT}.name"
    name = m.eff(name_k, str)
    m.backend = "vllm"
    if name in ROLLOUT_BACKENDS:  # veRL's engine names ours where it names a registered backend
        m.backend = name
        m.explain(name_k, f"rollout={name}")
    elif name is None:
        m.notes.append(f"rollout: the command does not set {name_k} (veRL requires it); vllm chosen")
    else:
        m.none(name_k, UNSUPPORTED, f"{name} as a rollout engine; the recipe uses vllm")
    m.handled.add(name_k)
    tp = m.eff(f"{ROLLOUT}.tensor_model_parallel_size", int)
    m.put("rollout.tensor_parallel_size", tp, f"{ROLLOUT}.tensor_model_parallel_size")
    greedy = m.eff(f"{ROLLOUT}.do_sample", bool) is False
    temp = 0.0 if greedy else m.eff(f"{ROLLOUT}.temperature", float)
    m.put("rollout.temperature", temp, f"{ROLLOUT}.temperature", f"{ROLLOUT}.do_sample")
    m.put("rollout.top_p", m.eff(f"{ROLLOUT}.top_p", float), f"{ROLLOUT}.top_p")
    m.put("rollout.top_k", m.eff(f"{ROLLOUT}.top_k", int), f"{ROLLOUT}.top_k")
    m.put("rollout.enable_sleep", m.eff(f"{ROLLOUT}.free_cache_engine", bool), f"{ROLLOUT}.free_cache_engine")
    _vllm_keys(m)
    vgreedy = m.eff(f"{ROLLOUT}.val_kwargs.do_sample", bool) is False
    vtemp = 0.0 if vgreedy else m.eff(f"{ROLLOUT}.val_kwargs.temperature", float)
    m.put("eval.temperature", vtemp, f"{ROLLOUT}.val_kwargs.temperature", f"{ROLLOUT}.val_kwargs.do_sample")
    m.put("eval.samples_per_prompt", m.eff(f"{ROLLOUT}.val_kwargs.n", int), f"{ROLLOUT}.val_kwargs.n")
    tools = [f"{ROLLOUT}.multi_turn.{k}" for k in ("tool_config_path", "interaction_config_path")]
    config = next((str(o.value) for o in m.cmd.overrides if o.flag in ("--config-name", "-cn")), "")
    if m.eff(f"{ROLLOUT}.multi_turn.enable", bool) or any(m.given(k) for k in tools) or "multiturn" in config:
        if m.given(f"{ROLLOUT}.multi_turn.enable"):
            m.none(f"{ROLLOUT}.multi_turn.enable", *vocab.no_equivalent(f"{ROLLOUT}.multi_turn.enable"))
        m.notes.append(
            "multi-turn: veRL's tool-calling rollouts have no equivalent here; the recipe trains single-turn "
            "(an agent file of OpenRLHF's protocol would be agent.path=FILE)"
        )


def _vllm_keys(m: VerlMapper) -> None:
    """vLLM's own keys (``rollout.vllm.*``), written for rollout=vllm only: under rollout=hf they would be
    ignored (the preflight says so), so they are reported instead."""
    keys = {
        "gpu_memory_utilization": float,
        "enforce_eager": bool,
        "enable_prefix_caching": bool,
        "max_num_seqs": int,
    }
    for name, kind in keys.items():
        k = f"{ROLLOUT}.{name}"
        if m.backend != "vllm":
            m.none(k, NOT_NEEDED, f"vLLM's own key (rollout.vllm.{name}); rollout={m.backend} has none")
        elif name != "max_num_seqs" or m.given(k):  # max_num_seqs: ours sizes itself unless the command set it
            m.put(f"rollout.vllm.{name}", m.eff(k, kind), k)
        m.handled.add(k)

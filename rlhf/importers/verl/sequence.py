"""veRL's Ulysses sequence parallelism -> ``trainer.sequence_parallel_size``.

veRL 0.9.1 reads the size of each role from its engine config (``<role>.fsdp_config.ulysses_sequence_parallel_size``;
the critic's ``critic.fsdp.``), and still takes the deprecated ``<role>.ulysses_sequence_parallel_size``, which wins
when above 1 (workers/config/actor.py ``__post_init__``); the reference's defaults to the actor's. Both sides run
Ulysses (an all-to-all of q, k, v between columns and heads): the same split, and every rank of a group of N takes
the same micro-batch, so veRL's data-parallel size (world / N, ``get_data_parallel_size``), its mini-batch per rank
and its gradient accumulation are ours. One key here splits every model role's forwards, so a reference or critic
size of its own is reported and the actor's kept. The SFT trainers: ``ulysses_sequence_parallel_size``
(fsdp_sft_trainer) and ``engine.ulysses_sequence_parallel_size`` (sft_trainer).
"""

from __future__ import annotations

from rlhf.importers.verl.mapper import ACTOR, REF, UNSUPPORTED, VerlMapper

KEY = "trainer.sequence_parallel_size"
WHY = (
    "Ulysses here as in veRL (q, k, v exchanged between columns and heads); the data-parallel size is the world / {n} "
    "in both, so the batches and the gradient accumulation are veRL's"
)


def _size(m: VerlMapper, deprecated: str, engine: str, default: int = 1) -> tuple[int, list[str]]:
    """(the size veRL runs the role with, the keys that said so): the deprecated key above 1, else the engine's."""
    old, new = m.eff(deprecated, int), m.eff(engine, int)
    if isinstance(old, int) and old > 1:
        return old, [deprecated]
    if m.given(engine) and isinstance(new, int):
        return new, [engine]
    if m.given(deprecated) and isinstance(old, int):
        return old, [deprecated]
    return default, []


def actor_size(m: VerlMapper) -> int:
    """The actor's (the policy's) Ulysses size as veRL runs it (1 without sequence parallelism)."""
    if m.rl:
        keys = (f"{ACTOR}.ulysses_sequence_parallel_size", f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size")
    elif m.entry == "sft_trainer":
        keys = ("ulysses_sequence_parallel_size", "engine.ulysses_sequence_parallel_size")
    else:
        keys = ("ulysses_sequence_parallel_size", "ulysses_sequence_parallel_size")
    return max(_size(m, *keys)[0], 1)


def map_sequence(m: VerlMapper) -> None:
    if m.rl:
        keys = (f"{ACTOR}.ulysses_sequence_parallel_size", f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size")
        others = {
            "reference": (f"{REF}.ulysses_sequence_parallel_size", f"{REF}.fsdp_config.ulysses_sequence_parallel_size"),
            "critic": ("critic.ulysses_sequence_parallel_size", "critic.fsdp.ulysses_sequence_parallel_size"),
        }
    elif m.entry == "sft_trainer":
        keys, others = ("ulysses_sequence_parallel_size", "engine.ulysses_sequence_parallel_size"), {}
    else:
        keys, others = ("ulysses_sequence_parallel_size", "ulysses_sequence_parallel_size"), {}
    n, said = _size(m, *keys)
    keys = tuple(dict.fromkeys(keys))
    m.handled.update(keys)
    if n > 1 and not m.schema_has(KEY):
        for k in said:
            m.none(k, UNSUPPORTED, "sequence parallelism (this version's schema has no trainer.sequence_parallel_size)")
    elif n > 1:
        m.put(KEY, n, *said)
        for k in said:
            m.explain(k, WHY.format(n=n))
    for k in keys:
        if m.given(k) and k not in said:
            m.explain(k, f"{'the deprecated key' if 'fsdp' in k or 'engine' in k else 'the engine key'} decides: {n}")
        elif m.given(k) and n == 1:
            m.explain(k, "1: none, as here")
    for role, pair in others.items():
        size, given = _size(m, *pair, default=n)
        m.handled.update(pair)
        for k in given:
            if size == n:
                m.explain(k, f"the policy's size: {KEY} splits every model role's forwards here")
            else:
                m.none(
                    k,
                    UNSUPPORTED,
                    f"a {role} size of its own ({size}); {KEY} splits every model role's forwards here, so the "
                    f"policy's ({n}) is kept",
                )

"""The reward-function contracts, keyed by ``reward.contract``'s names, and the choice among them from a function's
signature (never its name).

A contract fits a signature when its call binds to it; a signature that names a parameter only one contract uses
(its ``markers``: OpenRLHF's ``queries``/``labels``, veRL's ``solution_str``/``ground_truth``/..., TRL's
``completions``/``completion_ids``/...) is read in that contract; otherwise the one contract that fits. Two fitting
and nothing to tell them apart (``def f(**kwargs)``), or markers of two, is refused naming the choices.
"""

from __future__ import annotations

from collections.abc import Callable

from rlhf.rewards.contracts.base import CallOptions, Contract, Scores
from rlhf.rewards.contracts.openrlhf import OpenRLHFContract
from rlhf.rewards.contracts.signature import Params
from rlhf.rewards.contracts.trl import TRLContract
from rlhf.rewards.contracts.verl import VerlContract

#: reward.contract's names (besides ``auto``) -> a factory of the contract (one instance per function: a call
#: keeps what the function logged until it is read).
CONTRACTS: dict[str, Callable[[], Contract]] = {
    "openrlhf": OpenRLHFContract,
    "verl": VerlContract,
    "trl": TRLContract,
}


class NoContract(ValueError):
    """No contract (or several) fits a signature; the message says which and how to choose."""


def choose(params: Params | None, forced: str = "auto") -> Contract:
    """The contract of a function with ``params``: ``forced`` when it is not ``auto`` (checked to bind), else the
    one its signature shows. NoContract says why none or several."""
    if forced != "auto":
        contract = CONTRACTS[forced]()
        why = contract.binds(params) if params is not None else None
        if why:
            raise NoContract(f"reward.contract={forced}, but {why}; define it as {contract.definition}")
        return contract
    if params is None:
        raise NoContract(f"its signature cannot be read; set reward.contract to one of {', '.join(CONTRACTS)}")
    contracts = {name: make() for name, make in CONTRACTS.items()}
    fitting = {n: c for n, c in contracts.items() if c.binds(params) is None}
    marked = {n: sorted(c.markers & params.names) for n, c in fitting.items() if c.markers & params.names}
    if len(marked) == 1:
        return fitting[next(iter(marked))]
    choices = ", ".join(f"reward.contract={n}" for n in CONTRACTS)
    if len(marked) > 1:
        named = "; ".join(f"{n} ({', '.join(m)})" for n, m in marked.items())
        raise NoContract(f"({params.shown()}) names parameters of several contracts: {named}; set one of {choices}")
    if len(fitting) == 1:
        return next(iter(fitting.values()))
    if fitting:
        raise NoContract(
            f"({params.shown()}) fits {' and '.join(fitting)} alike; set one of {choices}, or name the parameters "
            "as one of them does"
        )
    why = "; ".join(f"{n}: {c.binds(params)}" for n, c in contracts.items())
    defs = " | ".join(c.definition for c in contracts.values())
    raise NoContract(f"({params.shown()}) fits no contract ({why}); define it as one of: {defs}")


__all__ = ["CONTRACTS", "CallOptions", "Contract", "NoContract", "Params", "Scores", "choose"]

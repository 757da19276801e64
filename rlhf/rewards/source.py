"""One interface over every reward source, chosen from the reward section of the spec.

    source = make_reward_source(spec.reward)
    result = source.score(queries, prompts, responses, labels)     # RewardResult, one entry per sample

``queries`` are the full texts (prompt + response, decoded with special tokens, as OpenRLHF sends them),
``prompts`` the prompt texts, ``responses`` the response texts and ``labels`` the data labels ("" when none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from rlhf.rewards.function_source import FunctionReward
from rlhf.rewards.remote import RemoteReward
from rlhf.rewards.result import RewardError, RewardResult, coerce_result
from rlhf.rewards.verifiers import TIMED_VERIFIERS, verify
from rlhf.spec.derive import REWARD_SOURCE_KEYS_TEXT, reward_keys_set
from rlhf.spec.schema import ExperimentSpec, RewardSpec


@runtime_checkable
class RewardSource(Protocol):
    def score(
        self, queries: Sequence[str], prompts: Sequence[str], responses: Sequence[str], labels: Sequence[str]
    ) -> RewardResult: ...


class VerifierReward:
    """A built-in verifier (``reward.verifier``)."""

    def __init__(self, name: str, **options: Any) -> None:
        self.name, self.options = name, options

    def score(
        self, queries: Sequence[str], prompts: Sequence[str], responses: Sequence[str], labels: Sequence[str]
    ) -> RewardResult:
        return verify(self.name, queries, prompts, responses, labels, **self.options)


ModelScorer = Callable[[Sequence[str], Sequence[str], Sequence[str], Sequence[str]], Any]


class ModelReward:
    """The hook for the reward-model role: the reward worker owns the model and passes its scoring call
    (``scorer(queries, prompts, responses, labels) -> rewards``, a list/tensor or a reward dict), so the RL loop
    treats a reward model like any other source."""

    def __init__(self, scorer: ModelScorer, name: str = "reward model") -> None:
        self.scorer, self.name = scorer, name

    def score(
        self, queries: Sequence[str], prompts: Sequence[str], responses: Sequence[str], labels: Sequence[str]
    ) -> RewardResult:
        return coerce_result(self.scorer(queries, prompts, responses, labels), len(queries), self.name)


def make_reward_source(spec: RewardSpec | ExperimentSpec, model_scorer: ModelScorer | None = None) -> RewardSource:
    """The source the spec names: reward.function, reward.urls, reward.verifier, or the reward model (which
    needs ``model_scorer`` from the reward worker). Exactly one must be set."""
    r = spec.reward if isinstance(spec, ExperimentSpec) else spec
    named = reward_keys_set(r)  # the rule validation checks, for a spec built without it
    if len(named) != 1:
        found = ", ".join(f"reward.{k}" for k in named) or "none"
        raise RewardError(f"set exactly one reward source ({REWARD_SOURCE_KEYS_TEXT}); got {found}")
    if r.function:
        options: dict[str, Any] = {}
        if isinstance(spec, ExperimentSpec):  # TRL functions get the label by its column's name
            options = {"label_key": spec.data.label_key}
        return FunctionReward(r.functions(), r.contract, r.weights, r.multi_objective_aggregation, **options)
    if r.urls:
        return RemoteReward(r.urls, r.timeout_s, r.retries, r.request_batch)
    if r.verifier:
        options = {"timeout_s": r.verifier_timeout_s} if r.verifier in TIMED_VERIFIERS else {}
        return VerifierReward(r.verifier, **options)
    if model_scorer is None:
        raise RewardError(
            f"reward.model_path={r.model_path!r}: a reward model is scored by the reward worker; pass its scorer as "
            "make_reward_source(spec, model_scorer=...)"
        )
    return ModelReward(model_scorer, f"reward model {r.model_path}")

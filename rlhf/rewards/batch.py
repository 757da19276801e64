"""What a reward source is given for one batch of samples.

Every source takes ``score(queries, prompts, responses, labels)``; the reward functions of TRL and veRL need more
(the dataset columns, the completion's token ids, the data source, the step), so the RL pipeline hands a
:class:`RewardBatch` to :func:`score_batch`, which gives it whole to a source that reads one (``score_batch``) and
the four lists to the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlhf.rewards.result import RewardResult


@dataclass
class RewardBatch:
    """One batch of samples, the ``group_size`` samples of a prompt contiguous.

    ``queries``: prompt + response texts (special tokens kept, as OpenRLHF sends them); ``responses``: the response
    texts likewise; ``completions``: the responses decoded without special tokens (what TRL and veRL hand their
    functions); ``rows``: each sample's prompt record (``prompt``, ``label``, ``datasource`` and, where the data
    gives them, ``columns``: the dataset's columns not consumed, and ``raw_prompt``: the prompt before its chat
    template, a string or a message list); ``completion_ids``: the generated token ids."""

    queries: list[str]
    prompts: list[str]
    responses: list[str]
    labels: list[Any]
    completions: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    completion_ids: list[list[int]] = field(default_factory=list)
    group_size: int = 1
    step: int = 0
    max_steps: int = 0

    def __post_init__(self) -> None:
        n = len(self.queries)
        if not self.completions:
            self.completions = list(self.responses)
        if not self.rows:
            self.rows = [{"prompt": p, "label": lab} for p, lab in zip(self.prompts, self.labels, strict=True)]
        if not self.completion_ids:
            self.completion_ids = [[] for _ in range(n)]

    def __len__(self) -> int:
        return len(self.queries)

    def slice(self, a: int, b: int) -> RewardBatch:
        """Samples ``a`` to ``b`` (the one-sample calls that find a failing sample)."""
        return RewardBatch(
            self.queries[a:b],
            self.prompts[a:b],
            self.responses[a:b],
            self.labels[a:b],
            self.completions[a:b],
            self.rows[a:b],
            self.completion_ids[a:b],
            group_size=1,
            step=self.step,
            max_steps=self.max_steps,
        )


def score_batch(source: Any, batch: RewardBatch) -> RewardResult:
    """``source``'s result for ``batch``: the whole batch where it reads one, else the four lists."""
    whole = getattr(source, "score_batch", None)
    if whole is not None:
        return whole(batch)
    return source.score(batch.queries, batch.prompts, batch.responses, batch.labels)

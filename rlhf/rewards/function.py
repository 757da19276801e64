"""Python reward files. ``reward.function`` names one or a list, each read in the contract its signature shows
(rlhf.rewards.contracts): OpenRLHF's

    def reward_func(queries: list[str], prompts: list[str], labels: list[str], **kwargs):
        return {"rewards": tensor_or_list, "scores": ..., "extra_logs": {"name": per_sample_values}}
        # or just the rewards

(``queries`` are prompt + response texts, ``prompts`` the prompt texts, ``labels`` the data labels; called once per
batch with every sample, ``responses=`` too when the function accepts that keyword or ``**kwargs``), veRL's
``compute_score(data_source, solution_str, ground_truth, extra_info)`` per sample, or TRL's keyword
``f(prompts, completions, completion_ids, **columns)``. An ``async def`` is awaited. A file written for OpenRLHF
runs as it is: its ``from openrlhf.utils import extract_boxed_answer, grade_answer`` resolves to
rlhf.compat.openrlhf when no real OpenRLHF is installed. When it raises, the error names the line in the file and
the sample that broke it, and carries the full traceback (rlhf.rewards.failure).

This module keeps OpenRLHF's names (read by the static check before start-up) and the loader of a single
``reward_func``; the source itself is rlhf.rewards.function_source.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlhf.rewards.contracts.openrlhf import (
    DEFINITION,
    FUNCTION_NAME,
    OPTIONAL_KEYWORDS,
    POSITIONAL_ARGS,
    RETURNS,
)
from rlhf.rewards.function_source import FunctionReward
from rlhf.rewards.loader import import_file
from rlhf.rewards.result import RewardError
from rlhf.rewards.run_async import run_coroutine as _run_coroutine

__all__ = [
    "DEFINITION",
    "FUNCTION_NAME",
    "OPTIONAL_KEYWORDS",
    "POSITIONAL_ARGS",
    "RETURNS",
    "FunctionReward",
    "_run_coroutine",
    "load_reward_func",
]


def load_reward_func(path: str | Path) -> Callable[..., Any]:
    """Import ``path`` as a fresh module and return its ``reward_func``; a RewardError names what is wrong."""
    module = import_file(path)
    fn = getattr(module, FUNCTION_NAME, None)
    if fn is None:
        raise RewardError(f"reward function file {path} defines no {FUNCTION_NAME}; add {DEFINITION}")
    if not callable(fn):
        raise RewardError(f"reward function file {path}: {FUNCTION_NAME} is {type(fn).__name__}, not a function")
    return fn

"""TRL's contract (GRPOTrainer._calculate_rewards, trl 1.16): every argument by keyword,

    f(prompts=..., completions=..., completion_ids=..., **dataset_columns, trainer_state=..., log_extra=...,
      log_metric=...)

one value per completion, a float or None (None: this function declines the sample). As in TRL, the format of the
user's data decides what a function receives: a prompt given as a string (TRL's standard format) gives strings, even
where data.apply_chat_template rendered it with the chat template for the policy; a prompt given as a message list
(conversational) gives message lists, a completion being ``[{"role": "assistant", "content": text}]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from rlhf.rewards.batch import RewardBatch
from rlhf.rewards.contracts.base import CallOptions, Scores
from rlhf.rewards.contracts.signature import Params
from rlhf.rewards.result import RewardError

#: The keywords TRL passes besides the dataset's columns.
KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
#: Columns TRL does not pass on (they are the arguments above).
NOT_COLUMNS = ("prompt", "completion", "completion_ids")


def trainer_state(step: int, max_steps: int) -> Any:
    """A transformers TrainerState at this step (what TRL passes), or a namespace with the same fields."""
    try:
        from transformers import TrainerState
    except ImportError:  # transformers is a dependency; the fallback keeps reward-only uses light
        return SimpleNamespace(global_step=step, max_steps=max_steps, epoch=None)
    return TrainerState(global_step=step, max_steps=max_steps)


def columns(batch: RewardBatch, options: CallOptions) -> dict[str, list[Any]]:
    """The dataset's columns, one value per completion: each row's ``columns`` where the data carries them, else
    the label under its column's name (data.label_key)."""
    per_row: list[dict[str, Any]] = []
    for row, label in zip(batch.rows, batch.labels, strict=True):
        cols = row.get("columns")
        if cols is None:
            cols = {options.label_key: label} if options.label_key else {}
        per_row.append({k: v for k, v in cols.items() if k not in NOT_COLUMNS})
    keys = list(dict.fromkeys(k for c in per_row for k in c))
    return {k: [c.get(k) for c in per_row] for k in keys}


def prompts_and_completions(batch: RewardBatch) -> tuple[list[Any], list[Any]]:
    # The prompt as the data gave it (its raw_prompt, before any chat template); the rendered text where a record
    # lacks it. TRL decides by the first example (is_conversational(inputs[0])); a batch comes from one dataset.
    prompts: list[Any] = [row.get("raw_prompt", text) for row, text in zip(batch.rows, batch.prompts, strict=True)]
    conversational = bool(prompts) and isinstance(prompts[0], list)
    if conversational:
        completions: list[Any] = [[{"role": "assistant", "content": c}] for c in batch.completions]
    else:
        completions = list(batch.completions)
    return prompts, completions


class TRLContract:
    name = "trl"
    definition = "def f(prompts, completions, completion_ids, **kwargs) returning a float or None per completion"
    markers = frozenset({"completions", "completion_ids", "trainer_state", "log_extra", "log_metric"})

    def binds(self, params: Params) -> str | None:
        if not params.var_keyword:
            return "it has no **kwargs, and TRL passes every dataset column and its own keywords to each function"
        if params.positional_only and set(params.positional_only) & params.required:
            return f"its positional-only {', '.join(params.positional_only)} cannot be passed by keyword"
        return None

    def invoke(self, fn: Callable[..., Any], batch: RewardBatch, options: CallOptions) -> Any:
        prompts, completions = prompts_and_completions(batch)
        cols = columns(batch, options)
        params = Params.of(fn)
        if params is not None:
            missing = sorted(k for k in params.required if k not in KEYWORDS and k not in cols)
            if missing:
                have = ", ".join(cols) or "none"
                raise RewardError(
                    f"requires {', '.join(missing)}, which the data has no column for (columns passed: {have}); "
                    "name the label's column so (data.label_key) or give the function a default"
                )
        logged: dict[str, float] = {}
        self.logged = logged  # read back by read(): log_metric's values of this call
        return fn(
            prompts=prompts,
            completions=completions,
            completion_ids=[list(ids) for ids in batch.completion_ids],
            **cols,
            trainer_state=trainer_state(batch.step, batch.max_steps),
            log_extra=lambda column, values: None,  # TRL's completions table: nothing here shows one
            log_metric=lambda name, value: logged.__setitem__(str(name), float(value)),
        )

    def read(self, out: Any, n: int, origin: str) -> Scores:
        if hasattr(out, "tolist") and not isinstance(out, (str, bytes)):
            out = out.tolist()
        if not isinstance(out, (list, tuple)):
            raise RewardError(f"{origin}: returned {type(out).__name__}; a TRL reward function returns a list")
        if len(out) != n:
            raise RewardError(
                f"{origin}: returned {len(out)} rewards for {n} completions; return exactly one per completion"
            )
        values = []
        for i, x in enumerate(out):
            if x is None:
                values.append(math.nan)
            elif isinstance(x, (int, float)):
                if not math.isfinite(x):
                    raise RewardError(f"{origin}: reward of sample {i} is {x}; return a finite number or None")
                values.append(float(x))
            else:
                raise RewardError(f"{origin}: [{i}] is {type(x).__name__} {x!r}; expected a float or None")
        logs = {k: [v] * n for k, v in getattr(self, "logged", {}).items()}
        return Scores(values, None, logs)

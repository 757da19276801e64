"""Python reward files (OpenRLHF protocol): a file defining

    def reward_func(queries: list[str], prompts: list[str], labels: list[str], **kwargs):
        return {"rewards": tensor_or_list, "scores": ..., "extra_logs": {"name": per_sample_values}}
        # or just the rewards

``queries`` are prompt + response texts, ``prompts`` the prompt texts, ``labels`` the data labels. We call it once
per batch with every sample (OpenRLHF calls it per sample), and pass ``responses=`` too when the function accepts
that keyword or ``**kwargs``. An ``async def reward_func`` is awaited. A file written for OpenRLHF runs as it is:
its ``from openrlhf.utils import extract_boxed_answer, grade_answer`` resolves to rlhf.compat.openrlhf when no real
OpenRLHF is installed. When it raises, the error names the line in the file and the sample that broke it, and
carries the full traceback (rlhf.rewards.failure).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlhf.compat import openrlhf as openrlhf_compat
from rlhf.rewards.failure import Sample, describe, find_failing_sample
from rlhf.rewards.result import RewardError, RewardResult, coerce_result

# The contract of a reward file, declared here (the loader below) and read by the static check before start-up
# (rlhf.launch.preflight.python_files), so both name the same function, arguments and fix.
FUNCTION_NAME = "reward_func"
#: The positional arguments it is called with, in this order.
POSITIONAL_ARGS = ("queries", "prompts", "labels")
#: Keywords passed only when the function takes them (by name or through ``**kwargs``).
OPTIONAL_KEYWORDS = ("responses",)
#: How a user writes it, and what it returns (the fix in the messages).
DEFINITION = f"def {FUNCTION_NAME}({', '.join(POSITIONAL_ARGS)}, **kwargs)"
RETURNS = 'a list/tensor of rewards or {"rewards": ..., "scores": ..., "extra_logs": {...}}'


def load_reward_func(path: str | Path) -> Callable[..., Any]:
    """Import ``path`` as a fresh module and return its ``reward_func``; a RewardError names what is wrong."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise RewardError(f"reward function file {path} does not exist; set reward.function to a .py file")
    name = "rlhf_reward_func_" + hashlib.sha1(str(p.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise RewardError(f"reward function file {path} cannot be imported (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    openrlhf_compat.install()  # OpenRLHF reward files import openrlhf.utils (grade_answer, ...)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise RewardError(f"reward function file {path} failed to import: {type(e).__name__}: {e}") from e
    fn = getattr(module, FUNCTION_NAME, None)
    if fn is None:
        raise RewardError(f"reward function file {path} defines no {FUNCTION_NAME}; add {DEFINITION}")
    if not callable(fn):
        raise RewardError(f"reward function file {path}: {FUNCTION_NAME} is {type(fn).__name__}, not a function")
    return fn


def _accepts_responses(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes the optional keywords (``responses=``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD or p.name in OPTIONAL_KEYWORDS for p in params)


def _run_coroutine(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Already inside an event loop (e.g. an async Ray actor): run it on a private loop in a thread.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # handed back to the caller's thread
            box["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class FunctionReward:
    """A :class:`~rlhf.rewards.source.RewardSource` over a reward_func file."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.fn = load_reward_func(path)
        self._pass_responses = _accepts_responses(self.fn)

    def score(
        self, queries: Sequence[str], prompts: Sequence[str], responses: Sequence[str], labels: Sequence[str]
    ) -> RewardResult:
        try:
            out = self._call(queries, prompts, responses, labels)
        except RewardError:
            raise
        except Exception as e:
            error = e
        else:
            return coerce_result(out, len(queries), f"reward function {self.path}")
        # Out of the except block: the single-sample calls' own errors are then not chained to the batch's.
        raise self._failure(error, queries, prompts, responses, labels) from error

    def _call(
        self, queries: Sequence[str], prompts: Sequence[str], responses: Sequence[str], labels: Sequence[str]
    ) -> Any:
        kwargs = {"responses": list(responses)} if self._pass_responses else {}
        out = self.fn(list(queries), list(prompts), list(labels), **kwargs)
        if inspect.isawaitable(out):
            out = _run_coroutine(out)
        return out

    def _failure(
        self,
        error: Exception,
        queries: Sequence[str],
        prompts: Sequence[str],
        responses: Sequence[str],
        labels: Sequence[str],
    ) -> RewardError:
        """The error for ``error``, raised on this batch: its line, the sample that broke it, its traceback."""

        def alone(i: int) -> Any:
            s = slice(i, i + 1)
            return self._call(queries[s], prompts[s], responses[s], labels[s])

        search = find_failing_sample(alone, len(queries), error)
        samples = [Sample(p, r, lab) for p, r, lab in zip(prompts, responses, labels, strict=False)]
        message, text = describe(self.path, search, samples, error)
        return RewardError(message, traceback_text=text)

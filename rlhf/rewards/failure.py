"""A reward function that raised, told the way its author fixes it: the line in their file that raised, the sample
that broke it, and the full traceback (kept in the run folder, :meth:`rlhf.rewards.result.RewardError.keep_traceback`).

We call the function once per batch, so the sample is found by calling it again on that batch's samples one at a
time (as OpenRLHF calls it), stopping at the first that raises the same way; a failure only the whole batch shows is
said so. The traceback travels as text on the error: a string pickles, so it survives a Ray actor's boundary.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The file in the run folder that keeps the traceback.
TRACEBACK_FILE = "reward_error.txt"
#: How much of a prompt, response or label the one-line message shows.
EXCERPT_CHARS = 200
#: How long the search for the failing sample may take: a slow reward (an LLM judge) must not hold the error long.
SEARCH_BUDGET_S = 60.0
# An exception's own text in the one-line message: whitespace folded, this long at most.
_ERROR_CHARS = 300
_CODE_CHARS = 100


@dataclass
class Sample:
    prompt: str
    response: str
    label: object


@dataclass
class Search:
    """Where the single-sample calls found the failure: ``index`` of the first sample that raised alone (None: none
    did), its exception (else the batch's), and how many samples were tried."""

    index: int | None
    error: BaseException
    tried: int


def find_failing_sample(
    call_alone: Callable[[int], object], n: int, batch_error: BaseException, budget_s: float = SEARCH_BUDGET_S
) -> Search:
    """Call ``call_alone(i)`` for i in 0..n-1 until one raises ``batch_error``'s type (another exception is a
    different problem, e.g. a function that assumes batches of several), at most ``budget_s`` seconds."""
    if n == 1:  # the batch was that sample
        return Search(0, batch_error, 1)
    deadline = time.monotonic() + budget_s
    tried = 0
    for i in range(n):
        if tried and time.monotonic() > deadline:
            break
        tried += 1
        try:
            call_alone(i)
        except Exception as e:
            if type(e) is type(batch_error):
                return Search(i, e, tried)
    return Search(None, batch_error, tried)


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``value`` quoted, cut to ``limit`` characters with an ellipsis and its length when longer."""
    text = value if isinstance(value, str) else repr(value)
    shown = repr(text[:limit]) if isinstance(value, str) else text[:limit]
    return shown if len(text) <= limit else f"{shown}… ({len(text)} chars)"


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _where(error: BaseException, path: str) -> str:
    """``, line N (in FUNC: `code`)`` of the innermost frame inside the reward file (where the user's code raised or
    called what raised); the innermost frame of all, named by its file, when none is in it."""
    frames = traceback.extract_tb(error.__traceback__)
    target = Path(path).resolve()
    frame = next((f for f in reversed(frames) if Path(f.filename).resolve() == target), None)
    prefix = ""
    if frame is None and frames:
        frame = frames[-1]
        prefix = f" in {frame.filename}"
    if frame is None:
        return ""
    code = f": `{_one_line(frame.line, _CODE_CHARS)}`" if frame.line else ""
    return f"{prefix}, line {frame.lineno} (in {frame.name}{code})"


def _last_frame(error: BaseException) -> tuple[str, int | None] | None:
    frames = traceback.extract_tb(error.__traceback__)
    return (frames[-1].filename, frames[-1].lineno) if frames else None


def _shown(sample: Sample) -> str:
    return f"prompt {excerpt(sample.prompt)}, response {excerpt(sample.response)}, label {excerpt(sample.label)}"


def describe(path: str, search: Search, samples: Sequence[Sample], batch_error: BaseException) -> tuple[str, str]:
    """The one-line message and the traceback text for a reward function at ``path`` that raised ``batch_error`` on
    ``samples`` (the batch), the single-sample calls having found ``search``."""
    e, n = search.error, len(samples)
    raised = f"reward function {path}{_where(e, path)} raised {type(e).__name__}: {_one_line(str(e), _ERROR_CHARS)}"
    if not samples:  # nothing to show (an empty batch is not called in a run)
        return f"{raised} on an empty batch", "".join(traceback.format_exception(e))
    if search.index is not None:
        sample = samples[search.index]
        on = f"sample {search.index} of a batch of {n}" if n > 1 else "a batch of 1 sample"
        message = f"{raised} on {on}: {_shown(sample)}"
        head = f"{raised}\non {on}, called with it alone:"
    else:
        sample = samples[0]
        none = f"none of them alone (tried {search.tried})" if search.tried < n else "none of them alone"
        message = f"{raised} on the whole batch of {n} samples but on {none}; the first sample: {_shown(sample)}"
        head = f"{raised}\non the whole batch of {n} samples but on {none}; the first sample:"
    parts = [
        head,
        f"--- prompt ---\n{sample.prompt}",
        f"--- response ---\n{sample.response}",
        f"--- label ---\n{sample.label}",
        "--- traceback ---\n" + "".join(traceback.format_exception(e)),
    ]
    if _last_frame(e) != _last_frame(batch_error):  # the batch's call raised elsewhere: that may say more
        batch = "".join(traceback.format_exception(batch_error))
        parts.append(f"--- the call on the whole batch of {n} samples raised ---\n{batch}")
    return message, "\n".join(parts)

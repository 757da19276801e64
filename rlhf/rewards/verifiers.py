"""Built-in verifiers (``reward.verifier``): rule-based rewards computed from the response and the label.

Each verifier scores one sample and returns ``(reward, score, logs)``; :func:`verify` maps it over a batch.
``score`` is strict correctness (0/1), which pass@k and dynamic filtering read; ``reward`` is what training
optimises, and may add a small credit for the right *form* of answer so that a policy that starts random finds
the answer space (the same reason R1-style recipes add a format reward).

    exact          1 if the stripped response equals the label, or its first token does ("7" for label "7" in
                   "7 because ..."); FORMAT_CREDIT (0.1) for a wrong number where the label is a number (score 0).
    math           1 if the final answer (last \\boxed{}, else math-verify's extraction) is equivalent to the
                   label's, by HF math-verify; see rlhf.rewards.math_answer.
    format         1 if the response matches a format regex (default: R1's <think>...</think><answer>...</answer>).
    reasoning_gym  the task's own score_answer (rows from reasoning_gym: sources); see rlhf.rewards.reasoning_gym.

``math`` and ``reasoning_gym`` run their checks in a child process, each bounded by ``timeout_s``
(reward.verifier_timeout_s): a check past it scores 0 and counts in the ``verifier_timeout`` log (a rate per step).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

from rlhf.rewards.checker_process import TIMED_OUT, CheckerProcess, CheckError
from rlhf.rewards.result import RewardError, RewardResult

log = logging.getLogger(__name__)

Outcome = tuple[float, float, dict[str, float]]  # reward, score, per-sample logs
Verifier = Callable[..., Outcome]

FORMAT_CREDIT = 0.1  # reward for a wrong number in first position when the label is a number (score stays 0)
R1_FORMAT = r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$"
# Special tokens a decoded response may end with (eos, end of turn), ignored by the string comparisons.
_TRAILING_SPECIAL = re.compile(r"(?:\s*(?:<\|[^<>|]*\|>|</s>|<eos>|<end_of_turn>))+\s*$")
_FIRST_TOKEN = re.compile(r"\s*([^\s<>,;:!?()\[\]{}\"'`]+)")
_NUMBER = re.compile(r"-?(?:\d+(?:[.,/]\d+)*|\.\d+)%?")
DEFAULT_TIMEOUT_S = 5.0  # math-verify's own default per operation
# Verifiers whose checks run in a child process under a deadline (they take timeout_s).
TIMED_VERIFIERS = ("math", "reasoning_gym")
_checkers: dict[str, CheckerProcess] = {}  # one child per check function, started on first use


def strip_special(text: str) -> str:
    return _TRAILING_SPECIAL.sub("", text).strip()


def first_token(text: str) -> str:
    """The first whitespace/punctuation-delimited token ("7" in " 7. Done"), "" if none."""
    m = _FIRST_TOKEN.match(text)
    return m.group(1).rstrip(".") if m else ""


def _needs_label(name: str, label: str) -> str:
    if not label.strip():
        raise RewardError(
            f"verifier {name!r} needs a label for every sample and got an empty one; set data.label_key to the "
            "column holding the reference answer"
        )
    return label.strip()


def exact_verifier(response: str, label: str, format_credit: float = FORMAT_CREDIT) -> Outcome:
    gold = _needs_label("exact", label)
    text = strip_special(response)
    token = first_token(text)
    full, first = text == gold, token == gold
    correct = full or first
    right_form = not correct and _NUMBER.fullmatch(gold) is not None and _NUMBER.fullmatch(token) is not None
    reward = 1.0 if correct else (format_credit if right_form else 0.0)
    return reward, float(correct), {"exact_match": float(full), "first_token_match": float(first)}


def bounded_check(target: str, args: Sequence[str], timeout_s: float) -> list[float] | None:
    """``target(*args)`` in its checker process; None when it ran past ``timeout_s`` (the child is restarted)."""
    checker = _checkers.get(target)
    if checker is None:
        checker = _checkers.setdefault(target, CheckerProcess(target))
    try:
        out = checker.call(args, timeout_s)
    except CheckError as e:
        raise RewardError(f"answer check {target} failed: {e}") from None
    return None if out is TIMED_OUT else out


def math_verifier(response: str, label: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Outcome:
    gold = _needs_label("math", label)
    out = bounded_check("rlhf.rewards.math_answer:check_math", (strip_special(response), gold), timeout_s)
    if out is None:
        return 0.0, 0.0, {"answer_found": 0.0, "verifier_timeout": 1.0}
    correct, found = out
    return correct, correct, {"answer_found": found, "verifier_timeout": 0.0}


def format_verifier(response: str, label: str, pattern: str = R1_FORMAT) -> Outcome:
    ok = float(re.match(pattern, strip_special(response), flags=re.DOTALL) is not None)
    return ok, ok, {"format_ok": ok}


def reasoning_gym_verifier(response: str, label: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Outcome:
    from rlhf.rewards.reasoning_gym import read_label

    gold = _needs_label("reasoning_gym", label)
    read_label(gold)  # a wrong label is the user's to fix: say so here, not from inside the checker process
    out = bounded_check("rlhf.rewards.reasoning_gym:check_task", (strip_special(response), gold), timeout_s)
    if out is None:
        return 0.0, 0.0, {"verifier_timeout": 1.0}
    reward = float(out)
    # The task's score may give partial credit; pass@k and dynamic filtering read strict correctness.
    return reward, float(reward >= 1.0), {"verifier_timeout": 0.0}


VERIFIERS: dict[str, Verifier] = {
    "exact": exact_verifier,
    "math": math_verifier,
    "format": format_verifier,
    "reasoning_gym": reasoning_gym_verifier,
}


def verify(
    name: str,
    queries: Sequence[str],
    prompts: Sequence[str],
    responses: Sequence[str],
    labels: Sequence[str | None],
    **options: float | str,
) -> RewardResult:
    """Score a batch with the built-in verifier ``name`` (``options`` go to it, e.g. ``pattern=`` for format).

    ``queries`` and ``prompts`` are accepted for the common reward signature; the verifiers read the responses
    and labels only.
    """
    if name not in VERIFIERS:
        raise RewardError(f"reward.verifier={name!r}: unknown verifier; use one of {', '.join(sorted(VERIFIERS))}")
    if not len(responses) == len(labels) == len(queries) == len(prompts):
        raise ValueError("verify: queries, prompts, responses and labels must have the same length")
    fn = VERIFIERS[name]
    outcomes = [fn(r, "" if lab is None else str(lab), **options) for r, lab in zip(responses, labels, strict=True)]
    timeouts = sum(o[2].get("verifier_timeout", 0.0) for o in outcomes)
    if timeouts:
        log.warning(
            "reward.verifier=%s: %d of %d answer checks ran past reward.verifier_timeout_s=%s and scored 0",
            name,
            timeouts,
            len(outcomes),
            options.get("timeout_s", DEFAULT_TIMEOUT_S),
        )
    keys = list(dict.fromkeys(k for _, _, logs in outcomes for k in logs))
    return RewardResult(
        rewards=[o[0] for o in outcomes],
        scores=[o[1] for o in outcomes],
        extra_logs={k: [o[2].get(k, 0.0) for o in outcomes] for k in keys},
    )

"""veRL's default scorers (``verl.utils.reward_score.default_compute_score``, verl 0.9.1), chosen per sample by its
``data_source``, reproduced so that a veRL recipe scores as veRL scores without veRL installed. The tests pin each
against veRL's own functions read from its wheel (tests/rewards/test_verl_scorers.py).

* ``openai/gsm8k``: the last ``#### N`` in the response's last 300 characters (commas and ``$`` dropped), compared
  with the ground truth as a string: 1.0 equal, 0.0 a different number, 0 none (GSM8K's strict format).
* ``lighteval/MATH``, ``DigitalLearningGmbH/MATH-lighteval``, ``HuggingFaceH4/MATH-500``: the last ``\\boxed{...}``
  (or ``\\boxed x``), normalised as lm-evaluation-harness's Hendrycks MATH task does (rlhf.compat.hendrycks_math),
  equal to the normalised ground truth: 1.0, else 0.0.

Other sources (veRL's math_dapo, prime_math, code, geometry3k, search-R1) are refused naming the way out: veRL's
own function by its import path where veRL is installed, or a compute_score file.
"""

from __future__ import annotations

import re
from typing import Any

from rlhf.compat.hendrycks_math import PERCENT_VERL, last_boxed_only_string, strip_string

GSM8K_SOURCES = ("openai/gsm8k",)
MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")

# GSM8K: veRL looks at the end only (a long response's regex costs), where the final answer is.
_GSM8K_TAIL_CHARS = 300
_GSM8K_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def gsm8k_answer(text: str) -> str | None:
    """The last ``#### N`` of the response's tail, without commas and dollar signs; None when there is none."""
    found = _GSM8K_ANSWER.findall(text[-_GSM8K_TAIL_CHARS:])
    return found[-1].replace(",", "").replace("$", "") if found else None


def gsm8k_score(solution_str: str, ground_truth: str, format_score: float = 0.0, score: float = 1.0) -> float:
    answer = gsm8k_answer(solution_str)
    if answer is None:
        return 0
    return score if answer == ground_truth else format_score


# -- MATH (Hendrycks' normalisation, rlhf.compat.hendrycks_math, with veRL's percent step) -------------------------


def last_boxed(text: str) -> str | None:
    """The last ``\\boxed{...}`` (braces balanced) or ``\\fbox{...}``; ``\\boxed x`` up to a ``$`` wins over both."""
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    return last_boxed_only_string(text)


def unbox(boxed: str) -> str:
    """The content of ``\\boxed x`` or ``\\boxed{x}``; a ValueError for anything else (an ``\\fbox``)."""
    if "\\boxed " in boxed:
        if not boxed.startswith("\\boxed "):
            raise ValueError(f"not a boxed answer: {boxed!r}")
        return boxed[len("\\boxed ") :]
    if not (boxed.startswith("\\boxed{") and boxed.endswith("}")):
        raise ValueError(f"not a boxed answer: {boxed!r}")
    return boxed[len("\\boxed{") : -1]


def normalize_math(s: str) -> str:
    """veRL's ``strip_string``; raises (rlhf.compat.hendrycks_math.Unparsable) where it cannot read ``s``."""
    return strip_string(s, percent=PERCENT_VERL)


def math_equivalent(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        return normalize_math(a) == normalize_math(b)
    except Exception:  # a string the normalisation cannot parse: compared as written, as veRL does
        return a == b


def math_score(solution_str: str, ground_truth: str) -> float:
    try:
        boxed = last_boxed(solution_str)
        if boxed is not None and math_equivalent(unbox(boxed), ground_truth):
            return 1.0
    except Exception:  # veRL prints and scores 0
        pass
    return 0.0


SCORERS = {**dict.fromkeys(GSM8K_SOURCES, gsm8k_score), **dict.fromkeys(MATH_SOURCES, math_score)}


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> float:
    """veRL's default score of one sample, by its data source."""
    scorer = SCORERS.get(data_source)
    if scorer is None:
        known = ", ".join(SCORERS)
        raise NotImplementedError(
            f"data_source {data_source!r} has no default scorer here (reproduced: {known}); where veRL is installed "
            "give reward.function=verl.utils.reward_score.default_compute_score, else a file: "
            "reward.function=FILE.py:compute_score"
        )
    return float(scorer(solution_str, ground_truth))

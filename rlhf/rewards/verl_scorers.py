"""veRL's default scorers (``verl.utils.reward_score.default_compute_score``, verl 0.9.1), chosen per sample by its
``data_source``, reproduced so that a veRL recipe scores as veRL scores without veRL installed. The tests pin each
against veRL's own functions read from its wheel (tests/rewards/test_verl_scorers.py).

* ``openai/gsm8k``: the last ``#### N`` in the response's last 300 characters (commas and ``$`` dropped), compared
  with the ground truth as a string: 1.0 equal, 0.0 a different number, 0 none (GSM8K's strict format).
* ``lighteval/MATH``, ``DigitalLearningGmbH/MATH-lighteval``, ``HuggingFaceH4/MATH-500``: the last ``\\boxed{...}``
  (or ``\\boxed x``), normalised as lm-evaluation-harness's Hendrycks MATH task does, equal to the normalised
  ground truth: 1.0, else 0.0.

Other sources (veRL's math_dapo, prime_math, code, geometry3k, search-R1) are refused naming the way out: veRL's
own function by its import path where veRL is installed, or a compute_score file.
"""

from __future__ import annotations

import re
from typing import Any

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


# -- MATH (Hendrycks' normalisation, as lm-evaluation-harness and veRL's math_reward apply it) ---------------------


def last_boxed(text: str) -> str | None:
    """The last ``\\boxed{...}`` (braces balanced) or ``\\fbox{...}``; ``\\boxed x`` up to a ``$`` wins over both."""
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def unbox(boxed: str) -> str:
    """The content of ``\\boxed x`` or ``\\boxed{x}``; a ValueError for anything else (an ``\\fbox``)."""
    if "\\boxed " in boxed:
        if not boxed.startswith("\\boxed "):
            raise ValueError(f"not a boxed answer: {boxed!r}")
        return boxed[len("\\boxed ") :]
    if not (boxed.startswith("\\boxed{") and boxed.endswith("}")):
        raise ValueError(f"not a boxed answer: {boxed!r}")
    return boxed[len("\\boxed{") : -1]


def _fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{7}`` -> ``\\frac{1}{7}``; unchanged when a ``\\frac`` has fewer
    than two characters after it. IndexError on a ``\\frac`` at the very end (the caller falls back)."""
    head, *rest = s.split("\\frac")
    out = head
    for part in rest:
        out += "\\frac"
        if part[0] == "{":
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, tail = part[0], part[1], part[2:]
        out += "{" + a + "}{" + b + "}" + tail if b != "{" else "{" + a + "}" + b + tail
    return out


def _slash_fraction(s: str) -> str:
    """``3/4`` (two integers written plainly) -> ``\\frac{3}{4}``."""
    pieces = s.split("/")
    if len(pieces) != 2:
        return s
    try:
        a, b = int(pieces[0]), int(pieces[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _units_removed(s: str) -> str:
    if "\\text{ " not in s:
        return s
    pieces = s.split("\\text{ ")
    if len(pieces) != 2:
        raise ValueError("several \\text{ } units")  # the caller falls back to comparing the raw strings
    return pieces[0]


def _sqrt_braced(s: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}``. IndexError on a ``\\sqrt`` at the very end (the caller falls back)."""
    if "\\sqrt" not in s:
        return s
    head, *rest = s.split("\\sqrt")
    return head + "".join("\\sqrt" + (p if p[0] == "{" else "{" + p[0] + "}" + p[1:]) for p in rest)


def normalize_math(s: str) -> str:
    for old, new in (
        ("\n", ""),
        ("\\!", ""),
        ("\\\\", "\\"),
        ("tfrac", "frac"),
        ("dfrac", "frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\$", ""),
    ):
        s = s.replace(old, new)
    s = _units_removed(s)
    s = s.replace("\\\\%", "").replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 3" -> "3"
        s = sides[1]
    s = _sqrt_braced(s)
    s = s.replace(" ", "")
    s = _fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_fraction(s)


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

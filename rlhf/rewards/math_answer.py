"""Final-answer checking for math-style tasks with HF's ``math-verify`` (the library TRL's accuracy reward uses).

What we add around it:
  * the answer a response gives: the content of its last balanced ``\\boxed{...}`` / ``\\fbox{...}`` when there
    is one (an unbalanced box is no answer), else math-verify's own extraction (LaTeX in ``$...$``, "the answer
    is ...", or the last plain expression/number);
  * the gold answer of a label: the last ``\\boxed{}`` or the text after the last ``####`` (GSM8K solutions),
    else the whole label read as LaTeX, so ``1+x^2``, ``\\frac{1}{2}`` and ``(1, 2)`` parse as written;
  * math-verify's ``signal.alarm`` timeouts are off (they fail off the main thread); :func:`check_math` is meant
    to run in a :class:`~rlhf.rewards.checker_process.CheckerProcess`, which bounds each call with its own
    deadline.

Equivalence is math-verify's: numeric within its precision, symbolic after simplification, sets, intervals,
equations, percentages and thousands separators.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any

_BOX = re.compile(r"\\(?:boxed|fbox)")


def extract_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces allowed), or ``\\boxed x``."""
    starts = list(_BOX.finditer(text))
    if not starts:
        return None
    i = starts[-1].end()
    if i < len(text) and text[i] == " ":
        m = re.match(r" ([^\s$]+)", text[i:])
        return m.group(1) if m else None
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None  # unbalanced: no answer


def gold_answer(label: str) -> str:
    """The final answer a label holds: its last ``\\boxed{}``, the text after its last ``####``, else itself."""
    boxed = extract_boxed(label) if _BOX.search(label) else None
    if boxed is not None:
        return boxed.strip()
    if "####" in label:
        return label.rsplit("####", 1)[1].strip()
    return label.strip()


@lru_cache(maxsize=1)
def _math_verify() -> Any:
    try:
        import math_verify
    except ImportError as e:
        raise ImportError(
            "reward.verifier=math needs the math-verify package: pip install math-verify (it is a core "
            "dependency of rlhf; reinstall rlhf if it is missing)"
        ) from e
    # Our deadline replaces math-verify's alarm; its warning about that, and its debug chatter, are noise here.
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # TRL's accuracy reward normalisation, but lenient on \frac12-style operators and boxed already unwrapped.
    norm = math_verify.LatexNormalizationConfig(  # latex2sympy2_extended.NormalizationConfig, re-exported
        nits=False, malformed_operators=True, basic_latex=True, equations=True, boxed="last", units=True
    )
    latex = math_verify.LatexExtractionConfig(normalization_config=norm, boxed_match_priority=0)
    return math_verify, (latex, math_verify.ExprExtractionConfig())


def _parse(text: str) -> list:
    mv, targets = _math_verify()
    return mv.parse(text, targets, extraction_mode="first_match", parsing_timeout=None)


@lru_cache(maxsize=4096)  # every label is checked samples_per_prompt times in a row
def _parse_gold(label: str) -> list:
    answer = gold_answer(label)
    return _parse(answer if "$" in answer else f"\\boxed{{{answer}}}")


def parse_response(response: str) -> list:
    """math-verify's parse of the answer ``response`` gives ([] when none)."""
    if _BOX.search(response):
        boxed = extract_boxed(response)
        return [] if boxed is None else _parse(f"\\boxed{{{boxed}}}")
    return _parse(response)


def warm_up() -> None:
    """Import math-verify and sympy and parse once (run by the checker process before its first check)."""
    check_math("\\boxed{\\frac{1}{2}}", "0.5")


def check_math(response: str, label: str) -> list[float]:
    """``[correct, answer_found]`` (0/1 each) for one response against its label; no timeout of its own."""
    gold = _parse_gold(label)
    predicted = parse_response(response)
    if not gold or not predicted:
        return [0.0, float(bool(predicted))]
    mv, _ = _math_verify()
    return [float(mv.verify(gold, predicted, timeout_seconds=None)), 1.0]

"""OpenRLHF's math grader (``openrlhf.utils.extract_boxed_answer`` and ``grade_answer``), with its semantics.

OpenRLHF grades in two ways and accepts an answer when either agrees:

1. *MATH normalisation* (Hendrycks et al.; rlhf.compat.hendrycks_math, shared with veRL's scorer): strip LaTeX
   noise (``\\left``, ``\\!``, degrees, ``\\$``, a trailing ``\\text{ unit}``, ``\\%``), write ``\\frac12`` as
   ``\\frac{1}{2}``, ``\\sqrt2`` as ``\\sqrt{2}``, ``1/2`` and ``0.5`` as ``\\frac{1}{2}``, drop a short ``x =``
   prefix and all spaces, then compare strings;
2. *sympy*: normalise further (units and words removed, LaTeX turned into text, thousands separators, lower case),
   compare strings, then compare tuples element by element: integers against integers, ``a/b`` fractions as
   strings, anything else by ``sympy.simplify(truth - given) == 0`` when the expression has at most two unknown
   letters and no large powers.

Quirks kept on purpose, so that a reward computed here equals OpenRLHF's: a tuple's brackets are not compared
(``(1,2)`` grades equal to ``[1,2]``), ``\\fbox{x}`` is found but not unwrapped (extract gives None), and an
integer-valued float is truncated, not rounded, by the final integer normalisation.
"""

from __future__ import annotations

import logging
import re

from rlhf.compat.hendrycks_math import PERCENT_OPENRLHF, Unparsable, last_boxed_only_string, strip_string

_UNITS = (
    "degree",
    "cm",
    "centimeter",
    "meter",
    "mile",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "foot",
    "feet",
    "inch",
    "yard",
)
_TEXT_ONLY = re.compile(r"^\\text\{(?P<text>.+?)\}$")
_THOUSANDS = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
_BRACKETS = "()[]"


# -- extraction ------------------------------------------------------------------------------------------------------


def extract_boxed_answer(solution: str) -> str | None:
    """What the last ``\\boxed{...}`` holds, or None (no box, unbalanced braces, or an ``\\fbox``)."""
    boxed = last_boxed_only_string(solution)
    if boxed is None or not boxed.startswith("\\boxed{") or not boxed.endswith("}"):
        return None
    return boxed[len("\\boxed{") : -1]


# -- 1. MATH normalisation (rlhf.compat.hendrycks_math, with OpenRLHF's percent step) ------------------------------


def math_normalize(answer: str | None) -> str | None:
    """The MATH dataset's normal form of an answer as OpenRLHF computes it: stripped, a whole ``\\text{...}``
    unwrapped, then normalised; an answer the normalisation cannot read is compared as it stands after the first
    two steps (None stays None)."""
    if answer is None:
        return None
    answer = answer.strip()
    m = _TEXT_ONLY.search(answer)
    if m is not None:
        answer = m.group("text").strip()
    try:
        return strip_string(answer, percent=PERCENT_OPENRLHF)
    except Unparsable:
        return answer


# -- 2. sympy ----------------------------------------------------------------------------------------------------


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _is_integral(x: float) -> bool:
    try:
        return abs(x - int(round(x))) <= 1e-7
    except (OverflowError, ValueError):  # inf, nan
        return False


def _drop_thousands_commas(s: str) -> str:
    while True:
        fixed = _THOUSANDS.sub(r"\1\3\4", s)
        if fixed == s:
            return fixed
        s = fixed


def _str_is_int(s: str) -> bool:
    try:
        return _is_integral(float(_drop_thousands_commas(s)))
    except ValueError:
        return False


def _latex_to_text(s: str) -> str:
    from pylatexenc import latex2text  # a dependency: without it answers in LaTeX would grade differently

    # It logs a warning for every malformed macro of a model's answer ("\\frac" alone); grading goes on anyway.
    logging.getLogger("pylatexenc").setLevel(logging.ERROR)

    s = s.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    s = latex2text.LatexNodes2Text().latex_to_text(s)
    for old, new in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        s = s.replace(old, new)
    return s.strip()


def sympy_normalize(expr: str | None) -> str | None:
    """The normal form the sympy grader compares (None stays None)."""
    if expr is None:
        return None
    m = _TEXT_ONLY.search(expr)
    if m is not None:
        expr = m.group("text")
    for old, new in (
        ("\\%", "%"),
        ("\\$", "$"),
        ("$", ""),
        ("%", ""),
        (" or ", " , "),
        (" and ", " , "),
        ("million", "*10^6"),
        ("billion", "*10^9"),
        ("trillion", "*10^12"),
    ):
        expr = expr.replace(old, new)
    for unit in _UNITS:
        expr = re.sub(f"{unit}(es)?(s)? *(\\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if _is_float(expr) and _is_integral(float(expr)):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        import pylatexenc  # noqa: F401 - fail loudly when missing, not inside the try below

        try:
            expr = _latex_to_text(expr)
        except Exception:  # noqa: BLE001 - OpenRLHF keeps the text when LaTeX parsing fails
            pass
    expr = re.sub(r"- *", "-", expr)
    expr = re.sub(r"([0-9]) +([0-9])", r"\1+\2", expr)  # "1 1/2" is a mixed number
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _str_is_int(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _may_evaluate(expr: str) -> bool:
    """Refuse what sympy would take long over (or misread): many unknowns, nested or large powers."""
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr:
        return False
    return re.search(r"\^[0-9]+\^", expr) is None and re.search(r"\^[0-9][0-9]+", expr) is None


def _sympy_equal(truth: str, given: str) -> bool:
    expr = f"({truth})-({given})"
    if not _may_evaluate(expr):
        return False
    try:
        import sympy
        from sympy.parsing import sympy_parser

        transformations = sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,)
        diff = sympy_parser.parse_expr(expr.replace("^", "**"), transformations=transformations)
        return sympy.simplify(diff) == 0
    except Exception:  # noqa: BLE001 - anything sympy cannot read is simply not equal
        return False


def _elements(expr: str) -> list[str]:
    expr = _drop_thousands_commas(expr)
    if not expr:
        return []
    inner = expr[1:-1]
    if len(expr) > 2 and expr[0] in _BRACKETS and expr[-1] in _BRACKETS and not any(c in inner for c in _BRACKETS):
        return [e.strip() for e in inner.split(",")]
    return [expr]


def grade_answer_sympy(given_answer: str, ground_truth: str) -> bool:
    truth, given = sympy_normalize(ground_truth), sympy_normalize(given_answer)
    if truth is None:
        return False
    if truth == given:
        return True
    if not given:
        return False
    truth_elems, given_elems = _elements(truth), _elements(given)
    if len(truth_elems) != len(given_elems):
        return False
    for t, g in zip(truth_elems, given_elems, strict=True):
        if _FRACTION.search(t) and _FRACTION.search(g):
            ok = t == g  # unreduced fractions must be written the same
        elif _str_is_int(t) != _str_is_int(g):
            ok = False
        else:
            ok = _sympy_equal(t, g)
        if not ok:
            return False
    return bool(truth_elems)


def grade_answer_mathd(given_answer: str, ground_truth: str) -> bool:
    return math_normalize(ground_truth) == math_normalize(given_answer)


def grade_answer(given_answer: str | None, ground_truth: str | None) -> bool:
    """True when ``given_answer`` (already taken out of its box) equals ``ground_truth`` by either grader."""
    if given_answer is None or ground_truth is None:
        return False
    given, truth = str(given_answer), str(ground_truth)
    return grade_answer_mathd(given, truth) or grade_answer_sympy(given, truth)

"""Hendrycks' MATH answer normalisation (the MATH dataset's ``_strip_string``) and the boxed-answer scan beside it,
written once for the two peers' graders that copy them: OpenRLHF's (rlhf.compat.openrlhf_math, after
``openrlhf.utils.math_utils.mathd_normalize_answer``, by way of PRM800K) and veRL's (rlhf.rewards.verl_scorers, after
``verl.utils.reward_score.math_reward``, by way of lm-evaluation-harness).

The steps: drop LaTeX noise (line breaks, ``\\!``, ``\\left``/``\\right``, degrees, ``\\$``), the unit after
``\\text{ ``, the percent sign, spaces and a short ``x =`` prefix; write ``.5`` as ``0.5``, ``\\sqrt3`` as
``\\sqrt{3}``, ``\\frac12`` as ``\\frac{1}{2}``, and ``0.5`` and ``1/2`` as ``\\frac{1}{2}``.

The copies differ in one step, which each caller names: the percent sign (:data:`PERCENT_OPENRLHF`,
:data:`PERCENT_VERL`). What each peer does around the normalisation (strip the answer and unwrap a whole
``\\text{...}`` first, what an answer the normalisation cannot read is compared as, the ``\\boxed x`` form, how a box
is unwrapped) stays in that peer's module.
"""

from __future__ import annotations


class Unparsable(ValueError):
    """The normalisation cannot read the answer: ``\\frac`` or ``\\sqrt`` with nothing after it, or more than one
    ``\\text{ `` unit. Each peer then compares something else (its module says what)."""


# The percent sign, removed after ``\\\\`` became ``\\``: the replacements in order. OpenRLHF (PRM800K) removes
# ``\\%`` twice, so ``\\\\%%`` ends empty; veRL (lm-evaluation-harness) removes ``\\\\%`` then ``\\%``, so ``\\\\%``
# ends empty where OpenRLHF leaves a ``\\``.
PERCENT_OPENRLHF = ("\\%", "\\%")
PERCENT_VERL = ("\\\\%", "\\%")

_NOISE = (
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
)


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{...}`` (or, with no ``\\boxed`` at all, the last ``\\fbox{...}``) in ``text``, braces
    balanced and included; None when there is none or its braces never close."""
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


def _units_removed(s: str) -> str:
    """What comes before a ``\\text{ unit}`` (the MATH answers write units so)."""
    if "\\text{ " not in s:
        return s
    pieces = s.split("\\text{ ")
    if len(pieces) != 2:
        raise Unparsable("several \\text{ } units")
    return pieces[0]


def _braced_sqrt(s: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}``."""
    if "\\sqrt" not in s:
        return s
    head, *rest = s.split("\\sqrt")
    out = head
    for part in rest:
        if not part:
            raise Unparsable("\\sqrt at the end")
        out += "\\sqrt" + (part if part[0] == "{" else "{" + part[0] + "}" + part[1:])
    return out


def _braced_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{7}`` -> ``\\frac{1}{7}``; ``s`` unchanged when a ``\\frac`` has
    fewer than two characters after it (but not none: that is unparsable)."""
    head, *rest = s.split("\\frac")
    out = head
    for part in rest:
        out += "\\frac"
        if not part:
            raise Unparsable("\\frac at the end")
        if part[0] == "{":
            out += part
            continue
        if len(part) < 2:
            return s
        a, b, tail = part[0], part[1], part[2:]
        out += "{" + a + "}{" + b + "}" + tail if b != "{" else "{" + a + "}" + b + tail
    return out


def _slash_as_frac(s: str) -> str:
    """``3/4`` (two integers written plainly) -> ``\\frac{3}{4}``."""
    pieces = s.split("/")
    if len(pieces) != 2:
        return s
    try:
        a, b = int(pieces[0]), int(pieces[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def strip_string(s: str, *, percent: tuple[str, ...]) -> str:
    """The normal form of a MATH answer; ``percent``: the peer's way with the percent sign (:data:`PERCENT_OPENRLHF`
    or :data:`PERCENT_VERL`). Raises :class:`Unparsable` where the normalisation cannot read ``s``."""
    for old, new in _NOISE:
        s = s.replace(old, new)
    s = _units_removed(s)
    for sign in percent:
        s = s.replace(sign, "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "x = 5", "k=3"
        s = sides[1]
    s = _braced_sqrt(s).replace(" ", "")
    s = _braced_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_as_frac(s)

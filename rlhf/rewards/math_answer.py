"""Final-answer extraction and equivalence for math-style tasks (pure string functions; no sympy).

Extraction order: the last ``\\boxed{...}`` (or ``\\fbox``), the last ``#### x`` line (GSM8K), the last
"answer is x", else the last number in the text. Equivalence: equal after normalisation (spaces, ``$``,
``\\left``/``\\right``, ``\\text{}``, ``\\dfrac``, trailing period, a leading ``x =``), or equal as numbers
(integers, decimals, thousands separators, ``a/b``, ``\\frac{a}{b}``, percentages) within 1e-6 relative.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+"


def extract_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces allowed), or ``\\boxed x``."""
    starts = [m for m in re.finditer(r"\\(?:boxed|fbox)", text)]
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


def extract_answer(text: str) -> str | None:
    """The final answer a response gives, or None."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    hashes = re.findall(r"####\s*([^\n]+)", text)
    if hashes:
        return hashes[-1].strip()
    stated = re.findall(r"answer is[:\s]*([^\n]+)", text, flags=re.IGNORECASE)
    if stated:
        return stated[-1].strip().rstrip(".").strip("$ ")
    numbers = re.findall(_NUMBER, text)
    return numbers[-1] if numbers else None


def normalize(answer: str) -> str:
    s = answer.strip()
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:mathrm|mathbf)\{([^{}]*)\}", r"\1", s)
    for token in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ ", "$", "^\\circ", "^{\\circ}"):
        s = s.replace(token, "")
    s = s.replace("\\%", "%").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\s+", "", s).rstrip(".")
    s = re.sub(r"^[a-zA-Z]=", "", s)  # "x=5" -> "5"
    return s


def to_number(s: str) -> float | None:
    """A number written as an int, decimal, 1,234, a/b, \\frac{a}{b}, \\frac ab or 50%, else None."""
    s = s.rstrip("%")
    m = re.fullmatch(r"(-?)\\frac\{([^{}]+)\}\{([^{}]+)\}|(-?)\\frac(\d)(\d)", s)
    if m:
        sign = -1.0 if (m.group(1) or m.group(4)) else 1.0
        num, den = (m.group(2), m.group(3)) if m.group(2) else (m.group(5), m.group(6))
        a, b = to_number(num), to_number(den)
        return sign * a / b if a is not None and b else None
    m = re.fullmatch(r"(-?[\d.]+)/(-?[\d.]+)", s)
    if m:
        a, b = to_number(m.group(1)), to_number(m.group(2))
        return a / b if a is not None and b else None
    if re.fullmatch(_NUMBER, s) and ("," not in s or re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s)):
        try:
            return float(s.replace(",", ""))
        except ValueError:
            return None
    return None


def answers_equal(predicted: str | None, gold: str) -> bool:
    if predicted is None:
        return False
    a, b = normalize(predicted), normalize(gold)
    if a == b:
        return True
    x, y = to_number(a), to_number(b)
    return x is not None and y is not None and math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)


def gold_answer(label: str) -> str:
    """A label may itself be a worked solution (``... #### 42`` or ``\\boxed{42}``): take its final answer."""
    if "\\boxed" in label or "\\fbox" in label or "####" in label:
        found = extract_answer(label)
        if found is not None:
            return found
    return label.strip()

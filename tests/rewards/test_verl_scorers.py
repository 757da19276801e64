"""veRL's default scorers as reproduced here (rlhf.rewards.verl_scorers) give veRL 0.9.1's own scores: GSM8K's strict
``#### N`` and MATH's boxed answer under Hendrycks' normalisation, pinned against veRL's functions read from its
wheel (``scripts/install.sh --dev`` fetches it into .cache/reference; RLHF_VERL_WHEEL names another file). The two
modules are pure (``re`` at most), so their source is run as it is; without the wheel the parity tests are skipped
saying where to put it."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from rlhf.rewards.verl_scorers import default_compute_score, gsm8k_score, math_score

VERSION = "0.9.1"
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "reference"
HOW_TO_GET = (
    f"the veRL {VERSION} wheel is not in {CACHE} nor named by RLHF_VERL_WHEEL (scripts/install.sh --dev fetches it; "
    f"or pip download verl=={VERSION} --no-deps -d {CACHE})"
)


def _wheel() -> Path | None:
    named = os.environ.get("RLHF_VERL_WHEEL")
    if named:
        return Path(named) if Path(named).is_file() else None
    found = sorted(CACHE.glob(f"verl-{VERSION}-*.whl"))
    return found[0] if found else None


@pytest.fixture(scope="module")
def verl() -> dict[str, dict[str, Any]]:
    wheel = _wheel()
    if wheel is None:
        pytest.skip(HOW_TO_GET)
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for name in ("gsm8k", "math_reward"):
            namespace: dict[str, Any] = {"__name__": f"verl_{name}"}
            exec(compile(z.read(f"verl/utils/reward_score/{name}.py"), name, "exec"), namespace)
            out[name] = namespace
    return out


GSM8K_CASES = [
    ("The answer is #### 72", "72"),
    ("#### 1,234", "1234"),
    ("#### $5", "5"),  # the regex stops at '$': no number
    ("first #### 3 then #### 4", "4"),
    ("first #### 3 then #### 4", "3"),
    ("#### -7.5", "-7.5"),
    ("no marker 72", "72"),
    ("####72", "72"),  # no space: not GSM8K's format
    ("x" * 400 + "#### 9", "9"),
    ("#### 9" + "x" * 400, "9"),  # the marker outside the last 300 characters
    ("#### 10.", "10"),
    ("", "1"),
]

MATH_CASES = [
    ("so \\boxed{\\frac{1}{2}}", "\\frac12"),
    ("\\boxed{0.5}", "\\frac{1}{2}"),
    ("\\boxed{1/2}", "\\frac{1}{2}"),
    ("\\boxed 5$ done", "5"),
    ("\\boxed{x = 3}", "3"),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}"),
    ("\\boxed{10\\%}", "10"),
    ("\\boxed{90^\\circ}", "90"),
    ("\\boxed{\\sqrt3}", "\\sqrt{3}"),
    ("\\boxed{5 \\text{ cm}}", "5"),
    ("\\boxed{.5}", "0.5"),
    ("\\fbox{4}", "4"),  # veRL finds it, then refuses to unbox it: 0
    ("\\boxed{\\left( 1, 2 \\right)}", "(1,2)"),
    ("two \\boxed{1} and \\boxed{2}", "2"),
    ("\\boxed{2", "2"),  # unbalanced
    ("no box 2", "2"),
    ("\\boxed{\\frac}", "\\frac"),  # normalisation fails: raw comparison
    ("\\boxed{\\sqrt}", "\\sqrt"),
    ("\\boxed{a \\text{ b} \\text{ c}}", "a \\text{ b} \\text{ c}"),
    ("\\boxed{\\frac1}", "\\frac1"),
    ("\\boxed{3}", "3.0"),
    ("\\boxed{4}", "5"),
    ("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}"),
    ("\\boxed{a \\text{ b} \\text{ c}}", "a"),
]


@pytest.mark.parametrize(("response", "truth"), GSM8K_CASES)
def test_gsm8k_scores_as_verls(verl, response, truth):
    theirs = verl["gsm8k"]["compute_score"](response, truth)
    assert gsm8k_score(response, truth) == theirs
    assert default_compute_score("openai/gsm8k", response, truth) == float(theirs)


@pytest.mark.parametrize(("response", "truth"), MATH_CASES)
def test_math_scores_as_verls(verl, response, truth, capsys):
    theirs = verl["math_reward"]["compute_score"](response, truth)
    assert math_score(response, truth) == theirs
    for source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"):
        assert default_compute_score(source, response, truth) == theirs


def test_the_cases_cover_both_outcomes(verl):
    gsm = [verl["gsm8k"]["compute_score"](r, t) for r, t in GSM8K_CASES]
    math_ = [verl["math_reward"]["compute_score"](r, t) for r, t in MATH_CASES]
    assert gsm.count(1.0) >= 3 and gsm.count(0) >= 3 and math_.count(1.0) >= 5 and math_.count(0.0) >= 5


def test_a_source_without_a_reproduced_scorer_is_refused_naming_the_way_out():
    with pytest.raises(NotImplementedError, match=r"'math_dapo' has no default scorer here.*reward.function="):
        default_compute_score("math_dapo", "\\boxed{1}", "1")

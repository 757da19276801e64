"""Hendrycks' MATH normalisation, written once (rlhf.compat.hendrycks_math) for both peers' graders, gives each peer's
own normal form: OpenRLHF 0.11.2's ``mathd_normalize_answer`` (through rlhf.compat.openrlhf_math.math_normalize) and
veRL 0.9.1's ``strip_string`` (through rlhf.rewards.verl_scorers.normalize_math), read from their wheels (both
modules are pure: their source is run as it is; without a wheel its test is skipped saying where to put it). The
one step where the peers' copies differ, the percent sign, is pinned without the wheels."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from rlhf.compat.hendrycks_math import PERCENT_OPENRLHF, PERCENT_VERL, Unparsable, strip_string
from rlhf.compat.openrlhf_math import math_normalize
from rlhf.rewards.verl_scorers import normalize_math

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "reference"
WHEELS = {  # peer -> (version, the env variable naming another file, the module holding its normaliser)
    "openrlhf": ("0.11.2", "RLHF_OPENRLHF_WHEEL", "openrlhf-0.11.2.data/purelib/openrlhf/utils/math_utils.py"),
    "verl": ("0.9.1", "RLHF_VERL_WHEEL", "verl/utils/reward_score/math_reward.py"),
}

CASES = [
    "\\frac12",
    "\\dfrac{3}{4}",
    "0.5",
    ".5",
    "1/2",
    "x = 3",
    "k=\\sqrt3",
    "10\\%",
    "50\\\\\\%",  # three backslashes, then '%': the peers' percent steps part ways
    "50\\\\\\%%",
    "90^\\circ",
    "5 \\text{ cm}",
    "a \\text{ b} \\text{ c}",  # several units: unparsable
    "\\frac",
    "\\sqrt",
    "\\frac1",
    "\\left( 1, 2 \\right)",
    " \\text{(A)} ",
    "\\$4.50",
    "",
]


def _peer(name: str) -> dict[str, Any]:
    version, env, member = WHEELS[name]
    named = os.environ.get(env)
    found = [Path(named)] if named else sorted(CACHE.glob(f"{name}-{version}-*.whl"))
    if not found or not found[0].is_file():
        pytest.skip(f"the {name} {version} wheel is not in {CACHE} nor named by {env} (scripts/install.sh --dev)")
    namespace: dict[str, Any] = {"__name__": f"{name}_math"}
    with zipfile.ZipFile(found[0]) as z:
        exec(compile(z.read(member), member, "exec"), namespace)
    return namespace


def _or_raises(fn, s: str) -> Any:
    try:
        return fn(s)
    except Exception:  # noqa: BLE001 - the normaliser gave up: what each caller falls back on is its own
        return "<raises>"


@pytest.mark.parametrize("answer", CASES)
def test_openrlhfs_normal_form_is_openrlhfs(answer):
    assert math_normalize(answer) == _peer("openrlhf")["mathd_normalize_answer"](answer)


@pytest.mark.parametrize("answer", CASES)
def test_verls_normal_form_is_verls(answer):
    assert _or_raises(normalize_math, answer) == _or_raises(_peer("verl")["strip_string"], answer)


def test_each_peer_drops_the_percent_sign_its_own_way():
    # OpenRLHF removes '\%' twice, veRL '\\%' then '\%' (after '\\' became '\' in both).
    assert strip_string("50\\\\\\%%", percent=PERCENT_OPENRLHF) == "50"
    assert strip_string("50\\\\\\%%", percent=PERCENT_VERL) == "50%"
    assert strip_string("50\\\\\\%", percent=PERCENT_OPENRLHF) == "50\\"
    assert strip_string("50\\\\\\%", percent=PERCENT_VERL) == "50"


@pytest.mark.parametrize("answer", ["\\frac", "x+\\sqrt", "a \\text{ b} \\text{ c}"])
def test_an_answer_the_normalisation_cannot_read_is_unparsable_for_both(answer):
    for percent in (PERCENT_OPENRLHF, PERCENT_VERL):
        with pytest.raises(Unparsable):
            strip_string(answer, percent=percent)
    assert math_normalize(answer) == answer.strip()  # OpenRLHF compares the answer as written

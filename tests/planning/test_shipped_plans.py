"""Every shipped recipe plans as it did: its plan (roles, placement, memory per device, host memory, executor) and the
cost model's seconds per phase of one step, compared with tests/planning/shipped_plans.json. Moving code (a backend
into its folder, the planner into its package) must leave them as they were; a change that means to move a figure
rewrites the file (``python tests/planning/test_shipped_plans.py``) and the diff shows what moved."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlhf.planning.cost import estimate
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec
from rlhf.spec.required import MissingValues

STORED = Path(__file__).with_name("shipped_plans.json")
RECIPES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))


def figures(recipe: str) -> dict:
    """What ``rlhf-plan +recipe=NAME`` decides and estimates, as plain data (rounded where floats are summed); a
    recipe that asks for a value on the command line (a ``???``) stores what it asks for."""
    try:
        spec = load_spec([f"+recipe={recipe}"])
    except MissingValues as e:
        return {"asks_for": str(e).splitlines()[1:]}
    p = plan(spec)
    out = json.loads(p.to_json())
    if "rollout" in p.roles or spec.algorithm.family == "rl":
        step = estimate(spec, p)
        out["step_seconds"] = {k: float(f"{v:.6g}") for k, v in sorted(step.phases.items())}
    return out


def _stored() -> dict:
    return json.loads(STORED.read_text())


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipe_plans_as_it_did(recipe):
    stored = _stored()
    assert recipe in stored, f"{recipe} is new: run python tests/planning/test_shipped_plans.py to store its plan"
    now = json.loads(json.dumps(figures(recipe)))
    moved = sorted(k for k in set(now) | set(stored[recipe]) if now.get(k) != stored[recipe].get(k))
    assert not moved, f"{recipe}: {moved} changed: {[(k, stored[recipe].get(k), now.get(k)) for k in moved][:3]}"


def test_every_stored_plan_is_a_shipped_recipe():
    assert sorted(_stored()) == RECIPES


if __name__ == "__main__":  # rewrite the stored plans (one line per recipe, so a diff names the recipes that moved)
    lines = [f"{json.dumps(r)}: {json.dumps(figures(r), sort_keys=True)}" for r in RECIPES]
    STORED.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    sys.exit(0)

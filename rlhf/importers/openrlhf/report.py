"""The import-openrlhf report: every flag as written with what it became, or why it has no equivalent (markers:
rlhf.importers.report)."""

from __future__ import annotations

from rlhf.importers import report as common
from rlhf.importers.openrlhf.args import Command, Flag
from rlhf.importers.openrlhf.mapping import Mapping, Outcome
from rlhf.importers.placeholders import UNKNOWN, describe
from rlhf.importers.recipe import Recipe, _scalar
from rlhf.importers.report import NONE, OVERRIDDEN, UNRECOGNISED, WRITTEN, Line

__all__ = ["NONE", "OVERRIDDEN", "UNRECOGNISED", "WRITTEN", "Line", "flag_line", "lines", "render"]


def _unknown_line(flag: Flag, outcome: Outcome, recipe: Recipe) -> Line:
    parts = [describe(flag.unknown)]
    if not flag.name or flag.problem:
        parts.append("any flags it holds are not in the recipe: give them after -- to convert them as well")
    elif outcome.overridden_by:
        parts.append(f"set again by the later {outcome.overridden_by}")
    elif outcome.none:
        parts.append(f"no equivalent anyway ({outcome.none})")
    else:
        parts += common.placeholder_detail(outcome.keys, recipe)
        if not any(k in recipe.placeholders for k in outcome.keys):
            assumed = ", ".join(f"{c}={_scalar(v)}" for c, v in flag.sets.items())
            parts.append(f"OpenRLHF's default assumed ({assumed})" + (f"; {outcome.note}" if outcome.note else ""))
    return Line(flag.text, UNKNOWN, "; ".join(parts))


def flag_line(flag: Flag, outcome: Outcome, recipe: Recipe) -> Line:
    if flag.unknown:
        return _unknown_line(flag, outcome, recipe)
    if flag.dropped_upstream:
        return Line(flag.text, NONE, "no equivalent (removed from OpenRLHF itself before 2026-04)")
    if flag.problem:
        return Line(flag.text, UNRECOGNISED, f"unrecognised: {flag.problem}")
    if outcome.overridden_by:
        return Line(flag.text, OVERRIDDEN, f"set again by the later {outcome.overridden_by}")
    if outcome.none.startswith("coming"):
        return Line(flag.text, NONE, outcome.none)
    if outcome.none:
        return Line(flag.text, NONE, f"no equivalent ({outcome.none})")
    marker, detail = common.written_detail(
        outcome.keys, outcome.note, recipe, "OpenRLHF's default; nothing to carry over"
    )
    return Line(flag.text, marker, detail)


def lines(cmd: Command, mapping: Mapping, recipe: Recipe) -> list[Line]:
    return [flag_line(f, o, recipe) for f, o in zip(cmd.flags, mapping.outcomes, strict=True)]


def render(
    cmd: Command,
    mapping: Mapping,
    recipe: Recipe,
    *,
    recipe_path: str,
    extra_notes: list[str],
) -> str:
    rows = lines(cmd, mapping, recipe)
    vocabulary = {"flat": "flat flags (before 2026-04)", "dotted": "dotted flags", "mixed": "flat and dotted flags"}
    title = f"OpenRLHF {cmd.entry}, {vocabulary[cmd.vocabulary()]}: {len(rows)} flag(s) -> {recipe_path}"
    notes = recipe.notes + mapping.notes + extra_notes
    return common.render(title, rows, recipe, what="flags", source="OpenRLHF", carried=mapping.carried, notes=notes)

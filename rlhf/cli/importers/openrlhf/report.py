"""The import report: every flag as written with what it became, or why it has no equivalent.

Markers: ``->`` written to the recipe; ``==`` carried over but equal to the chosen options (nothing to write);
``--`` no equivalent (unsupported, GPU-only, superseded, not needed, removed from OpenRLHF); ``~~`` set again by a
later flag; ``??`` its value is unknown here (set outside the script: a placeholder in the recipe); ``!!``
unrecognised (not a flag of the entry point, or a malformed value).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.cli.importers.openrlhf.args import Command, Flag
from rlhf.cli.importers.openrlhf.mapping import Mapping, Outcome
from rlhf.cli.importers.placeholders import UNKNOWN, describe
from rlhf.cli.importers.recipe import Recipe, _scalar

WRITTEN, EQUAL, NONE, OVERRIDDEN, UNRECOGNISED = "->", "==", "--", "~~", "!!"


@dataclass(frozen=True)
class Line:
    flag: str  # as written
    marker: str
    detail: str


def _unknown_line(flag: Flag, outcome: Outcome, recipe: Recipe) -> Line:
    parts = [describe(flag.unknown)]
    if not flag.name or flag.problem:
        parts.append("any flags it holds are not in the recipe: give them after -- to convert them as well")
    elif outcome.overridden_by:
        parts.append(f"set again by the later {outcome.overridden_by}")
    elif outcome.none:
        parts.append(f"no equivalent anyway ({outcome.none})")
    else:
        for k in outcome.keys:
            h = recipe.placeholders.get(k)
            if h is not None and h.required:
                parts.append(f"{k}=??? in the recipe: give {k}=VALUE")
            elif h is not None:
                parts.append(f"{k}: the default here ({_scalar(h.default_here)}) stands; commented in the recipe")
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
    if outcome.none:
        return Line(flag.text, NONE, f"no equivalent ({outcome.none})")
    written = [k for k in outcome.keys if k in recipe.values]
    equal = [k for k in outcome.keys if k not in recipe.values]
    parts = [f"{k}={_scalar(recipe.values[k])}" for k in written]
    if equal:
        parts.append("as in the chosen options: " + ", ".join(f"{k}={_scalar(recipe.equal.get(k))}" for k in equal))
    if outcome.note:
        parts.append(outcome.note)
    if not parts:
        return Line(flag.text, EQUAL, "OpenRLHF's default; nothing to carry over")
    placed = outcome.note.startswith(("placement:", "model:"))
    return Line(flag.text, WRITTEN if written or placed else EQUAL, "; ".join(parts))


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
    counts = {m: sum(r.marker == m for r in rows) for m, _ in _LABELS}
    vocabulary = {"flat": "flat flags (before 2026-04)", "dotted": "dotted flags", "mixed": "flat and dotted flags"}
    out = [
        f"OpenRLHF {cmd.entry}, {vocabulary[cmd.vocabulary()]}: {len(rows)} flag(s) -> {recipe_path}",
        "  " + ", ".join(f"{counts[m]} {label}" for m, label in _LABELS),
        "",
        "recipe: " + ", ".join(f"{g}={o}" for g, o in recipe.choices.items()),
        "",
        "flags",
    ]
    width = min(max((len(r.flag) for r in rows), default=0), 52)
    for r in rows:
        text = r.flag if len(r.flag) <= 70 else r.flag[:67] + "..."
        if len(text) <= width:
            out.append(f"  {text:<{width}}  {r.marker} {r.detail}")
        else:
            out.append(f"  {text}")
            out.append(f"  {'':<{width}}  {r.marker} {r.detail}")
    carried = {k: v for k, v in mapping.carried.items() if k in recipe.values}
    if carried:
        out += ["", "OpenRLHF defaults carried over (the command does not set them; the chosen options differ)"]
        out += [f"  {k}={_scalar(recipe.values[k])}  (default of {src})" for k, src in carried.items()]
    notes = recipe.notes + mapping.notes + extra_notes
    if notes:
        out += ["", "notes"] + [f"  - {n}" for n in notes]
    return "\n".join(out) + "\n"


_LABELS = (
    (WRITTEN, "written"),
    (EQUAL, "as here already"),
    (NONE, "without equivalent"),
    (OVERRIDDEN, "set twice"),
    (UNKNOWN, "unknown here"),
    (UNRECOGNISED, "unrecognised"),
)

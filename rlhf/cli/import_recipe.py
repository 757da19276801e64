"""What ``rlhf-recipes import-openrlhf | import-verl | import-trl`` do with an importer's conversion: write the recipe
and the report, then (``--check``) compose, validate and plan it. The conversion itself is rlhf.importers'."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rlhf.cli.common import EXIT_USER_ERROR, compose_or_fail, fail
from rlhf.errors import UserError
from rlhf.importers import shell
from rlhf.importers.common import Conversion
from rlhf.importers.placeholders import Placeholder


def write_and_check(args: argparse.Namespace, convert: Callable[[], Conversion]) -> int:
    """Convert, write the recipe and the report, then ``--check`` it; a user error is one message, no traceback."""
    try:
        conv = convert()
    except (UserError, shell.ShellSyntaxError) as e:
        fail(str(e))
    out = Path(args.output or conv.default_name())
    if out.exists() and not args.force:
        fail(f"{out} exists; choose another file with -o, or pass --force")
    out.write_text(conv.yaml())
    report = conv.report(str(out))
    print(report, end="")
    if args.report:
        Path(args.report).write_text(report)
    print(f"\nwrote {out}; run it with: rlhf-run +recipe={out}{_command_line_values(conv.placeholders())}")
    if not args.check:
        return 0
    return 0 if check_recipe(out, conv.placeholders()) else EXIT_USER_ERROR


def _command_line_values(holders: dict[str, Placeholder]) -> str:
    return "".join(f" {h.key}=..." for h in holders.values() if h.required)


def check_recipe(path: Path, holders: dict[str, Placeholder]) -> bool:
    """Compose, validate and plan the written recipe, printing the plan (or every problem) and the values the user
    must give; True when nothing but those values is missing. Each ??? is validated with its stand-in in place."""
    from rlhf.cli.plan import render as render_plan
    from rlhf.planning.plan import plan
    from rlhf.spec.required import check_with_stand_ins

    cfg = compose_or_fail([f"+recipe={path}"])
    checked = check_with_stand_ins(cfg, {k: h.stand_in for k, h in holders.items()})
    print()
    if checked.errors:
        print(f"check: invalid config ({path}): {len(checked.errors)} problem(s)")
        print("\n".join(f"  - {e}" for e in checked.errors))
    else:
        print(render_plan(plan(checked.spec)))
    needs = [holders[k].need() if k in holders else f"{k} (???): give {k}=VALUE" for k in checked.needs]
    optional = [h.need() for h in holders.values() if not h.required]
    if needs:
        print(f"fill in before running ({len(needs)}; checked with stand-ins in their place):")
        print("\n".join(f"  - {n}" for n in needs))
    if optional:
        print(f"set outside the script, defaults here used ({len(optional)}):")
        print("\n".join(f"  - {n}" for n in optional))
    return not checked.errors

"""The command that made a run folder (``RUN_DIR/command.json``, what ``rlhf-run --resume`` repeats), and how a
changed one reaches it: a continuation whose command differs (``--resume RUN_DIR model=small``) is staged in
``RUN_DIR/.command.next.json`` and becomes the run's command only once that attempt has started (its models built
and its checkpoint loaded: the run lifecycle's start-up line), so an override that fails is never what the next
``--resume`` repeats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COMMAND_FILE = "command.json"
NEXT_COMMAND_FILE = ".command.next.json"


def read(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / COMMAND_FILE).read_text())
    except (OSError, ValueError):
        return None


def record(run_dir: Path, command: dict[str, Any]) -> bool:
    """Write ``command`` as the run's, or stage it when the folder has another one already; True when staged."""
    run_dir = Path(run_dir)
    staged = run_dir / NEXT_COMMAND_FILE
    current = read(run_dir)
    if current is not None and current.get("argv") != command.get("argv"):
        staged.write_text(json.dumps(command, indent=1))
        return True
    staged.unlink(missing_ok=True)  # a stale one from an attempt that never started
    if current != command:
        tmp = run_dir / f".{COMMAND_FILE}.tmp"
        tmp.write_text(json.dumps(command, indent=1))
        tmp.replace(run_dir / COMMAND_FILE)
    return False


def adopt_staged(run_dir: Path) -> bool:
    """The staged command becomes the run's (the attempt that staged it has started); True when there was one."""
    staged = Path(run_dir) / NEXT_COMMAND_FILE
    if not staged.is_file():
        return False
    staged.replace(Path(run_dir) / COMMAND_FILE)
    return True

"""Resuming a run: ``rlhf-run --resume [RUN_DIR|latest] [more overrides]`` repeats the command that made RUN_DIR
(kept in RUN_DIR/command.json) with its output folder pinned to RUN_DIR, so checkpoint.resume=auto finds the
checkpoint there. ``latest`` (the default) is the newest run folder under ./outputs. Every message that mentions
resuming prints this exact command."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rlhf.cli.common import fail
from rlhf.errors import RunInterrupted

COMMAND_FILE = "command.json"
_ENV = "RLHF_COMMAND"  # the command line of this rlhf-run, for the job to record (it runs inside Hydra)


def remember_command(argv: list[str]) -> None:
    os.environ[_ENV] = json.dumps(argv)


def record_command(run_dir: Path) -> None:
    """The command line of this run (before Hydra), so ``--resume`` can repeat it."""
    argv = json.loads(os.environ.get(_ENV, "[]"))
    argv = [a for a in argv if not a.startswith("hydra.run.dir=")]
    (Path(run_dir) / COMMAND_FILE).write_text(json.dumps({"argv": argv, "cwd": os.getcwd()}, indent=1))


def _latest(root: Path) -> Path | None:
    found = [p.parent for p in root.glob(f"**/{COMMAND_FILE}")] if root.is_dir() else []
    return max(found, key=lambda p: (p / COMMAND_FILE).stat().st_mtime) if found else None


def resume_argv(argv: list[str]) -> list[str]:
    """``argv`` with ``--resume [RUN_DIR|latest]`` replaced by the recorded command of RUN_DIR and
    ``hydra.run.dir=RUN_DIR``; unchanged without ``--resume``."""
    if "--resume" not in argv and not any(a.startswith("--resume=") for a in argv):
        return argv
    rest, target, i = [], "latest", 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--resume="):
            target = a.partition("=")[2] or "latest"
        elif a == "--resume":
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and not nxt.startswith("-") and "=" not in nxt:
                target, i = nxt, i + 1
        else:
            rest.append(a)
        i += 1
    if target == "latest":
        run_dir = _latest(Path("outputs"))
        if run_dir is None:
            fail("--resume latest: no run folder with a command.json under ./outputs; name one: rlhf-run --resume DIR")
    else:
        run_dir = Path(target)
    if not (run_dir / COMMAND_FILE).is_file():
        fail(
            f"--resume {target}: {run_dir} is not a run folder of rlhf-run (no {COMMAND_FILE}); "
            "pass the folder the run printed after 'rlhf-run: ... ->'"
        )
    recorded = json.loads((run_dir / COMMAND_FILE).read_text())
    _refuse_new_init_from(target, recorded["argv"], rest)
    run_dir = run_dir.resolve()
    start = recorded.get("cwd")
    if start and Path(start).is_dir() and Path(start).resolve() != Path.cwd().resolve():
        # Relative paths in the command, and the default MLflow store (./mlflow.db), mean what they meant then.
        print(f"resuming from {start}, where the run was started", file=sys.stderr)
        os.chdir(start)
    argv = [*recorded["argv"], *rest, f"hydra.run.dir={run_dir}"]
    print(f"resuming {run_dir}: rlhf-run {' '.join(recorded['argv'] + rest)}", file=sys.stderr)
    return argv


def _init_from(argv: list[str]) -> list[str]:
    return [a.lstrip("+").partition("=")[2] for a in argv if a.lstrip("+").startswith("checkpoint.init_from=")]


def _refuse_new_init_from(target: str, recorded: list[str], added: list[str]) -> None:
    """``--resume`` continues a run; a checkpoint.init_from the run was not started with would start another."""
    new, before = _init_from(added), _init_from(recorded)
    if new and new[-1] != (before[-1] if before else ""):
        fail(
            f"--resume {target} continues that run (its weights, optimizer, step and data position), while "
            f"checkpoint.init_from={new[-1]} starts a new run from those weights: drop --resume to start the new run, "
            "or drop checkpoint.init_from to continue this one"
        )


def resume_line(e: RunInterrupted) -> str:
    """The one line printed when a run stops on Ctrl-C or SIGTERM."""
    return e.line()

"""Resuming a run: ``rlhf-run --resume [RUN_DIR|latest] [more overrides]`` repeats the command that made RUN_DIR
(kept in RUN_DIR/command.json) with its output folder pinned to RUN_DIR, so checkpoint.resume=auto finds the
checkpoint there. ``latest`` (the default) is the newest run folder under ./outputs. Every message that mentions
resuming prints this exact command. A finished run (its attempt.json says FINISHED) has nothing to resume: that is
said at once, without composing or starting anything, unless more overrides ask for more.

The same command typed again in the same directory, without a pinned ``hydra.run.dir`` (where Hydra would make a
new folder), continues the newest interrupted run of that command under ./outputs instead, saying so in one line:
what veRL's ``trainer.resume_mode=auto`` does and what OpenRLHF's ``--load_checkpoint`` does for a command whose
``--ckpt_path`` is the same, and what a scheduler that requeues a preempted job needs. ``checkpoint.resume=never``
(or a pinned folder) starts a new run. An interrupted run of the same recipe under another command is named in one
line with its resume command, and not touched."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rlhf.cli.common import fail, names_recipe
from rlhf.errors import RunInterrupted
from rlhf.pipelines.run_command import COMMAND_FILE

RUNS_ROOT = Path("outputs")  # where Hydra's default hydra.run.dir puts a run folder (conf/config.yaml)
_ENV = "RLHF_COMMAND"  # the command line of this rlhf-run, for the job to record (it runs inside Hydra)


def remember_command(argv: list[str]) -> None:
    os.environ[_ENV] = json.dumps(argv)


def record_command(run_dir: Path) -> None:
    """The command line of this run (before Hydra), so ``--resume`` can repeat it; a changed one for a folder that
    has a command already is staged until this attempt has started (rlhf.pipelines.run_command)."""
    from rlhf.pipelines import run_command

    argv = json.loads(os.environ.get(_ENV, "[]"))
    argv = [a for a in argv if not a.startswith("hydra.run.dir=")]
    run_command.record(Path(run_dir), {"argv": argv, "cwd": os.getcwd()})


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
    if not rest:
        _nothing_to_resume(run_dir)
    run_dir = run_dir.resolve()
    start = recorded.get("cwd")
    if start and Path(start).is_dir() and Path(start).resolve() != Path.cwd().resolve():
        # Relative paths in the command, and the default MLflow store (./mlflow.db), mean what they meant then.
        print(f"resuming from {start}, where the run was started", file=sys.stderr)
        os.chdir(start)
    before = _unpinned(run_dir, recorded["argv"])
    argv = [*before, *rest, f"hydra.run.dir={run_dir}"]
    print(f"resuming {run_dir}: rlhf-run {' '.join(before + rest)}", file=sys.stderr)
    return argv


def _unpinned(run_dir: Path, argv: list[str]) -> list[str]:
    """The recorded command without a checkpoint it picked by hand (``checkpoint.resume=PATH``) once the run has
    checkpoints of its own: that pick was for one attempt; every later ``--resume`` continues from the run's newest
    checkpoint (one given again on this command line still applies, to this attempt)."""
    from rlhf.pipelines import attempt
    from rlhf.run_files.checkpoint import CheckpointManager
    from rlhf.spec.names import RESUME_MODES

    def picked(a: str) -> bool:
        key, eq, value = a.lstrip("+").partition("=")
        return bool(eq) and key == "checkpoint.resume" and value not in RESUME_MODES

    picks = [a for a in argv if picked(a)]
    if not picks:
        return argv
    last = attempt.read(run_dir)
    newest = CheckpointManager(Path(last.checkpoints) if last else run_dir / "checkpoints").latest()
    if newest is None:  # none of its own yet: the pick still says where the run starts
        return argv
    print(
        f"note: {picks[-1]} picked a checkpoint for an earlier attempt; continuing from the run's newest, {newest}",
        file=sys.stderr,
    )
    return [a for a in argv if not picked(a)]


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


def _nothing_to_resume(run_dir: Path) -> None:
    """A run whose last attempt finished: say so and exit 0, in about the time Python takes to start."""
    from rlhf.pipelines import attempt

    last = attempt.read(run_dir)
    if last is None or last.status != attempt.FINISHED:
        return
    run_dir = run_dir.resolve()
    model = run_dir / "model"
    where = f"; its model is in {model}" if model.is_dir() else ""
    print(
        f"{run_dir} finished all its {last.steps} steps{where}: nothing to resume (to train further: "
        f"rlhf-run --resume {run_dir} trainer.max_steps=N)",
        file=sys.stderr,
    )
    raise SystemExit(0)


def _recipe_of(argv: list[str]) -> str | None:
    for a in argv:
        key, eq, value = a.partition("=")
        if eq and key.lstrip("+~") == "recipe":
            return value
    return None


def interrupted_runs(root: Path = RUNS_ROOT) -> list[tuple[Path, dict, int]]:
    """Run folders under ``root`` whose last attempt stopped before finishing (on a signal, a failure, or a driver
    that died) and left a checkpoint, newest first: (folder, its command.json, the checkpoint's step)."""
    from rlhf.pipelines import attempt
    from rlhf.run_files.checkpoint import CheckpointManager

    found = []
    for f in root.glob(f"**/{COMMAND_FILE}") if root.is_dir() else []:
        last = attempt.read(f.parent)
        if last is None or last.status == attempt.FINISHED or (last.status == attempt.RUNNING and not last.dead):
            continue
        ckpt = CheckpointManager(Path(last.checkpoints)).latest()
        if ckpt is None:
            continue
        try:
            recorded = json.loads(f.read_text())
        except ValueError:
            continue
        found.append((f.parent, recorded, CheckpointManager.step_of(ckpt) or 0, f.stat().st_mtime))
    return [(d, r, step) for d, r, step, _ in sorted(found, key=lambda x: -x[3])]


def continue_interrupted(argv: list[str]) -> list[str]:
    """``argv`` pinned to the newest interrupted run of the same command in this directory, with one line saying
    so; unchanged when the folder is pinned already (hydra.run.dir=, --resume), when ``checkpoint.resume`` is set,
    or when there is none. A run of the same recipe under another command is named with its resume command."""
    if any(a.partition("=")[0].lstrip("+~") in ("hydra.run.dir", "checkpoint.resume") for a in argv):
        return argv
    cwd = str(Path.cwd())
    candidates = interrupted_runs()
    for run_dir, recorded, step in candidates:
        if recorded.get("argv") == argv and recorded.get("cwd") == cwd:
            print(
                f"continuing the interrupted run of this command in {run_dir} from its checkpoint at step {step} "
                f"(as rlhf-run --resume {run_dir}); for a new run instead add checkpoint.resume=never",
                file=sys.stderr,
            )
            return [*argv, f"hydra.run.dir={run_dir.resolve()}"]
    recipe = _recipe_of(argv) if names_recipe(argv) else None
    for run_dir, recorded, step in candidates:
        if recipe and _recipe_of(recorded.get("argv", [])) == recipe and recorded.get("cwd") == cwd:
            print(
                f"note: {run_dir} holds an interrupted run of {recipe} (another command, checkpoint at step {step}); "
                f"this is a new run; to continue that one: rlhf-run --resume {run_dir}",
                file=sys.stderr,
            )
            break
    return argv


def resume_line(e: RunInterrupted) -> str:
    """The one line printed when a run stops on Ctrl-C or SIGTERM."""
    return e.line()


TRAINED_ROLES = ("policy", "critic")


def _resumed_run(spec, run_dir: Path) -> Path | None:
    """The run folder whose checkpoint this run will continue (this one, or the run of a checkpoint picked by
    hand), when it has the config that run was trained with; None for a new run."""
    from rlhf.run_files.checkpoint import CheckpointManager

    resume = spec.checkpoint.resume
    if resume == "never":
        return None
    if resume == "auto":
        root = Path(spec.checkpoint.dir)
        found = CheckpointManager(root if root.is_absolute() else run_dir / root).latest()
        return run_dir if found is not None and (run_dir / "resolved_config.yaml").is_file() else None
    for folder in list(Path(resume).expanduser().resolve().parents)[:3]:
        if (folder / "resolved_config.yaml").is_file():
            return folder
    return None


def _trained_ranks(plan_json: str) -> dict[str, int]:
    roles = json.loads(plan_json).get("roles", {})
    return {r: int(roles[r]["ranks"]) for r in TRAINED_ROLES if r in roles}


def refuse_a_changed_resume(cfg, spec, run_dir: Path) -> None:
    """Before anything starts: a resume whose config changes what the checkpoint was trained for is refused naming
    each key, old and new value, and the fix (rlhf.spec.resume_rules); other changes are said in one line."""
    from omegaconf import OmegaConf

    from rlhf.planning.plan import plan
    from rlhf.spec.resume_rules import ResumeRefused, flatten, judge, refusal

    before = _resumed_run(spec, Path(run_dir))
    if before is None:
        return
    old = flatten(OmegaConf.to_container(OmegaConf.load(before / "resolved_config.yaml"), resolve=False))
    new = flatten(OmegaConf.to_container(cfg, resolve=True))
    plan_file = before / "plan.json"
    old_ranks = _trained_ranks(plan_file.read_text()) if plan_file.is_file() else None
    new_ranks = _trained_ranks(plan(spec).to_json()) if old_ranks else None
    refused, noted = judge(old, new, old_ranks, new_ranks)
    if refused:
        raise ResumeRefused(refusal(refused, str(before)))
    if noted:
        print(
            "resuming with changed settings (the run continues with them): " + "; ".join(str(c) for c in noted),
            file=sys.stderr,
        )


def verified_resume(spec, run_dir: Path):
    """``spec``, its resume checkpoint verified now, before the heavy imports and any process
    (rlhf.run_files.checkpoint): damage is named at once (a CheckpointError when nothing intact is left). The run
    resolves the same checkpoint again without hashing it or naming its damage a second time; ``checkpoint.resume``
    keeps its word (``auto`` still means what rlhf.pipelines.init_from checks)."""
    from rlhf.run_files.checkpoint import CheckpointManager

    ck = spec.checkpoint
    if ck.resume == "never":
        return spec
    root = Path(ck.dir)
    CheckpointManager(root if root.is_absolute() else Path(run_dir) / root, verify=ck.verify).resolve_resume(ck.resume)
    return spec

"""rlhf-run [-cd DIR] [-cn NAME] [+recipe=NAME|FILE] [group=option] [key=value] [-m sweep]: compose, validate,
plan, run.

A Hydra app: --help lists the groups, --cfg job prints the resolved config, --info shows the search path, -cd adds
your config folder in front of the shipped one, -cn picks your primary config, -m runs a sweep through any sweeper
and launcher plugin. Bare ``rlhf-run`` runs +recipe=quickstart_cpu. Every job a sweep names up front is validated
before any starts; trials a sampling sweeper draws are validated in the job. A single run is validated and
preflighted before Hydra makes its run folder, so a refused run leaves none; the same command again continues its
interrupted run (rlhf.cli.resume).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from rlhf.cli.common import compose_or_fail, fail, with_default_recipe
from rlhf.errors import RunInterrupted, UserError
from rlhf.spec import SpecInvalid

# Hydra flags that print or inspect instead of running: no preflight, no run folder search.
_NOT_A_RUN = {
    "--help",
    "-h",
    "--hydra-help",
    "--info",
    "-i",
    "--cfg",
    "-c",
    "--shell-completion",
    "-sc",
    "--experimental-rerun",
    "--package",
    "-p",
}
_PREFLIGHT_DONE = False  # set once this process checked the run before Hydra (the job need not check it again)

_HYDRA_FLAGS_WITH_VALUE = {
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
    "--info",
    "-i",
}


def _split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's own flags, overrides)."""
    flags, overrides, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-"):
            flags.append(a)
            if a in _HYDRA_FLAGS_WITH_VALUE and i + 1 < len(argv) and "=" not in argv[i + 1]:
                flags.append(argv[i + 1])
                i += 1
        else:
            overrides.append(a)
        i += 1
    return flags, overrides


def _flag_value(flags: list[str], short: str, long: str) -> str | None:
    """The value of a Hydra flag given as ``-cd X``, ``--config-dir X`` or ``--config-dir=X`` (the last one wins)."""
    value = None
    for i, f in enumerate(flags):
        if f in (short, long) and i + 1 < len(flags):
            value = flags[i + 1]
        elif f.startswith(f"{long}="):
            value = f.partition("=")[2]
    return value


def _hydra_overrides(overrides: list[str]) -> list[str]:
    """The overrides Hydra's own help can take: Hydra composes ``--hydra-help`` from its config alone, without our
    primary config, so a recipe (the default one included) or a group of ours has nothing to override there."""
    return [o for o in overrides if o.lstrip("+~").startswith(("hydra/", "hydra."))]


def task(cfg) -> float | None:
    """One job: the composed config in, a trained model and its run in every tracker out. In a sweep the job writes
    its record (job.json) and returns its objective (``sweep.objective``) to the sweeper; a problem the user can fix
    fails this job alone (JobFailed), not the sweep."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from rlhf.pipelines.startup_clock import mark_job_start
    from rlhf.spec.build import with_recipe_name
    from rlhf.spec.required import markers_to_missing
    from rlhf.spec.store import register

    mark_job_start()  # a multirun's later jobs time their launch from here, not from the sweep's start
    register(recipes=())  # the resolvers, in a launcher's fresh process too (the job's config is composed)
    hc = HydraConfig.get()
    with_recipe_name(cfg, hc.runtime.choices)
    markers_to_missing(cfg)  # a recipe's ??? not given on the command line: build() names it
    run_dir = Path(hc.runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    from rlhf.pipelines.folder_lock import FolderInUse, hold

    with contextlib.ExitStack() as held:
        try:
            held.enter_context(hold(run_dir))  # one run per folder, before this one writes anything in it
        except FolderInUse as e:
            if hc.mode == RunMode.MULTIRUN:
                from rlhf.launch.sweep import JobFailed

                raise JobFailed(f"job {hc.job.num} [{' '.join(hc.overrides.task)}]: {e}") from None
            fail(str(e), code=2)
        return _job(cfg, hc, run_dir)


def _job(cfg, hc, run_dir: Path) -> float | None:
    """:func:`task` with the run folder held."""
    from hydra.types import RunMode

    if hc.mode != RunMode.MULTIRUN:
        from rlhf.cli.resume import record_command, resume_line

        record_command(run_dir)
        try:
            _run(cfg, run_dir)
        except RunInterrupted as e:
            if not e.announced:
                print(resume_line(e), file=sys.stderr)
            raise SystemExit(130) from None
        except (SpecInvalid, UserError) as e:
            from rlhf.planning.preflight import PreflightFailed
            from rlhf.run_files.checkpoint import CheckpointError
            from rlhf.spec.resume_rules import ResumeRefused

            # 2: nothing was started (a bad config or a static mistake); 1: the run failed
            fail(
                _kept(e, run_dir),
                code=2 if isinstance(e, (SpecInvalid, PreflightFailed, ResumeRefused, CheckpointError)) else 1,
            )
        return None
    from rlhf.launch.sweep import JobFailed, JobRecord, console_copied_to

    sweep_id = str(hc.sweep.dir)
    record = JobRecord(num=int(hc.job.num), overrides=list(hc.overrides.task), sweep=sweep_id)
    record.save(run_dir)
    try:
        with console_copied_to(run_dir / "console.log"):
            key, value, summary = _run(cfg, run_dir, sweep_id=sweep_id)
    except (SpecInvalid, UserError) as e:
        message = _kept(e, run_dir)
        record.finish(run_dir, "failed", error=message)
        raise JobFailed(f"job {record.num} [{' '.join(record.overrides)}]: {message}") from None
    except BaseException as e:
        import traceback

        record.finish(run_dir, "failed", error=f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        raise
    record.finish(run_dir, "completed", objective=value, objective_key=key, trackers=summary.get("trackers") or {})
    return value


def _kept(error: Exception, run_dir: Path) -> str:
    """The error's one line; an error that carries its user code's traceback (a reward function's,
    rlhf.rewards.RewardError) writes it into the run folder first and names the file."""
    keep = getattr(error, "keep_traceback", None)
    return keep(run_dir) if callable(keep) else str(error)


def _preflight(spec) -> None:
    """Files, URLs, data: every static mistake, before any process starts (a PreflightFailed names them all)."""
    from rlhf.launch.cluster import set_ray_env

    set_ray_env(spec.ray)  # before anything imports ray
    from rlhf.planning.preflight import require_preflight

    for warning in require_preflight(spec).warnings:
        print(f"warning: {warning}", file=sys.stderr)


def _refuse_before_hydra(cfg) -> None:
    """Validate and preflight a single run before Hydra makes its run folder: a run refused here leaves no folder
    behind (exit 2, every problem named)."""
    global _PREFLIGHT_DONE
    from rlhf.planning.preflight import PreflightFailed
    from rlhf.spec import build, check

    try:
        spec = build(cfg)
        check(spec)
        _preflight(spec)
    except (SpecInvalid, PreflightFailed) as e:
        fail(str(e), code=2)
    _PREFLIGHT_DONE = True


def _run(cfg, run_dir: Path, *, sweep_id: str = "") -> tuple[str | None, float | None, dict]:
    """Build, validate, plan and run; (objective metric, its value, the pipeline's summary)."""
    from dataclasses import replace

    from omegaconf import OmegaConf

    from rlhf.cli.resume import refuse_a_changed_resume, verified_resume
    from rlhf.launch.cluster import set_ray_env, watch_run_dir
    from rlhf.launch.sweep import ObjectiveMissing, objective_of
    from rlhf.planning.plan import plan
    from rlhf.spec import build, check

    spec = build(cfg)
    check(spec)
    refuse_a_changed_resume(cfg, spec, run_dir)  # a resume that would train something else: nothing started
    spec = verified_resume(spec, run_dir)  # a damaged checkpoint named in seconds; the newest intact one picked
    if sweep_id and not spec.sweep.id:
        spec = replace(spec, sweep=replace(spec.sweep, id=sweep_id))
    set_ray_env(spec.ray)  # before anything imports ray (sets variables only: the local executor imports none)
    if sweep_id or not _PREFLIGHT_DONE:
        _preflight(spec)
    watch_run_dir(run_dir)  # a driver that dies without a word: the reaper ends its trackers' runs FAILED
    p = plan(spec)
    OmegaConf.save(cfg, run_dir / "resolved_config.yaml")
    (run_dir / "plan.json").write_text(p.to_json())
    print(f"rlhf-run: {spec.recipe or '(no recipe)'} [{spec.algorithm.name}] -> {run_dir}")
    print(f"executor: {p.executor} ({p.executor_reason})", file=sys.stderr)
    if not p.fits:
        print(f"warning: the memory plan says this {p.verdict()} (rlhf-plan shows the table)", file=sys.stderr)
    from rlhf.launch.job import run as run_job

    summary = run_job(spec, p, run_dir)
    try:
        key, value = objective_of(summary, spec)
    except ObjectiveMissing:
        if sweep_id:
            raise
        return None, None, summary  # a single run has no sweeper to report to
    if value is None and sweep_id:
        print(
            "warning: this job has no objective for its sweeper: no best-checkpoint metric (eval.steps=0?); "
            "name one with sweep.objective=METRIC",
            file=sys.stderr,
        )
    return key, value, summary


def _refuse_a_held_folder(overrides: list[str]) -> None:
    """A folder pinned by hydra.run.dir (or --resume) that another run holds: refused in the command's first
    second, before composing or importing what a run needs; the job takes the lock itself later (:func:`task`)."""
    from rlhf.pipelines.folder_lock import FolderInUse, check_free

    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and key == "hydra.run.dir" and value and "${" not in value:
            try:
                check_free(value)
            except FolderInUse as e:
                fail(str(e), code=2)


def main() -> None:
    try:
        _main()
    except KeyboardInterrupt:
        print("interrupted before training started; nothing to resume", file=sys.stderr)
        raise SystemExit(130) from None


def _main() -> None:
    from rlhf.cli.resume import continue_interrupted, remember_command, resume_argv

    argv = resume_argv(sys.argv[1:])  # --resume [RUN_DIR|latest]: the command that made RUN_DIR, into RUN_DIR
    flags, overrides = _split_argv(argv)
    a_run = not any(f in _NOT_A_RUN for f in flags) and "-m" not in flags and "--multirun" not in flags
    if a_run:
        argv = continue_interrupted(argv)  # the same command again: its interrupted run, in its own folder
        flags, overrides = _split_argv(argv)
        _refuse_a_held_folder(overrides)
    remember_command(argv)
    from rlhf.cli.common import ConfigSource
    from rlhf.spec.build import PRIMARY_CONFIG, rewrite_recipe_paths
    from rlhf.spec.paths import conf_dir, user_config_dir
    from rlhf.spec.reasoning_gym_source import quote_sources
    from rlhf.spec.store import recipes_named, register

    if _flag_value(flags, "-cp", "--config-path"):
        fail("--config-path replaces rlhf's shipped config folder; add yours with -cd DIR (--config-dir) instead")
    source = ConfigSource(_flag_value(flags, "-cd", "--config-dir"), _flag_value(flags, "-cn", "--config-name"))
    register(recipes=())  # the schema and resolvers; the recipes Hydra's app reads are stored below
    try:
        if source.config_dir:
            user_config_dir(source.config_dir)
        if "--hydra-help" in flags:
            overrides = _hydra_overrides(overrides)
        else:
            overrides = quote_sources(rewrite_recipe_paths(with_default_recipe(overrides, source)))
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    help_or_sweep = any(f in flags for f in ("--help", "-h", "--hydra-help", "--info", "-i", "-m", "--multirun"))
    register(None if help_or_sweep else recipes_named(overrides, source.config_name))  # --help lists them all
    groups: Any = contextlib.nullcontext()
    if "-m" in flags or "--multirun" in flags:
        from rlhf.cli.multirun import prepare

        overrides, groups = prepare(overrides, source)  # the trackers' sweep groups: closed when the sweep ends
    elif not any(f in flags for f in ("--help", "-h", "--hydra-help", "--info", "-i")):
        # Hydra's message for a bad key suggests '+key', which the schema refuses
        cfg = compose_or_fail(overrides, source)
        if a_run:
            _refuse_before_hydra(cfg)
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    import hydra

    sys.argv = [sys.argv[0], *flags, *overrides]
    app = hydra.main(config_path=str(conf_dir()), config_name=PRIMARY_CONFIG, version_base=None)(task)
    with groups:
        app()


if __name__ == "__main__":
    main()

"""rlhf-run [+recipe=NAME|FILE] [group=option] [key=value] [-m sweep]: compose, validate, plan, run.

A Hydra app: --help lists the groups, --cfg job prints the resolved config, --info shows the search path, -m runs
a sweep. Bare ``rlhf-run`` runs +recipe=quickstart_cpu. Every job of a sweep is validated before any starts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rlhf.cli.common import (
    compose_or_fail,
    expand_sweep,
    fail,
    report_invalid_jobs,
    validate_jobs,
    with_default_recipe,
)
from rlhf.errors import UserError

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


def task(cfg) -> None:
    """One job: the composed config in, a trained model and an MLflow run out."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from rlhf.launch.plan import plan
    from rlhf.spec import SpecInvalid, build, check

    spec = build(cfg)
    try:
        check(spec)
    except SpecInvalid as e:
        fail(str(e))
    from rlhf.launch.preflight import require_preflight

    try:
        for warning in require_preflight(spec).warnings:  # files, URLs, data: before any process starts
            print(f"warning: {warning}", file=sys.stderr)
    except UserError as e:
        fail(str(e))
    p = plan(spec)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, run_dir / "resolved_config.yaml")
    (run_dir / "plan.json").write_text(p.to_json())
    print(f"rlhf-run: {spec.recipe or '(no recipe)'} [{spec.algorithm.name}] -> {run_dir}")
    if not p.fits:
        print(f"warning: the memory plan says this {p.verdict()} (rlhf-plan shows the table)", file=sys.stderr)
    from rlhf.launch.job import run as run_job

    try:
        run_job(spec, p, run_dir)
    except UserError as e:
        fail(str(e), code=1)


def main() -> None:
    argv = sys.argv[1:]
    flags, overrides = _split_argv(argv)
    from rlhf.spec.build import rewrite_recipe_paths
    from rlhf.spec.paths import conf_dir
    from rlhf.spec.reasoning_gym_source import quote_sources
    from rlhf.spec.store import register

    register()
    try:
        overrides = quote_sources(rewrite_recipe_paths(with_default_recipe(overrides)))
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    if "-m" in flags or "--multirun" in flags:
        jobs = expand_sweep(overrides)
        bad = validate_jobs(jobs)
        if bad:
            report_invalid_jobs(bad, len(jobs))
    elif not any(f in flags for f in ("--help", "-h", "--hydra-help", "--info", "-i")):
        compose_or_fail(overrides)  # Hydra's own message for a bad key suggests '+key', which the schema refuses
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    import hydra

    sys.argv = [sys.argv[0], *flags, *overrides]
    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base=None)(task)
    app()


if __name__ == "__main__":
    main()

"""``rlhf-run -m``: every job a sweep can name up front is validated before any starts, a plugin sweeper gets
rlhf's defaults, and every tracker groups the sweep's jobs.

The basic sweeper's lists, ranges and globs are expanded with Hydra's public override parser and sweep iterators,
and every job is composed and validated; interval() sweeps, which a sampling sweeper (Optuna) draws trial by trial,
are validated inside each job, where an invalid trial fails alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import DictConfig

from rlhf.cli.common import (
    ConfigSource,
    composable_ends,
    compose_or_fail,
    expand_sweep,
    explain_compose_error,
    fail,
    report_invalid_jobs,
    validate_jobs,
)
from rlhf.spec.schema import LoggingSpec

# Optuna's plugin defaults to 0: the first failed trial (an invalid sampled value) ends the study. Its rate is
# counted per batch of hydra.sweeper.n_jobs trials, so any value below 1 can still end a study on a single failure
# when a batch is one trial; 1.0 means failed trials are recorded and the study goes on.
OPTUNA_MAX_FAILURE_RATE = 1.0
OPTUNA_PLUGIN_MAX_FAILURE_RATE = 0.0
_BASIC_SWEEPER = ".BasicSweeper"


def _given(overrides: Sequence[str]) -> set[str]:
    return {o.partition("=")[0].lstrip("+~") for o in overrides if "=" in o}


def plugin_sweeper_defaults(base: DictConfig, overrides: Sequence[str]) -> list[str]:
    """Overrides that give the Optuna sweeper rlhf's defaults where the user did not choose: failed trials do not
    end the study, and the direction is ``sweep.direction`` (Optuna's own default is to minimise)."""
    sweeper = base.hydra.sweeper
    if "optuna" not in str(sweeper.get("_target_", "")).lower():
        return []
    given = _given(overrides)
    out = []
    if "hydra.sweeper.max_failure_rate" not in given and sweeper.max_failure_rate == OPTUNA_PLUGIN_MAX_FAILURE_RATE:
        out.append(f"hydra.sweeper.max_failure_rate={OPTUNA_MAX_FAILURE_RATE}")
    if "hydra.sweeper.direction" not in given:
        out.append(f"hydra.sweeper.direction={base.sweep.direction}")
    return out


class SweepGroups:
    """The sweep's group in every tracker its jobs log to (MLflow: a parent run; W&B: the group name; TensorBoard:
    sub-folders of one root), opened before the first job starts and closed, with the sweep's status, after the
    last one ended: ``with groups: app()``. The group is ``sweep.id``, else the sweep folder, which is pinned
    (hydra.sweep.dir) so that every job names the same one."""

    def __init__(self, logging: LoggingSpec, group: str) -> None:
        from rlhf.tracking import registry

        self.logging, self.group = logging, group
        self.trackers = [registry.create(name) for name in logging.active_trackers]
        for t in self.trackers:
            t.open_group(logging, group)

    def __enter__(self) -> SweepGroups:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        if kind is None or (isinstance(error, SystemExit) and error.code in (0, None)):
            status = "FINISHED"
        elif isinstance(error, KeyboardInterrupt):
            status = "KILLED"
        else:
            status = "FAILED"  # Hydra exits non-zero when a job failed
        for t in self.trackers:
            t.close_group(self.logging, self.group, status)


def sweep_group(base: DictConfig, overrides: Sequence[str]) -> tuple[LoggingSpec, str, list[str]]:
    """(the sweep's logging section, its group id, the override pinning the sweep folder when the group is it)."""
    from rlhf.spec.build import build

    spec = build(base)
    if spec.sweep.id:
        return spec.logging, spec.sweep.id, []
    folder = str(base.hydra.sweep.dir)  # ${now:...} resolved once, here, for the group and every job alike
    pin = [] if "hydra.sweep.dir" in _given(overrides) else [f"hydra.sweep.dir='{folder}'"]
    return spec.logging, folder, pin


def prepare(overrides: list[str], source: ConfigSource) -> tuple[list[str], SweepGroups]:
    """Validate the sweep (exit with every invalid job listed, nothing started); return the overrides to hand to
    Hydra and the sweep's tracker groups, opened."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from rlhf.spec.build import initialized

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        fail(explain_compose_error(e))
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    base = compose_or_fail(fixed, source, return_hydra_config=True)
    sweeper = base.hydra.sweeper
    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    try:
        with initialized(source.config_dir) as loader:
            sweep = expand_sweep([*params, *overrides], loader)
    except HydraException as e:
        fail(explain_compose_error(e))
    if sweep.sampled and str(sweeper.get("_target_", "")).endswith(_BASIC_SWEEPER):
        keys = ", ".join(o.input_line for o in sweep.sampled)
        fail(
            f"{keys}: interval() is drawn by a sampling sweeper; add hydra/sweeper=optuna (pip install "
            "hydra-optuna-sweeper), or sweep a list (a,b,c) or range(start,stop,step) with the basic sweeper"
        )
    bad = validate_jobs(sweep.jobs, source) + composable_ends(sweep, source)
    if bad:
        report_invalid_jobs(bad, len(sweep.jobs) + 2 * len(sweep.sampled))
    logging, group, pin = sweep_group(base, overrides)
    return [*overrides, *pin, *plugin_sweeper_defaults(base, overrides)], SweepGroups(logging, group)

"""What the entry points share: where composition starts (-cd, -cn), the default recipe, multirun pre-validation
and the way a user error is reported (one message, no traceback, non-zero exit)."""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from rlhf.spec import SpecInvalid, build, check

if TYPE_CHECKING:
    from hydra.core.override_parser.types import Override

DEFAULT_RECIPE = "quickstart_cpu"
EXIT_USER_ERROR = 2


@dataclass(frozen=True)
class ConfigSource:
    """Where composition starts, as Hydra's flags say: the user's config folder (``-cd``) in front of the shipped
    conf/ and recipes, and the primary config (``-cn``, default the shipped ``config``)."""

    config_dir: str | None = None
    config_name: str | None = None


def add_source_arguments(parser: argparse.ArgumentParser, *, keep_earlier: bool = False) -> None:
    """Hydra's -cd/-cn flags, for the argparse entry points (rlhf-plan, rlhf-recipes). ``keep_earlier``: a
    subcommand's copy that leaves a value given before the subcommand alone."""
    default = argparse.SUPPRESS if keep_earlier else None
    parser.add_argument(
        "-cd",
        "--config-dir",
        default=default,
        help="your config folder, searched before the shipped one: group options (model/NAME.yaml, ...), recipes "
        "(recipe/NAME.yaml) and primary configs (for -cn)",
    )
    parser.add_argument(
        "-cn",
        "--config-name",
        default=default,
        help="primary config (in your -cd folder) instead of the shipped one; see README",
    )


def parse_with_overrides(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` with overrides allowed on both sides of a flag (``+recipe=x -cd DIR model=m``), which plain
    argparse refuses for a positional list once a flag came between."""
    args, extra = parser.parse_known_args(list(argv))
    stray = [a for a in extra if a.startswith("-")]
    if stray or (extra and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(stray or extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    return args


def source_of(args: argparse.Namespace) -> ConfigSource:
    return ConfigSource(getattr(args, "config_dir", None), getattr(args, "config_name", None))


def recipe_override(name: str, source: ConfigSource = ConfigSource()) -> str:
    """``+recipe=NAME``, or ``recipe=NAME`` where the user's primary config (-cn) already picks a recipe."""
    if source.config_name:
        from rlhf.spec.build import compose

        chosen = compose([], config_dir=source.config_dir, config_name=source.config_name, return_hydra_config=True)
        if "recipe" in chosen.hydra.runtime.choices:
            return f"recipe={name}"
    return f"+recipe={name}"


def names_recipe(overrides: Sequence[str]) -> bool:
    return any(o.partition("=")[0].lstrip("+~") == "recipe" for o in overrides if "=" in o)


def with_default_recipe(overrides: Sequence[str], source: ConfigSource = ConfigSource()) -> list[str]:
    """A bare command runs the embedded default: GRPO on the tiny model on this CPU. A user's own primary config
    (``-cn``) decides for itself."""
    out = list(overrides)
    if not names_recipe(out) and not source.config_name:
        out.insert(0, f"+recipe={DEFAULT_RECIPE}")
    return out


def fail(message: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


@dataclass
class Sweep:
    """A multirun's command line split the way its sweeper will see it."""

    jobs: list[list[str]]  # every job of the discrete sweeps (lists, ranges, globs): validated before any starts
    sampled: list[Override]  # interval() sweeps a sampling sweeper (Optuna) draws per trial: checked in the job


def expand_sweep(overrides: Sequence[str], loader: Any = None) -> Sweep:
    """The jobs of the discrete sweeps in ``overrides`` (the cartesian product, a later override of a key replacing
    an earlier one, as Hydra's basic sweeper does), through Hydra's public override parser and sweep iterators.
    ``loader`` (a Hydra ConfigLoader) lists group options for glob() sweeps."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    axes: dict[str, list[str]] = {}
    sampled: list[Override] = []
    for o in OverridesParser.create(config_loader=loader).parse_overrides(list(overrides)):
        key = o.get_key_element()
        if not o.is_sweep_override():
            axes[key] = [f"{key}={o.get_value_element_as_str()}"]
        elif o.is_discrete_sweep():
            axes[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        else:
            axes.pop(key, None)
            sampled.append(o)
    return Sweep([list(job) for job in itertools.product(*axes.values())], sampled)


def validate_jobs(jobs: list[list[str]], source: ConfigSource = ConfigSource()) -> list[tuple[list[str], str]]:
    """Compose, build and validate every job; (overrides, problem) for each invalid one."""
    from rlhf.spec.build import compose

    bad = []
    for job in jobs:
        try:
            check(build(compose(job, config_dir=source.config_dir, config_name=source.config_name)))
        except SpecInvalid as e:
            bad.append((job, str(e)))
        except Exception as e:  # noqa: BLE001 - a compose error (unknown key, wrong type) is a user error too
            bad.append((job, explain_compose_error(e)))
    return bad


def composable_ends(sweep: Sweep, source: ConfigSource) -> list[tuple[list[str], str]]:
    """Each sampled key at both ends of its interval, composed (not validated) with the first job: a value of the
    wrong type would fail in the launcher and end the whole study, so it is caught here. Whether a sampled value is
    valid is the job's to say (an invalid trial fails alone)."""
    from rlhf.spec.build import compose

    bad = []
    base = sweep.jobs[0] if sweep.jobs else []
    for o in sweep.sampled:
        interval = o.value()
        key = o.get_key_element()
        for end in (getattr(interval, "start", None), getattr(interval, "end", None)):
            if end is None:
                continue
            job = [*base, f"{key}={end}"]
            try:
                compose(job, config_dir=source.config_dir, config_name=source.config_name)
            except Exception as e:  # noqa: BLE001 - reported per job, like validate_jobs
                bad.append((job, explain_compose_error(e)))
    return bad


def report_invalid_jobs(bad: list[tuple[list[str], str]], total: int) -> NoReturn:
    lines = [f"{len(bad)} of {total} sweep job(s) are invalid; none was started:"]
    for job, problem in bad:
        lines.append(f"  job [{' '.join(job)}]")
        lines.extend(f"    {line}" for line in problem.splitlines())
    fail("\n".join(lines))


def _moved(key: str) -> str:
    from rlhf.spec.rollout_backend_rules import moved_keys

    moved = moved_keys()[key]
    return f"{key}: no such config key; it moved to {moved} (the {moved.split('.')[1]} backend's own keys)"


def _no_such_key(key: str, section_type: Any) -> str:
    """A key no schema section has: the key it moved to, or the closest keys and then the section's valid keys."""
    import dataclasses

    from rlhf.spec.keys import close_matches
    from rlhf.spec.rollout_backend_rules import moved_keys
    from rlhf.spec.schema import ExperimentSpec
    from rlhf.spec.suggest import did_you_mean

    if key in moved_keys():
        return _moved(key)
    valid = [f.name for f in dataclasses.fields(section_type)] if dataclasses.is_dataclass(section_type) else []
    section = key.rsplit(".", 1)[0] if "." in key else "the top level"
    near = did_you_mean(close_matches(ExperimentSpec, key))
    hint = f"; {near}" if near else ""
    hint += f"; valid keys of {section}: {', '.join(valid)}" if valid else ""
    return f"{key}: no such config key{hint}"


def explain_compose_error(e: BaseException) -> str:
    """One message for a composition error: the full key, what is wrong and the fix (valid keys or the type)."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    cause = e.__cause__ if isinstance(e.__cause__, Exception) else e
    key = getattr(cause, "full_key", None)
    obj = getattr(cause, "object_type", None)
    # a key set in a config file fails inside Hydra's composition, which keeps OmegaConf's error as the context only
    context = e.__context__ if isinstance(e.__context__, (ConfigKeyError, ConfigAttributeError)) else None
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key:
        return _no_such_key(key, obj)
    if context is not None and getattr(context, "full_key", None):
        first = str(e).splitlines()[0]  # Hydra's: which config file set it
        return f"{first}\n" + _no_such_key(context.full_key, getattr(context, "object_type", None))
    if isinstance(cause, ValidationError) and key:
        first = str(cause).splitlines()[0]
        return f"{key}: {first}"
    text = str(e).replace("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", "")
    from rlhf.spec.suggest import missing_option_hint

    near = missing_option_hint(text)
    if near:  # the closest options first, on the line after Hydra's own; its full list follows
        first, _, rest = text.partition("\n")
        text = f"{first}\n{near}\n{rest}"
    if "Could not find 'hydra/sweeper/" in text or "Could not find 'hydra/launcher/" in text:
        text += (
            "\n(sweeper and launcher plugins are packages: pip install hydra-optuna-sweeper, hydra-submitit-launcher"
            " or hydra-joblib-launcher, or rlhf[sweeps]; hydra/launcher=ray_cluster ships with rlhf)"
        )
    return text


def compose_or_fail(
    overrides: Sequence[str], source: ConfigSource = ConfigSource(), *, return_hydra_config: bool = False
):
    """Compose with the compose API, turning Hydra's config errors into one message naming the key."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from rlhf.spec.build import compose

    try:
        return compose(
            overrides,
            config_dir=source.config_dir,
            config_name=source.config_name,
            return_hydra_config=return_hydra_config,
        )
    except (HydraException, OmegaConfBaseException, FileNotFoundError, ValueError) as e:
        fail(explain_compose_error(e))


def spec_or_fail(overrides: Sequence[str], source: ConfigSource = ConfigSource()):
    cfg = compose_or_fail(overrides, source)
    try:
        spec = build(cfg)  # a ??? left unfilled is a SpecInvalid too
        check(spec)
    except SpecInvalid as e:
        fail(str(e))
    return spec

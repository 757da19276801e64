"""What the entry points share: the default recipe, recipe files given by path, multirun pre-validation and the
way a user error is reported (one message, no traceback, non-zero exit)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rlhf.spec import SpecInvalid, build, check

DEFAULT_RECIPE = "quickstart_cpu"
EXIT_USER_ERROR = 2


def names_recipe(overrides: Sequence[str]) -> bool:
    return any(o.partition("=")[0].lstrip("+~") == "recipe" for o in overrides if "=" in o)


def with_default_recipe(overrides: Sequence[str]) -> list[str]:
    """A bare command runs the embedded default: GRPO on the tiny model on this CPU."""
    out = list(overrides)
    if not names_recipe(out):
        out.insert(0, f"+recipe={DEFAULT_RECIPE}")
    return out


def fail(message: str, code: int = EXIT_USER_ERROR) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def expand_sweep(overrides: Sequence[str]) -> list[list[str]]:
    """The jobs a Hydra multirun would launch (basic sweeper: the cartesian product of comma lists and ranges)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    batches = BasicSweeper.split_arguments(parsed, None)
    return [list(job) for batch in batches for job in batch]


def validate_jobs(jobs: list[list[str]]) -> list[tuple[list[str], str]]:
    """Compose, build and validate every job; (overrides, problem) for each invalid one."""
    from rlhf.spec.build import compose

    bad = []
    for job in jobs:
        try:
            check(build(compose(job)))
        except SpecInvalid as e:
            bad.append((job, str(e)))
        except Exception as e:  # noqa: BLE001 - a compose error (unknown key, wrong type) is a user error too
            bad.append((job, explain_compose_error(e)))
    return bad


def report_invalid_jobs(bad: list[tuple[list[str], str]], total: int) -> None:
    lines = [f"{len(bad)} of {total} sweep job(s) are invalid; none was started:"]
    for job, problem in bad:
        lines.append(f"  job [{' '.join(job)}]")
        lines.extend(f"    {line}" for line in problem.splitlines())
    fail("\n".join(lines))


def explain_compose_error(e: BaseException) -> str:
    """One message for a composition error: the full key, what is wrong and the fix (valid keys or the type)."""
    import dataclasses

    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    cause = e.__cause__ if isinstance(e.__cause__, Exception) else e
    key = getattr(cause, "full_key", None)
    obj = getattr(cause, "object_type", None)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key:
        valid = [f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
        section = key.rsplit(".", 1)[0] if "." in key else "the top level"
        hint = f"; valid keys of {section}: {', '.join(valid)}" if valid else ""
        return f"{key}: no such config key{hint}"
    if isinstance(cause, ValidationError) and key:
        first = str(cause).splitlines()[0]
        return f"{key}: {first}"
    return str(e).replace("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", "")


def compose_or_fail(overrides: Sequence[str]):
    """Compose with the compose API, turning Hydra's config errors into one message naming the key."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from rlhf.spec.build import compose

    try:
        return compose(overrides)
    except (HydraException, OmegaConfBaseException, FileNotFoundError, ValueError) as e:
        fail(explain_compose_error(e))


def spec_or_fail(overrides: Sequence[str]):
    spec = build(compose_or_fail(overrides))
    try:
        check(spec)
    except SpecInvalid as e:
        fail(str(e))
    return spec

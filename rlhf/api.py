"""The Python entry point, for notebooks: ``rlhf.run(recipe, *overrides, ...)`` composes, validates, preflights and
plans exactly as ``rlhf-run`` does (the same errors, before anything starts), then trains and returns what the run
made::

    import rlhf
    from datasets import Dataset

    data = Dataset.from_list([{"prompt": "1+1=", "answer": "2"}, ...])
    result = rlhf.run(
        "grpo_tiny_cpu", "trainer.max_steps=10",
        reward_funcs=[lambda completions, answer, **kw: [float(c.strip() == a) for c, a in zip(completions, answer)]],
        train_dataset=data,
    )
    result.run_dir, result.model_dir, result.metrics

``reward_funcs``: callables (or references as ``reward.function`` takes them), read in the contract their signature
shows (TRL's keyword call above; rlhf.rewards.contracts), weighted by ``reward.weights`` when given. A callable is
scored in this process, so a run given one uses the local executor or a driver-side reward (rewards are scored in
the driver on both executors). ``train_dataset`` / ``eval_dataset``: a ``datasets.Dataset`` or a list of row
dicts, written as parquet into the run folder (what every worker and a later ``rlhf-run --resume`` read). As in
TRL, the format of the data decides the chat template: rows whose ``prompt`` is a string (TRL's standard format)
are used as they are and reward functions get strings, unless an override sets ``data.apply_chat_template``; a
message-list ``prompt`` (conversational) is rendered with the chat template and functions get message lists. With
``reward_funcs``, a dataset without the recipe's label column (``data.label_key``) is read as TRL reads it: no label,
every column reaching the functions by its name. The run folder is ``run_dir``, else ``outputs/<recipe>/<time>`` as
rlhf-run makes it.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Callables handed to run(): the reward loader imports them by this module's dotted path (rlhf.api._reward_N).
_REWARD_PREFIX = "_reward_"


@dataclass(frozen=True)
class RunResult:
    """What a run made: its folder, the final model's folder, its last metrics and the pipeline's whole summary."""

    run_dir: Path
    model_dir: Path | None
    metrics: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def _reward_refs(funcs: Sequence[Callable[..., Any] | str]) -> list[str]:
    refs = []
    module = sys.modules[__name__]
    for i, fn in enumerate(funcs):
        if isinstance(fn, str):
            refs.append(fn)
            continue
        if not callable(fn):
            raise TypeError(f"reward_funcs[{i}] is {type(fn).__name__}: give a function or a reference such as FILE.py")
        name = f"{_REWARD_PREFIX}{i}"
        setattr(module, name, fn)
        refs.append(f"{__name__}.{name}")
    return refs


def _dataset_file(data: Any, folder: Path, name: str) -> str:
    """``data`` (a datasets.Dataset or a list of row dicts) as a parquet file in ``folder``."""
    import datasets

    if isinstance(data, list):
        data = datasets.Dataset.from_list(data)
    if not isinstance(data, datasets.Dataset):
        raise TypeError(f"{name} is {type(data).__name__}: give a datasets.Dataset or a list of row dicts")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.parquet"
    data.to_parquet(str(path))
    return str(path)


def _chosen(overrides: Sequence[str], key: str) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") == key for o in overrides)


def _first_row(data: Any) -> dict[str, Any]:
    first = data[0] if len(data) else None
    return first if isinstance(first, dict) else {}


def _standard_format(data: Any) -> bool:
    """TRL's standard format: the first row's ``prompt`` is a string (TRL decides by the first example too)."""
    return isinstance(_first_row(data).get("prompt"), str)


def _default_run_dir(recipe: str) -> Path:
    return Path("outputs") / (recipe or "run") / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def run(
    recipe: str = "quickstart_cpu",
    *overrides: str,
    reward_funcs: Sequence[Callable[..., Any] | str] | Callable[..., Any] | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    run_dir: str | Path | None = None,
) -> RunResult:
    """Train ``recipe`` with ``overrides`` (``key=value`` strings, as on the command line); see the module's doc.
    Raises rlhf.spec.SpecInvalid or rlhf.planning.preflight.PreflightFailed (every problem named) before anything
    starts."""
    from rlhf.launch.cluster import set_ray_env
    from rlhf.launch.job import run as run_job
    from rlhf.planning.plan import plan
    from rlhf.planning.preflight import require_preflight
    from rlhf.spec import check
    from rlhf.spec.build import load_spec

    folder = Path(run_dir) if run_dir is not None else _default_run_dir(recipe)
    folder = folder.resolve()
    added = [f"+recipe={recipe}"] if recipe else []
    if reward_funcs is not None:
        funcs = [reward_funcs] if callable(reward_funcs) or isinstance(reward_funcs, str) else list(reward_funcs)
        refs = _reward_refs(funcs)
        added += [f"reward.function=[{','.join(refs)}]", "reward.verifier="]
    if train_dataset is not None:
        added.append(f"data.train_files=[{_dataset_file(train_dataset, folder / 'data', 'train')}]")
        if not _chosen(overrides, "data.apply_chat_template") and _standard_format(train_dataset):
            added.append("data.apply_chat_template=false")
        if eval_dataset is None:
            added.append("data.eval_files=[]")
    if eval_dataset is not None:
        added.append(f"data.eval_files=[{_dataset_file(eval_dataset, folder / 'data', 'eval')}]")
    spec = load_spec([*added, *overrides])
    label = spec.data.label_key
    if reward_funcs is not None and train_dataset is not None and label and not _chosen(overrides, "data.label_key"):
        if label not in _first_row(train_dataset):  # TRL's data: no label; the functions read the columns
            spec = load_spec([*added, "data.label_key=null", *overrides])
    check(spec)
    set_ray_env(spec.ray)
    for warning in require_preflight(spec).warnings:
        print(f"warning: {warning}", file=sys.stderr)
    p = plan(spec)
    print(f"rlhf.run: {spec.recipe or '(no recipe)'} [{spec.algorithm.name}] -> {folder}", file=sys.stderr)
    summary = run_job(spec, p, folder)
    model = summary.get("model_dir")
    return RunResult(folder, Path(model) if model else None, _last_metrics(folder, summary), summary)


def _last_metrics(folder: Path, summary: dict[str, Any]) -> dict[str, float]:
    """The run's last logged training metrics, with its final eval over them (when it evaluated)."""
    from rlhf.tracking.tracker import read_metrics

    rows = [r for r in read_metrics(folder) if any(k.startswith("train/") for k in r)]
    last = {k: v for k, v in (rows[-1] if rows else {}).items() if isinstance(v, (int, float))}
    last.update({k: v for k, v in (summary.get("final_metrics") or {}).items() if isinstance(v, (int, float))})
    return last

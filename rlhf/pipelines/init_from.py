"""``checkpoint.init_from``: a NEW run that starts from another run's weights (fresh optimizer and schedule, step 0,
the new seed's data order, a new tracker run); ``rlhf-run --resume`` instead continues a run.

    spec, params = starting_weights(spec, run_dir)   in each pipeline's prepare, before any process starts

It resolves and checks the source (rlhf.run_files.init_source), makes it loadable where it is not (a step
checkpoint's states consolidated by the training backend that saved them, whatever its rank count:
rlhf.backends.contract.training.TrainBackend.checkpoint_state_dict; LoRA adapters MERGED into their base; the
Hugging Face folder written by rlhf.models.checkpoint_weights) into ``RUN_DIR/init_from/``, records what it read in
``RUN_DIR/init_from/origin.json`` and returns the spec the run's roles load: ``model.path`` names the starting
weights (every role and engine resolves its folder through rlhf.models.loading.resolve_model_path), so the policy,
the rollout engines and the reference (unless reference.model_path is set) start from them; an RL critic loads the
source's critic when the source has one and critic.model_path is empty. A resumed run (``rlhf-run --resume`` of a
run started this way) reuses the record, so its reference is still the starting weights.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlhf.run_files.checkpoint import CheckpointManager
from rlhf.run_files.init_source import (
    KEY,
    ORIGIN,
    ORIGIN_DIR,
    InitFromError,
    Source,
    Weights,
    adapter_base,
    fit_problems,
    has_tokenizer,
    read_json,
    refuse,
    resolve,
    source_model,
)
from rlhf.spec.schema import ExperimentSpec, LoraSpec


def _uses_critic(spec: ExperimentSpec) -> bool:
    from rlhf.spec.derive import derive

    return "critic" in derive(spec).roles


def _source_base(source: Source) -> tuple[str, str]:
    """(the model the source run started from, its tokenizer folder): the config, tokenizer and LoRA base of
    weights that are not a Hugging Face folder yet."""
    if source.run_dir is not None:
        earlier = read_json(source.run_dir / ORIGIN_DIR / ORIGIN)  # the source itself was started with init_from
        if earlier.get("policy"):
            return earlier["policy"], earlier.get("tokenizer") or earlier["policy"]
        m = source_model(source)
        if m is not None:
            from rlhf.models.loading import resolve_model_path

            base = resolve_model_path(m)
            return base, m.tokenizer_path or base
    base = adapter_base(source.policy.path)
    return base, base


def _lora(source: Source) -> LoraSpec | None:
    """The LoRA settings the source run trained with (its checkpoint's states then hold peft's names), else None."""
    m = source_model(source)
    return m.lora if m is not None and m.lora.rank > 0 else None


def _loadable(spec: ExperimentSpec, source: Source, w: Weights, dest: Path) -> Path:
    """A Hugging Face folder with ``w``: ``w`` itself, or written to ``dest`` (via a temporary folder renamed into
    place, so an interrupted start leaves nothing a later attempt would take for complete)."""
    if w.form == "hf":
        return w.path
    from rlhf.models import checkpoint_weights as cw

    base, tokenizer = _source_base(source)
    precision = spec.trainer.precision
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if w.form == "adapter":
        print(f"{KEY}: merging the LoRA adapters of {w.path} into {base}", file=sys.stderr, flush=True)
        cw.merge_adapter(base, w.path, tmp, kind=w.kind, precision=precision)
    else:
        from rlhf.spec.registry import train_backend

        lora = _lora(source)
        merged = " (LoRA adapters merged)" if lora else ""
        print(f"{KEY}: consolidating the {w.backend} checkpoint {w.path}{merged}", file=sys.stderr, flush=True)
        prefix = str((source.run_config().get("reward") or {}).get("value_head_prefix") or "score")
        state = train_backend(w.backend).checkpoint_state_dict(w.path)
        cw.write_hf_model(
            state,
            tmp,
            base=base,
            tokenizer=tokenizer,
            kind=w.kind,
            value_head_prefix=prefix,
            lora=lora,
            precision=precision,
            trust_remote_code=spec.model.trust_remote_code,
            origin=str(w.path),
        )
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    return dest


def _materialize(spec: ExperimentSpec, source: Source, out: Path) -> dict[str, Any]:
    """The source's weights as loadable folders, and the record of what was read (origin.json)."""
    out.mkdir(parents=True, exist_ok=True)
    policy = _loadable(spec, source, source.policy, out / "policy")
    critic = None
    if source.critic is not None and _uses_critic(spec) and not spec.critic.model_path:
        critic = _loadable(spec, source, source.critic, out / "critic")
    if spec.model.tokenizer_path:
        tokenizer = spec.model.tokenizer_path
    elif has_tokenizer(policy):
        tokenizer = str(policy)
    else:
        from rlhf.models.loading import resolve_model_path

        tokenizer = resolve_model_path(spec.model)
    origin = {
        "given": spec.checkpoint.init_from,
        "form": source.form,
        "source": str(source.path),
        "step": source.step,
        "run": str(source.run_dir) if source.run_dir else None,
        "source_mlflow_run_id": source.mlflow_run_id,
        "policy": str(policy),
        "critic": str(critic) if critic else None,
        "tokenizer": str(tokenizer),
        "lora_merged": source.policy.form == "adapter" or (source.policy.form == "checkpoint" and bool(_lora(source))),
    }
    tmp = out / f".{ORIGIN}.tmp"
    tmp.write_text(json.dumps(origin, indent=1))
    os.replace(tmp, out / ORIGIN)
    return origin


def _refuse_other_run(spec: ExperimentSpec, run_dir: Path) -> None:
    """init_from starts a run: a folder already holding another run's checkpoints (which resume=auto would
    continue) is refused."""
    if spec.checkpoint.resume != "auto":
        return
    root = Path(spec.checkpoint.dir).expanduser()
    latest = CheckpointManager(root if root.is_absolute() else run_dir / root).latest()
    if latest is not None:
        raise refuse(
            spec.checkpoint.init_from,
            f"the run folder {run_dir} already holds checkpoints of a run not started from it ({latest}), which "
            "checkpoint.resume=auto would continue",
            f"start the new run in a new folder (hydra.run.dir), continue that one with rlhf-run --resume {run_dir}, "
            "or set checkpoint.resume=never",
        )


def starting_weights(spec: ExperimentSpec, run_dir: Path) -> tuple[ExperimentSpec, dict[str, str] | None]:
    """The spec this run's roles load (``model.path`` naming the starting weights; ``critic.model_path`` the
    source's critic where it is used) and the ``init_from.*`` params for the tracker; ``(spec, None)`` when
    ``checkpoint.init_from`` is unset. Raises InitFromError (nothing started) when the source does not fit."""
    given = spec.checkpoint.init_from
    if not given:
        return spec, None
    out = Path(run_dir) / ORIGIN_DIR
    origin = read_json(out / ORIGIN)
    if origin and origin.get("given") != given:
        raise refuse(
            given,
            f"the run folder {run_dir} was started from {origin.get('given')}",
            f"continue it with rlhf-run --resume {run_dir}, or start the new run in a new folder",
        )
    if not origin:
        _refuse_other_run(spec, Path(run_dir))
    fresh = not origin or not Path(origin.get("policy") or "").is_dir()
    if fresh:
        source = resolve(given)
        problems = fit_problems(spec, source)
        if problems:
            raise InitFromError(problems)
        origin = _materialize(spec, source, out)
    print(_describe(spec, origin, fresh), file=sys.stderr, flush=True)
    return _with_weights(spec, origin), tracker_params(spec, origin)


def _with_weights(spec: ExperimentSpec, origin: dict[str, Any]) -> ExperimentSpec:
    model = replace(spec.model, path=origin["policy"], make_local=False, tokenizer_path=origin["tokenizer"])
    critic = replace(spec.critic, model_path=origin["critic"]) if origin.get("critic") else spec.critic
    return replace(spec, model=model, critic=critic)


def _reference(spec: ExperimentSpec, origin: dict[str, Any]) -> str:
    from rlhf.spec.derive import derive

    if "reference" not in derive(spec).roles:
        return ""
    return spec.reference.model_path or origin["policy"]


def tracker_params(spec: ExperimentSpec, origin: dict[str, Any]) -> dict[str, str]:
    """Where the run came from, as tracker params (``init_from.*``) beside the config's own."""
    return {
        "init_from.source": origin["source"],
        "init_from.form": origin["form"],
        "init_from.step": "" if origin["step"] is None else str(origin["step"]),
        "init_from.run": origin.get("run") or "",
        "init_from.source_mlflow_run_id": origin.get("source_mlflow_run_id") or "",
        "init_from.policy": origin["policy"],
        "init_from.critic": origin.get("critic") or "",
        "init_from.reference": _reference(spec, origin),
        "init_from.lora_merged": str(bool(origin.get("lora_merged"))).lower(),
    }


def _describe(spec: ExperimentSpec, origin: dict[str, Any], fresh: bool) -> str:
    step = f" (step {origin['step']})" if origin["step"] is not None else ""
    # A run folder holding the record already (a resumed run) says where it started; its checkpoint decides the rest.
    head = "a new run from" if fresh else "this run started from"
    parts = [f"{KEY}: {head} {origin['source']}{step}: weights {origin['policy']}"]
    if origin.get("critic"):
        parts.append(f"critic {origin['critic']}")
    ref = _reference(spec, origin)
    if ref:
        parts.append("reference: the same weights" if ref == origin["policy"] else f"reference {ref}")
    if fresh:
        parts.append(f"fresh optimizer, step 0, data order of seed {spec.seed}")
    return "; ".join(parts)


def value_head_trained(folder: str | Path, default_prefix: str = "score") -> bool:
    """Whether the starting weights hold a trained value head (an RM started from an RM keeps it)."""
    from rlhf.models.head_check import has_head, head_prefix, weight_names

    names = weight_names(folder)
    return names is not None and has_head(names, head_prefix(folder, default_prefix))

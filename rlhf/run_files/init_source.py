"""What ``checkpoint.init_from`` names, and whether it fits a run: read from the folder's layout and config files only
(the standard library, PyYAML, the checkpoint layout of rlhf.run_files.checkpoint), so the preflight runs it without
torch. rlhf.pipelines.init_from makes the weights loadable and starts the run from them.

    source = resolve(path)           what the folder holds (InitFromError naming the fix)
    fit_problems(spec, source)       whether it fits this run's model.* and pipeline
    check(spec)                      both, as the preflight's list of problems

Which weights a folder gives:

    run folder        its last complete checkpoint; its final model/ instead when that was written after the last
                      checkpoint (the same weights, already a Hugging Face folder); its final model/ when it has no
                      checkpoint
    checkpoint        a step folder (driver_state.json): its hf/ when it holds a whole model, else the states the
                      training backend saved (an RL checkpoint: policy/ and critic/), found by the backend its run's
                      resolved_config.yaml names (trainer.backend; rlhf.backends.contract.training.TrainBackend:
                      checkpoint_weights); a checkpoint root (.../checkpoints): its latest
    Hugging Face      config.json with weights (used in place), or adapter_config.json (LoRA adapters: merged into
                      their base)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from rlhf.errors import UserError
from rlhf.models.checkpoint_weights import CAUSAL_LM, VALUE
from rlhf.run_files import checkpoint_manifest
from rlhf.run_files.checkpoint import DRIVER_STATE, CheckpointManager
from rlhf.spec.registry import TRAIN_BACKENDS, train_backend
from rlhf.spec.schema import ExperimentSpec, LoraSpec, ModelSpec, TrainerSpec

KEY = "checkpoint.init_from"
RUN_CONFIG = "resolved_config.yaml"  # written into every run folder (the CLI, else rlhf.pipelines.run_files)
TRACKING = "tracking.json"  # rlhf.tracking.tracker.TRACKING_FILE: the run's MLflow run id
ORIGIN_DIR = "init_from"
ORIGIN = "origin.json"
FORMS = "a run folder (outputs/...), a checkpoint folder (.../checkpoints/stepN) or a Hugging Face model folder"
_WEIGHT_FILES = ("*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
# config.json key -> model.* key: what must agree for the weights to load into the model the run describes.
_FIT = (
    ("model_type", "architecture"),
    ("hidden_size", "hidden_size"),
    ("num_hidden_layers", "num_layers"),
    ("num_attention_heads", "num_heads"),
    ("num_key_value_heads", "num_kv_heads"),
    ("intermediate_size", "intermediate_size"),
    ("vocab_size", "vocab_size"),
)


@dataclass(frozen=True)
class Weights:
    """One model's weights inside a source."""

    form: str  # hf (a Hugging Face folder) | adapter (LoRA adapters) | checkpoint (a training backend's states)
    path: Path  # checkpoint: the trained role's folder (policy/, critic/, or the step folder itself)
    kind: str  # causal_lm | value (a reward model or critic: a value head, no language-model head)
    backend: str = ""  # checkpoint: the trainer.backend that wrote it ("": unknown, its run folder is gone)


@dataclass(frozen=True)
class Source:
    """What ``checkpoint.init_from`` resolved to."""

    given: str
    form: str  # run | checkpoint | hf
    path: Path  # the folder the weights are read from (a checkpoint or a Hugging Face folder)
    policy: Weights
    critic: Weights | None = None
    step: int | None = None  # the checkpoint's step (None: a Hugging Face folder of unknown step)
    run_dir: Path | None = None  # the run that wrote it, when known
    mlflow_run_id: str | None = None

    def run_config(self) -> dict[str, Any]:
        return _run_config(self.run_dir) if self.run_dir else {}


@dataclass(frozen=True)
class Problem:
    key: str
    value: Any
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}: {self.problem}; {self.fix}"


class InitFromError(UserError):
    """checkpoint.init_from names something this run cannot start from; the message names each problem and its
    fix."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def refuse(given: str, problem: str, fix: str) -> InitFromError:
    return InitFromError([Problem(KEY, given, problem, fix)])


# -- reading a folder (pure) ------------------------------------------------------------------------------------------
def _run_config(run_dir: Path) -> dict[str, Any]:
    import yaml

    try:
        cfg = yaml.safe_load((run_dir / RUN_CONFIG).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def read_json(path: Path) -> dict[str, Any]:
    try:
        out = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def _mlflow_run_id(doc: dict[str, Any]) -> str | None:
    """The MLflow run id a driver state or tracking.json holds, in either layout: the id itself, or one record per
    tracker (logging.trackers)."""
    trackers = doc.get("trackers") if isinstance(doc.get("trackers"), dict) else {}
    return doc.get("mlflow_run_id") or doc.get("run_id") or (trackers.get("mlflow") or {}).get("run_id")


def run_of(folder: Path) -> Path | None:
    """The run folder above ``folder`` (model/, checkpoints/stepN, checkpoints/stepN/hf), if any."""
    for p in list(folder.parents)[:3]:
        if (p / RUN_CONFIG).is_file():
            return p
    return None


def _has_weights(folder: Path) -> bool:
    return any(next(folder.glob(pattern), None) is not None for pattern in _WEIGHT_FILES)


def hf_weights(folder: Path) -> Weights | None:
    """A Hugging Face folder's weights (a whole model or LoRA adapters), None when ``folder`` is not one."""
    if (folder / "adapter_config.json").is_file():
        task = read_json(folder / "adapter_config.json").get("task_type")
        return Weights("adapter", folder, CAUSAL_LM if task == "CAUSAL_LM" else VALUE)
    if not ((folder / "config.json").is_file() and _has_weights(folder)):
        return None
    config = read_json(folder / "config.json")
    archs = config.get("architectures") or []
    value = config.get("value_head_prefix") or any("ForSequenceClassification" in a for a in archs)
    return Weights("hf", folder, VALUE if value and not any("ForCausalLM" in a for a in archs) else CAUSAL_LM)


_EARLIER = "give an earlier checkpoint of that run, or its final model/"


def backend_of(run_dir: Path | None) -> str:
    """The ``trainer.backend`` that wrote the checkpoints of ``run_dir``, as its resolved config says (a config
    without the key predates it: the default's); "" when there is no run folder to ask."""
    if run_dir is None:
        return ""
    trainer = _run_config(run_dir).get("trainer") or {}
    return str((trainer.get("backend") if isinstance(trainer, dict) else None) or TrainerSpec().backend)


def _saved(folder: Path, kind: str, ck: Path, backend: str) -> Weights:
    """One trained role's weights in checkpoint ``ck``, as the backend that wrote them finds them (not judged when
    nothing says which backend that was: fit_problems refuses such a source, whose model is unknown too)."""
    if backend and backend not in TRAIN_BACKENDS:
        raise refuse(
            str(ck),
            f"its run ({RUN_CONFIG}) was trained with trainer.backend={backend}, which is not registered here, so "
            "nothing here can read its checkpoint",
            f"install the package that registers the {backend} backend, or give the run's final model/ (a Hugging "
            "Face folder)",
        )
    if backend:
        found = train_backend(backend).checkpoint_weights(folder)
        if found.problem:
            raise refuse(str(ck), found.problem, _EARLIER)
    return Weights("checkpoint", folder, kind, backend)


def _checkpoint(given: str, ck: Path, form: str) -> Source:
    state = CheckpointManager.driver_state(ck)
    step = state.get("step", CheckpointManager.step_of(ck))
    run_dir = run_of(ck)
    family = state.get("family") or ((_run_config(run_dir).get("algorithm") or {}).get("family") if run_dir else None)
    damaged = checkpoint_manifest.damage(ck, checksums=False)  # sizes only: a file missing or cut short
    if damaged:
        raise refuse(str(ck), f"the checkpoint {ck} is damaged: " + "; ".join(damaged), _EARLIER)
    backend = backend_of(run_dir)
    critic = None
    if (ck / "policy").is_dir():  # an RL checkpoint: one folder per trained role
        policy = _saved(ck / "policy", CAUSAL_LM, ck, backend)
        critic = _saved(ck / "critic", VALUE, ck, backend) if (ck / "critic").is_dir() else None
    else:
        whole = hf_weights(ck / "hf") if (ck / "hf").is_dir() else None  # checkpoint.save_hf_every_checkpoint
        kind = VALUE if family == "rm" else CAUSAL_LM
        policy = whole if whole is not None and whole.form == "hf" else _saved(ck, kind, ck, backend)
    mlflow = _mlflow_run_id(state) or (_mlflow_run_id(read_json(run_dir / TRACKING)) if run_dir else None)
    return Source(given, form, ck, policy, critic, int(step) if step is not None else None, run_dir, mlflow)


def _run(given: str, run_dir: Path) -> Source:
    ck_cfg = _run_config(run_dir).get("checkpoint") or {}
    root = Path(str(ck_cfg.get("dir") or "checkpoints")).expanduser()
    latest = CheckpointManager(root if root.is_absolute() else run_dir / root).latest()
    final = run_dir / str(ck_cfg.get("output_dir") or "model")
    final_w = hf_weights(final) if final.is_dir() else None
    mlflow = _mlflow_run_id(read_json(run_dir / TRACKING))
    if latest is not None:
        critic_dir = final.with_name(final.name + "_critic")  # RL's critic.save_value_network
        critic = hf_weights(critic_dir) if critic_dir.is_dir() else None
        same = final_w is not None and _written_after(final, latest)  # the final model of the last checkpoint's step
        if same and (critic is not None or not (latest / "critic").is_dir()):
            step = CheckpointManager.driver_state(latest).get("step", CheckpointManager.step_of(latest))
            return Source(given, "run", final, final_w, critic, int(step), run_dir, mlflow)
        return replace(_checkpoint(given, latest, "run"), mlflow_run_id=mlflow)
    if final_w is not None:
        return Source(given, "run", final, final_w, None, None, run_dir, mlflow)
    raise refuse(
        given,
        f"the run folder has no complete checkpoint and no final {final.name}/ (it stopped before its first "
        "checkpoint)",
        f"continue it with rlhf-run --resume {run_dir}, or start from model.*",
    )


def _written_after(final: Path, ck: Path) -> bool:
    """Whether the final model (a whole model or LoRA adapters) was saved after checkpoint ``ck`` was sealed."""
    config = final / "adapter_config.json" if (final / "adapter_config.json").is_file() else final / "config.json"
    try:
        return config.stat().st_mtime >= (ck / DRIVER_STATE).stat().st_mtime
    except OSError:
        return False


def resolve(given: str) -> Source:
    """What ``checkpoint.init_from=given`` starts from (see the module docstring); InitFromError when it is none of
    the three forms."""
    p = Path(given).expanduser()
    if not p.is_dir():
        raise refuse(given, "no such folder", f"give {FORMS}")
    p = p.resolve()
    if (p / DRIVER_STATE).is_file():
        return _checkpoint(given, p, "checkpoint")
    w = hf_weights(p)
    if w is not None:
        run_dir = run_of(p)
        mlflow = _mlflow_run_id(read_json(run_dir / TRACKING)) if run_dir else None
        return Source(given, "hf", p, w, None, None, run_dir, mlflow)
    if (p / RUN_CONFIG).is_file():
        return _run(given, p)
    latest = CheckpointManager(p).latest()
    if latest is not None:
        return _checkpoint(given, latest, "checkpoint")
    raise refuse(
        given,
        f"the folder holds none of the three forms: no {RUN_CONFIG} (a run folder), no {DRIVER_STATE} (a "
        "checkpoint), no config.json with weights or adapter_config.json (a Hugging Face folder), no complete "
        "checkpoint under it",
        f"give {FORMS}",
    )


# -- does it fit this run (pure) --------------------------------------------------------------------------------------
def _model_spec(section: dict[str, Any]) -> ModelSpec:
    """A ModelSpec from a run's resolved model section (keys this version does not know are ignored)."""
    known = {f.name for f in fields(ModelSpec)} - {"lora"}
    lora = section.get("lora") or {}
    lora_known = {f.name for f in fields(LoraSpec)}
    return ModelSpec(
        **{k: v for k, v in section.items() if k in known},
        lora=LoraSpec(**{k: v for k, v in lora.items() if k in lora_known}),
    )


def _config_dims(folder: Path) -> dict[str, Any]:
    c = read_json(folder / "config.json")
    dims = {k: c.get(k) for k, _ in _FIT}
    if dims["num_key_value_heads"] is None:
        dims["num_key_value_heads"] = c.get("num_attention_heads")
    return dims


def model_dims(m: ModelSpec) -> dict[str, Any]:
    """The sizes a run's model.* describes: the local folder's config.json when model.path is one, else the
    option's own fields (make_local, or a hub name whose conf/model option carries them)."""
    local = Path(m.path).expanduser()
    if not m.make_local and m.path and (local / "config.json").is_file():
        return _config_dims(local)
    return {cfg: getattr(m, key) for cfg, key in _FIT}


def source_model(source: Source) -> ModelSpec | None:
    section = source.run_config().get("model")
    return _model_spec(section) if isinstance(section, dict) else None


def adapter_base(folder: Path) -> str:
    return str(read_json(folder / "adapter_config.json").get("base_model_name_or_path") or "")


def source_dims(source: Source) -> dict[str, Any] | None:
    """The sizes of the source's model, None when nothing says (a checkpoint whose run folder is gone)."""
    w = source.policy
    if w.form == "hf":
        return _config_dims(w.path)
    base = adapter_base(w.path) if w.form == "adapter" else ""
    if base and (Path(base) / "config.json").is_file():
        return _config_dims(Path(base))
    m = source_model(source)
    return model_dims(m) if m is not None else None


def _tokenizer_folder(m: ModelSpec) -> Path | None:
    if m.tokenizer_path:
        return Path(m.tokenizer_path).expanduser()
    if m.make_local:
        from rlhf.models.tiny import tiny_model_dir  # pure: the cache folder's name

        return tiny_model_dir(m)
    return Path(m.path).expanduser() if m.path else None


def has_tokenizer(folder: Path) -> bool:
    return any((folder / f).is_file() for f in _TOKENIZER_FILES)


def _source_tokenizer(source: Source) -> Path | None:
    if has_tokenizer(source.policy.path):
        return source.policy.path
    m = source_model(source)
    return _tokenizer_folder(m) if m is not None else None


def fit_problems(spec: ExperimentSpec, source: Source) -> list[Problem]:
    """Why ``source`` cannot start this run (empty: it can): the model kind the pipeline trains, model.*'s
    architecture and sizes, the tokenizer's vocabulary, and a base to merge LoRA adapters into."""
    from rlhf.spec.tokenizer_files import tokenizer_difference

    out: list[Problem] = []
    family, name, m = spec.algorithm.family, spec.algorithm.name, spec.model
    given = spec.checkpoint.init_from
    if source.policy.kind == VALUE and family != "rm":
        out.append(
            Problem(
                KEY,
                given,
                f"{source.path} holds a reward model or critic (a value head, no language-model head) and "
                f"algorithm={name} trains a causal LM",
                "start from an SFT, DPO or RL run (or a causal LM folder); give a reward model as reward.model_path "
                "(a PPO critic starts from it)",
            )
        )
    dims = source_dims(source)
    if dims is None:
        out.append(
            Problem(
                KEY,
                given,
                f"{source.path} is a checkpoint without its run folder ({RUN_CONFIG} two levels up), so nothing "
                "says which model its weights belong to nor which trainer.backend saved them",
                "give the run folder, or a checkpoint saved with checkpoint.save_hf_every_checkpoint=true",
            )
        )
    else:
        target = model_dims(m)
        wrong = [
            f"{cfg}={dims[cfg]} (model.{key}={target[cfg]})"
            for cfg, key in _FIT
            if dims.get(cfg) is not None and target.get(cfg) is not None and dims[cfg] != target[cfg]
        ]
        if wrong:
            out.append(
                Problem(
                    KEY,
                    given,
                    f"its model does not fit model={m.name}: {', '.join(wrong)}",
                    "choose the model option the source was trained with (model=...), or a source trained from "
                    "this model",
                )
            )
    mine, theirs = _tokenizer_folder(m), _source_tokenizer(source)
    if mine is not None and theirs is not None and mine.is_dir() and theirs.is_dir():
        diff = tokenizer_difference(theirs, mine)
        if diff is not None:
            out.append(
                Problem(
                    KEY,
                    given,
                    f"its tokenizer ({theirs}) is not this run's ({mine}): {diff}",
                    "start from a run of the same model family, or set model.tokenizer_path to the source's",
                )
            )
    if source.policy.form == "adapter" and source.run_dir is None and not Path(adapter_base(source.path)).is_dir():
        out.append(
            Problem(
                KEY,
                given,
                f"LoRA adapters whose base model ({adapter_base(source.path) or 'unnamed'}) is not a folder here",
                "give the adapters' run folder, or merge them first: python -m rlhf.models.merge_lora",
            )
        )
    return out


def check(spec: ExperimentSpec) -> list[Problem]:
    """Every problem with ``checkpoint.init_from`` (the preflight's check); empty when unset or fine."""
    if not spec.checkpoint.init_from:
        return []
    try:
        source = resolve(spec.checkpoint.init_from)
    except InitFromError as e:
        return e.problems
    return fit_problems(spec, source)

"""The layout of a rollout recording (``rollout.record`` / ``rollout.replay``) and whether a spec may use one.

    DIR/recording.json          the manifest: what produced the samples (sizes, tokenizer digest, seed, ...)
    DIR/step-00000001.parquet   one file per RL step (columns: rlhf.data.rollout_records), renamed into place whole

Validation reads the manifest and the step file names only (nothing is loaded, no pyarrow); the tokenizer digest and
the number of steps a run needs are compared once the tokenizer and the data are loaded, still before any process
starts. Pure: the standard library only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rlhf.spec.schema import ExperimentSpec

MANIFEST = "recording.json"
FORMAT = "rlhf-rollouts/1"
_STEP_FILE = re.compile(r"^step-(\d{8})\.parquet$")

# What a replay must share with the recording (manifest field, config key): the batch shape the losses group by,
# and the vocabulary the token ids index. Continuing a recording (rollout.record into a folder that has one) must
# also share the seed, so that the steps come from one run.
REPLAY_KEYS = (
    ("samples_per_prompt", "rollout.samples_per_prompt"),
    ("prompts_per_step", "rollout.prompts_per_step"),
    ("vocab_size", "model.vocab_size"),
)
RECORD_KEYS = (*REPLAY_KEYS, ("seed", "seed"))


def step_file(step: int) -> str:
    return f"step-{step:08d}.parquet"


def recorded_steps(folder: str | Path) -> list[int]:
    """The steps that have a complete file in ``folder``, ascending (half-written files are never named so)."""
    p = Path(folder).expanduser()
    if not p.is_dir():
        return []
    return sorted(int(m.group(1)) for f in p.iterdir() if (m := _STEP_FILE.match(f.name)))


def read_manifest(folder: str | Path) -> tuple[dict[str, Any] | None, str | None]:
    """(manifest, None), or (None, what is wrong) when ``folder`` holds no readable recording."""
    p = Path(folder).expanduser()
    if not p.is_dir():
        return None, f"no such folder; record one with rollout.record={folder}"
    f = p / MANIFEST
    if not f.is_file():
        return None, f"no recording here ({MANIFEST} is missing); record one with rollout.record={folder}"
    try:
        manifest = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        return None, f"{f} is not a readable manifest ({e})"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        return None, f"{f}: format {got!r}, not {FORMAT!r}"
    return manifest, None


def spec_fields(spec: ExperimentSpec) -> dict[str, Any]:
    """The manifest fields a spec determines (the rest, tokenizer and model folder, come from what was loaded)."""
    ro = spec.rollout
    return {
        "samples_per_prompt": ro.samples_per_prompt,
        "prompts_per_step": ro.prompts_per_step,
        "vocab_size": spec.model.vocab_size,
        "seed": spec.seed,
        "max_new_tokens": ro.max_new_tokens,
        "temperature": ro.temperature,
        "algorithm": spec.algorithm.name,
        "model": spec.model.name,
        "recipe": spec.recipe,
    }


def mismatches(
    spec: ExperimentSpec, manifest: dict[str, Any], folder: str, keys: tuple[tuple[str, str], ...]
) -> list[tuple[str, Any, str]]:
    """(config key, this spec's value, fix) for every field of ``keys`` where ``spec`` and the recording differ."""
    mine = spec_fields(spec)
    out = []
    for field, key in keys:
        theirs = manifest.get(field)
        if theirs != mine[field]:
            out.append((key, mine[field], f"the recording in {folder} has {field}={theirs!r}; set {key}={theirs}"))
    return out


def tokenizer_mismatch(manifest: dict[str, Any], digest: str, folder: str, key: str, path: str) -> str | None:
    """What to tell the user when the loaded tokenizer (its vocabulary digest) is not the recording's; None if it is."""
    theirs = manifest.get("tokenizer_sha256")
    if theirs == digest:
        return None
    return (
        f"{key}={path}: the recording in {folder} was tokenized by another tokenizer ({manifest.get('tokenizer_path')}"
        f", {manifest.get('tokenizer_len')} tokens, vocabulary sha256 {str(theirs)[:12]}; this one: {digest[:12]}); "
        "its token ids mean other tokens here: use the recording's model or record again"
    )

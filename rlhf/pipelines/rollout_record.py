"""An RL step's scored samples to and from a recording (rollout.record / rollout.replay).

What a replay needs to train the step exactly as it was trained: every rollout (token ids, action mask, the
engine's log-probs, finish reason) in batch order, its prompt row (datasource: eval metrics and the experience
info; prompt and label: what the reward saw), the rewards and scores as the losses read them, the reward
sources' per-sample extra logs, and dynamic filtering's pass rate and refill rounds. The training side (old,
reference and teacher log-probs, values, advantages, the shuffle of each epoch) is recomputed from those by the
same code and seeds, so a replay with the trainer settings of the recorded run reproduces its losses bit for bit.
The format is rlhf.data.rollout_records; its checks rlhf.spec.recording.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rlhf.backends.contract.rollout import Rollout
from rlhf.data.rollout_records import (
    LOG_PREFIX,
    drop_steps_after,
    read_step,
    tokenizer_digest,
    write_manifest,
    write_step,
)
from rlhf.errors import UserError
from rlhf.pipelines.rl_generation import Scored
from rlhf.spec.recording import read_manifest, recorded_steps, spec_fields, tokenizer_mismatch
from rlhf.spec.schema import ExperimentSpec


def _tokenizer_key(spec: ExperimentSpec) -> tuple[str, str]:
    m = spec.model
    return ("model.tokenizer_path", m.tokenizer_path) if m.tokenizer_path else ("model.path", m.path or m.name)


def _check_tokenizer(spec: ExperimentSpec, manifest: dict[str, Any], folder: str, tokenizer: Any, key: str) -> None:
    problem = tokenizer_mismatch(manifest, tokenizer_digest(tokenizer)[0], folder, *_tokenizer_key(spec))
    if problem:
        raise UserError(f"{key}={folder}: {problem}")


def step_columns(step: int, seed: int, scored: Scored, n: int, decode: Any) -> tuple[dict[str, list], dict]:
    """``scored`` (one step's samples, in batch order) as the record's columns and step metadata."""
    rs = scored.rollouts
    cols: dict[str, list] = {
        "step": [step] * len(rs),
        "index": list(range(len(rs))),
        "group": [i // n for i in range(len(rs))],
        "sample": [i % n for i in range(len(rs))],
        "seed": [seed] * len(rs),
        "prompt": [str(row.get("prompt", "")) for row in scored.rows],
        "label": [str(row.get("label", "")) for row in scored.rows],
        "datasource": [str(row.get("datasource", "default")) for row in scored.rows],
        "prompt_ids": [list(r.prompt_ids) for r in rs],
        "output_ids": [list(r.output_ids) for r in rs],
        "action_mask": [list(r.action_mask) for r in rs],
        "logprobs": [[float(x) for x in r.logprobs] for r in rs],
        "finish_reason": [r.finish_reason for r in rs],
        "response": [decode(r.output_ids, skip_special_tokens=False) for r in rs],
        "response_length": [int(sum(r.action_mask)) for r in rs],
        "reward": [float(x) for x in scored.rewards],
        "score": [float(x) for x in scored.scores],
        "rollout_reward": [None if r.reward is None else float(r.reward) for r in rs],
        "rollout_score": [None if r.scores is None else float(r.scores) for r in rs],
        "extra": [json.dumps(r.extra, default=repr) for r in rs],
    }
    for k, v in scored.extra_logs.items():
        cols[LOG_PREFIX + k] = [float(x) for x in v]
    meta = {
        "seed": seed,
        "samples_per_prompt": n,
        "samples": len(rs),
        "pass_rate": scored.pass_rate,
        "refill_rounds": scored.refill_rounds,
    }
    return cols, meta


def scored_from(cols: dict[str, list], meta: dict[str, Any]) -> Scored:
    """The inverse of :func:`step_columns`: the step's Scored exactly as the recorded run trained on it."""
    rollouts = [
        Rollout(
            prompt_ids=list(cols["prompt_ids"][i]),
            output_ids=list(cols["output_ids"][i]),
            action_mask=list(cols["action_mask"][i]),
            logprobs=list(cols["logprobs"][i]),
            finish_reason=cols["finish_reason"][i],
            reward=cols["rollout_reward"][i],
            scores=cols["rollout_score"][i],
            extra=json.loads(cols["extra"][i]),
        )
        for i in range(len(cols["index"]))
    ]
    rows = [
        {"prompt": p, "label": lab, "datasource": ds, "prompt_ids": r.prompt_ids}
        for p, lab, ds, r in zip(cols["prompt"], cols["label"], cols["datasource"], rollouts, strict=True)
    ]
    logs = {k[len(LOG_PREFIX) :]: list(v) for k, v in cols.items() if k.startswith(LOG_PREFIX)}
    return Scored(
        rollouts,
        rows,
        list(cols["reward"]),
        list(cols["score"]),
        logs,
        pass_rate=meta.get("pass_rate"),
        refill_rounds=int(meta.get("refill_rounds") or 0),
    )


class Recorder:
    """rollout.record: each step's scored samples written as the step makes them (a killed run keeps every step it
    generated). A step written again (a resumed run redoing the steps after its checkpoint) replaces its file, and
    the steps after it are removed, so the recording is always steps 1..k of one run, never a step twice."""

    def __init__(self, spec: ExperimentSpec, tokenizer: Any, model_path: str, mode: str) -> None:
        self.folder = spec.rollout.record
        self.n = spec.rollout.samples_per_prompt
        self.decode = tokenizer.decode
        manifest, _ = read_manifest(self.folder)
        if manifest is not None:  # continuing: validation compared the spec's fields; the tokenizer is known now
            _check_tokenizer(spec, manifest, self.folder, tokenizer, "rollout.record")
            have = recorded_steps(self.folder)
            if have:
                print(
                    f"rollout.record: {self.folder} holds steps {have[0]}..{have[-1]}; each step this run makes "
                    "replaces its file and drops the later ones",
                    file=sys.stderr,
                )
        digest, size = tokenizer_digest(tokenizer)
        fields = {
            "mode": mode,
            **spec_fields(spec),
            "model_path": str(model_path),
            "tokenizer_path": spec.model.tokenizer_path or str(model_path),
            "tokenizer_sha256": digest,
            "tokenizer_len": size,
        }
        write_manifest(self.folder, fields)

    def write(self, step: int, scored: Scored, seed: int) -> Path:
        cols, meta = step_columns(step, seed, scored, self.n, self.decode)
        path = write_step(self.folder, step, cols, meta)
        drop_steps_after(self.folder, step)
        return path


class RecordedRollouts:
    """rollout.replay: the generation source of a train-only run; step k's samples are the recording's step k.
    Refused before any process starts when the recording's tokenizer is not the run's or it lacks a step the run
    trains (the batch shape and vocabulary were compared at validation)."""

    def __init__(self, spec: ExperimentSpec, tokenizer: Any, steps: int) -> None:
        self.folder = spec.rollout.replay
        manifest, problem = read_manifest(self.folder)
        if problem:
            raise UserError(f"rollout.replay={self.folder}: {problem}")
        _check_tokenizer(spec, manifest, self.folder, tokenizer, "rollout.replay")
        have = set(recorded_steps(self.folder))
        missing = [s for s in range(1, steps + 1) if s not in have]
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            span = f"steps {min(have)}..{max(have)}" if have else "no steps"
            fix = f"set trainer.max_steps={missing[0] - 1}" if missing[0] > 1 else "record step 1 first"
            raise UserError(
                f"rollout.replay={self.folder}: this run trains {steps} RL step(s) but the recording has {span} "
                f"(missing step {shown}): {fix} or record more steps"
            )
        self.manifest = manifest
        print(f"rollout.replay: training on {self.folder} ({len(have)} recorded steps)", file=sys.stderr)

    def scored(self, step: int) -> Scored:
        cols, meta = read_step(self.folder, step)
        return scored_from(cols, meta)

"""Record and replay (rollout.record / rollout.replay) and rollout-only runs (rollout.only).

A GRPO run on the tiny model records its two steps; a train-only replay of that recording, with no rollout engine
started, logs the same per-step losses and gradient norms bit for bit; a resumed run continues the recording; a
rollout-only run starts no training role (the roles the run built are listed); a recording that does not fit the
spec is refused before anything starts, naming the key; ``rlhf-recipes rollouts show`` summarises one.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from ceilings import ceiling

from rlhf.errors import UserError
from rlhf.pipelines.rl_generation import Scored
from rlhf.spec import validate
from rlhf.spec.build import load_spec
from rlhf.spec.recording import MANIFEST, recorded_steps

QUIET = ["logging.mlflow=false", "logging.progress=false", "eval.steps=0"]
SMALL = ["rollout.prompts_per_step=8", "trainer.global_batch=32", "trainer.micro_batch_per_device=16"]
# A reward with spread from the first step (the untrained tiny model scores ~0 on arithmetic) and a learning rate that
# moves the policy, so every step has a gradient and the policy leaves the reference: the losses compared are real.
PARITY = "def reward_func(queries, prompts, labels, **kw):\n    return [float(len(q) % 2) for q in queries]\n"
# What a replay must reproduce exactly: everything the step computed from its samples and the trainer's state (the
# time it took, the weight sync and its probe are not computed from them, and a replay has no engines to sync).
# Wall-clock figures (timings, train/tokens_per_s) and what only a run with engines has.
NOT_COMPARED = ("train/timing/", "train/tokens_per_s", "rollout/sync", "train/rollout/sync", "train/restarts")
NOT_COMPARED += ("train/probe", "rollout/probe")


def _spec(*overrides: str):
    return load_spec(["+recipe=grpo_tiny_cpu", "trainer.max_steps=2", *QUIET, *SMALL, *overrides])


def _run(run_dir: Path, *overrides: str) -> tuple[dict, list[dict], set[str]]:
    """Run the job (one process: the local executor); (summary, the logged steps, class names of the roles it
    started: each local actor the executor built, seen by a spy on its constructor)."""
    import rlhf.launch.local as local
    from rlhf.launch.job import run
    from rlhf.planning.plan import plan
    from rlhf.spec import check
    from rlhf.tracking.tracker import read_metrics

    spec = _spec(*overrides)
    check(spec)
    p = plan(spec)
    assert p.executor == "local"
    started: set[str] = set()
    build = local.LocalActor.__init__

    def spy(self, lane, cls, args, kwargs, name, **options):
        started.add(cls.__name__)
        build(self, lane, cls, args, kwargs, name, **options)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local.LocalActor, "__init__", spy)
        result = run(spec, p, run_dir)
    return result, [r for r in read_metrics(run_dir) if r.get("step", 0) > 0], started


def _compared(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith("train/") and not k.startswith(NOT_COMPARED)}


@dataclass
class Recorded:
    run_dir: Path
    rec: Path  # the recording
    steps: list[dict]  # its logged steps
    actors: set[str]  # class names of the roles it started
    reward: tuple[str, ...]  # the reward overrides every run of this module uses


@pytest.fixture(scope="module")
def reward(tmp_path_factory) -> tuple[str, ...]:
    f = tmp_path_factory.mktemp("reward") / "parity.py"
    f.write_text(PARITY)
    return ("reward.verifier=", f"reward.function={f}", "trainer.lr=1e-2")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, reward) -> Recorded:
    """A 2-step GRPO run recording its rollouts."""
    root = tmp_path_factory.mktemp("recorded")
    rec = root / "rollouts"
    _, steps, actors = _run(root / "run", *reward, f"rollout.record={rec}")
    return Recorded(root / "run", rec, steps, actors, reward)


# -- end to end -----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_replay_reproduces_the_recorded_losses_and_grad_norms_bit_for_bit(recorded, tmp_path):
    rec, steps = recorded.rec, recorded.steps
    assert "HFRolloutWorker" in recorded.actors and recorded_steps(rec) == [1, 2]
    assert all(s["train/actor_grad_norm"] > 0 for s in steps) and steps[1]["train/kl"] > 0  # the policy moved
    result, replayed, actors = _run(tmp_path / "replay", *recorded.reward, f"rollout.replay={rec}")
    assert "HFRolloutWorker" not in actors and "EngineWorker" in actors  # train-only: the trainer, no engine
    assert [s["step"] for s in replayed] == [1, 2]
    for a, b in zip(steps, replayed, strict=True):
        want, got = _compared(a), _compared(b)
        for k in ("train/policy_loss", "train/actor_grad_norm", "train/kl", "train/reward"):
            assert k in want and math.isfinite(want[k]), k
        assert got == want  # every loss, norm, KL, reward and advantage statistic equal as floats, not approximately
    assert (Path(result["model_dir"]) / "config.json").is_file()


@pytest.mark.slow
def test_a_resumed_run_continues_the_recording_without_repeating_a_step(recorded, tmp_path):
    shutil.copytree(recorded.run_dir, tmp_path / "run")
    shutil.copytree(recorded.rec, tmp_path / "rollouts")
    first = (tmp_path / "rollouts" / "step-00000001.parquet").read_bytes()
    more = [*recorded.reward, f"rollout.record={tmp_path / 'rollouts'}", "trainer.max_steps=3"]
    _, steps, _ = _run(tmp_path / "run", *more)
    assert [s["step"] for s in steps] == [1, 2, 3]  # steps 1-2 from the checkpoint's log, 3 made now
    assert recorded_steps(tmp_path / "rollouts") == [1, 2, 3]
    assert (tmp_path / "rollouts" / "step-00000001.parquet").read_bytes() == first  # kept, not made again
    from datasets import load_dataset

    rows = load_dataset("parquet", data_files=str(tmp_path / "rollouts" / "step-*.parquet"), split="train")
    assert sorted(set(rows["step"])) == [1, 2, 3] and len(rows) == 3 * 64  # each step's 8 x 8 samples, once


@pytest.mark.slow
def test_rollout_only_starts_no_training_role(tmp_path):
    rec = tmp_path / "made"
    only = ["rollout.only=true", f"rollout.record={rec}", "trainer.max_steps=1"]
    result, steps, actors = _run(tmp_path / "run", *only)
    assert actors == {"HFRolloutWorker"}  # no EngineWorker: no policy trainer, reference, critic or reward model
    assert [s["step"] for s in steps] == [1] and 0.0 <= steps[0]["rollout/reward_mean"] <= 1.0
    assert not any(k.startswith("train/") and k != "train/restarts" for k in steps[0])
    assert "model_dir" not in result and result["recording"] == str(rec)
    manifest = json.loads((rec / MANIFEST).read_text())
    assert manifest["mode"] == "rollout_only" and recorded_steps(rec) == [1]


# -- refused before anything starts -------------------------------------------------------------------------------
@pytest.fixture
def small_recording(tmp_path) -> Path:
    """Two steps of made-up samples recorded by the recorder of a grpo_tiny_cpu spec (its manifest and tokenizer
    digest are the real ones); no Ray, no model."""
    from rlhf.backends.contract.rollout import Rollout
    from rlhf.models.loading import resolve_model_path, tokenizer_for
    from rlhf.pipelines.rollout_record import Recorder

    rec = tmp_path / "small"
    spec = _spec(f"rollout.record={rec}")
    path = resolve_model_path(spec.model)
    recorder = Recorder(spec, tokenizer_for(spec.model, path), path, "rl")
    n = 64
    for step in (1, 2):
        rollouts = [Rollout([1, 2], [3], [1], [-0.5], "stop") for _ in range(n)]
        rows = [{"prompt": "1+1=", "label": "2", "datasource": "add"}] * n
        recorder.write(step, Scored(rollouts, rows, [float(i % 2) for i in range(n)], [0.0] * n, {}), 7)
    return rec


def test_replay_of_a_recording_with_other_samples_per_prompt_is_refused_naming_the_key(small_recording):
    replay = f"rollout.replay={small_recording}"
    errors = {e.key: str(e) for e in validate(_spec(replay, "rollout.samples_per_prompt=4"))}
    assert "rollout.samples_per_prompt" in errors and "samples_per_prompt=8" in errors["rollout.samples_per_prompt"]
    assert "model.vocab_size" in {e.key for e in validate(_spec(replay, "model.vocab_size=1024"))}
    assert not validate(_spec(replay))


def test_replay_asking_more_steps_than_recorded_is_refused_before_ray_starts(small_recording, tmp_path):
    from rlhf.pipelines.rl import RLRecipe

    spec = _spec(f"rollout.replay={small_recording}", "trainer.max_steps=3")
    with pytest.raises(UserError, match=r"missing step 3\): set trainer.max_steps=2"):
        RLRecipe(spec, tmp_path).prepare()


def test_replay_with_another_tokenizer_is_refused_naming_the_model_key(small_recording, tmp_path):
    from rlhf.pipelines.rl import RLRecipe

    manifest = json.loads((small_recording / MANIFEST).read_text())
    manifest["tokenizer_sha256"] = "0" * 64  # as a recording made with another tokenizer of the same size says
    (small_recording / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"rollout.replay=.*model.path=.*another tokenizer"):
        RLRecipe(_spec(f"rollout.replay={small_recording}"), tmp_path).prepare()


def test_continuing_a_recording_of_another_seed_is_refused_naming_the_key(small_recording):
    errors = {e.key: str(e) for e in validate(_spec(f"rollout.record={small_recording}", "seed=7"))}
    assert "seed" in errors and "to continue it" in errors["seed"]


def test_rlhf_run_refuses_a_mismatched_recording_and_starts_nothing(small_recording, tmp_path):
    import subprocess
    import sys

    args = ["+recipe=grpo_tiny_cpu", f"rollout.replay={small_recording}", "rollout.prompts_per_step=4", *QUIET]
    rlhf_run = str(Path(sys.executable).parent / "rlhf-run")
    r = subprocess.run([rlhf_run, *args], capture_output=True, text=True, cwd=tmp_path, timeout=ceiling(120))
    assert r.returncode != 0
    assert "rollout.prompts_per_step=4: the recording in" in r.stderr and "prompts_per_step=8" in r.stderr
    assert "Started a local Ray" not in r.stderr and not list(tmp_path.rglob("metrics.jsonl"))


# -- the recording itself -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_rollouts_show_summarises_steps_rewards_lengths_and_samples(recorded, capsys):
    from rlhf.cli.recipes import main

    with pytest.raises(SystemExit) as done:
        main(["rollouts", "show", str(recorded.rec), "--samples", "2"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "2 step(s) (1..2)" in out and "8 prompts x 8 samples per step" in out
    table = {int(line.split()[0]): line.split() for line in out.splitlines() if line.strip()[:1].isdigit()}
    for s in recorded.steps:  # the reward mean of each step is the one the run logged
        assert table[s["step"]][1] == "64" and float(table[s["step"]][2]) == pytest.approx(s["train/score"], abs=5e-4)
    assert out.count("response: ") == 2 and "prompt:   " in out


def test_rollouts_show_names_a_folder_without_a_recording(tmp_path, capsys):
    from rlhf.cli.recipes import main

    with pytest.raises(SystemExit) as done:
        main(["rollouts", "show", str(tmp_path)])
    assert done.value.code != 0 and "recording.json is missing" in capsys.readouterr().err


def test_a_step_reads_back_exactly_as_written(tmp_path):
    from rlhf.backends.contract.rollout import Rollout
    from rlhf.pipelines.rollout_record import read_step, scored_from, step_columns, write_step

    rollouts = [
        Rollout([1, 2], [5, 6, 7], [1, 0, 1], [-0.1 - 0.2, 0.0, -1e-30], "stop", extra={"turns": 2}),
        Rollout([1, 3], [9], [1], [-2.5], "length", reward=0.3, scores=1.0),
    ]
    rows = [{"prompt": "p", "label": "4", "datasource": "add", "prompt_ids": [1, 2]}, {"prompt": "q", "label": ""}]
    s = Scored(rollouts, rows, [0.1 + 0.2, -1.0], [1.0, 0.0], {"acc": [1.0, float("nan")]}, 50.0, 2)
    cols, meta = step_columns(3, 42 * 7919 + 3, s, 2, lambda ids, **kw: "".join(map(chr, ids)))
    write_step(tmp_path, 3, cols, meta)
    back = scored_from(*read_step(tmp_path, 3))
    assert back.rollouts == rollouts and back.rewards == s.rewards and back.scores == s.scores
    assert back.rollouts[0].logprobs[0] == -0.1 - 0.2  # float64 all the way: the very same number
    assert back.extra_logs["acc"][0] == 1.0 and math.isnan(back.extra_logs["acc"][1])
    assert (back.pass_rate, back.refill_rounds) == (50.0, 2)
    assert [r["datasource"] for r in back.rows] == ["add", "default"]


def test_a_replay_keeps_the_devices_the_recorded_run_gave_each_role():
    from rlhf.spec import derive

    # colocated with one engine, the policy had 1 of the 2 devices; its replay trains on 1 rank too, not 2
    two = ["hardware.devices_per_node=2"]
    assert derive(_spec(*two, "rollout.replay=/r")).devices == {"policy": 1, "reference": 1}
    assert derive(_spec(*two)).devices["policy"] == 1
    assert derive(_spec(*two, "rollout.replay=/r")).roles == ("policy", "reference")
    assert derive(_spec("rollout.only=true")).roles == ("rollout",)


def test_writing_a_step_again_drops_the_later_steps(tmp_path):
    from rlhf.data.rollout_records import drop_steps_after, write_step

    for step in (1, 2, 3):
        write_step(tmp_path, step, {"step": [step]}, {})
    assert drop_steps_after(tmp_path, 2) == [3] and recorded_steps(tmp_path) == [1, 2]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind

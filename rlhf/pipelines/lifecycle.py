"""One run lifecycle for every pipeline, in the spirit of torchtune's recipes: a pipeline is a small ``Recipe``
(prepare its data, set up its actors, run one step, save and load its own state, finish, tear down) and the
``Runner`` owns what every pipeline shares:

- resume: the last complete checkpoint of the run folder (``checkpoint.resume``), or a note that there is none;
- the checkpoint policy: every ``checkpoint.save_steps`` (default about ten per run) or ``checkpoint.every_minutes``,
  at the end, and on SIGINT/SIGTERM at the next step boundary (a second signal stops at once);
- restarts (``trainer.max_restarts``): a crashed, hung or stalled (``trainer.heartbeat_timeout_s``, rlhf.waits)
  rollout engine is restarted in place by the recipe and its step carried on; a crashed, hung or stalled training
  rank restarts every actor of the job from the last checkpoint; the
  ``train/restarts`` metric of a step counts the restarts at or before it, so a step redone after a restart carries
  the number it had when first logged (metrics.jsonl and every tracker agree);
- the steps: how many, and why when the data gives fewer than ``trainer.max_steps``, printed before the first step
  and kept with the trackers' run (rlhf.pipelines.step_count);
- the attempt (rlhf.pipelines.attempt): begun once the data is good, ended with the trackers' status; a previous
  attempt whose driver died without ending is ended FAILED in every tracker first;
- every stop with a checkpoint names it and the resume command;
- numbers: the first non-finite loss or gradient norm stops the run naming step, role and metric
  (``trainer.on_nonfinite=skip``: DeepSpeed drops the step, three in a row stop);
- phases: a recipe may run another pipeline's steps ahead of its own (``Recipe.phases``; the SFT warm-up before RL,
  rlhf.pipelines.sft_warmup): the run's steps 1..n are the first phase's, and so on, then the recipe's own; each
  phase's state rides in every checkpoint under its key and is restored or reset with the recipe's;
- tracking (metrics.jsonl and every tracker of logging.trackers, never the same step twice; each tracker's record
  rides in every checkpoint), progress, and teardown of every actor.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlhf.atomic_save import DiskFull
from rlhf.errors import RunInterrupted, UserError, WorkerFailure
from rlhf.pipelines import attempt as attempts
from rlhf.pipelines import run_command
from rlhf.pipelines.interrupts import Interrupts
from rlhf.pipelines.run_files import run_artifacts
from rlhf.pipelines.startup_clock import StartupClock
from rlhf.pipelines.step_count import StepCount
from rlhf.run_files.checkpoint import CheckpointManager
from rlhf.spec.executor import max_restarts
from rlhf.spec.schema import ExperimentSpec

# Metric names whose non-finite value means the step's numbers went bad (suffix match on the logged key).
WATCHED = ("loss", "policy_loss", "critic_loss", "grad_norm", "actor_grad_norm", "critic_grad_norm")
SKIPS_IN_A_ROW = 3
# A run stopped while Ray still starts waits this long for the start to finish (so a private cluster is shut down
# in order), then leaves it to the process's exit.
STARTING_GRACE_S = 10.0


class Phase(Protocol):
    """Steps of another pipeline that a recipe runs on its own actors ahead of its own steps (the SFT warm-up before
    RL: rlhf.pipelines.sft_warmup.SFTWarmup). Run steps keep their numbers: the first phase of ``steps`` steps is run
    steps 1..steps, and the recipe's first own step the one after the phases."""

    name: str
    steps: int
    state_key: str  # its state's key in the checkpoint's driver state

    def step(self, step: int) -> dict[str, float]:
        """Run step ``step``; metrics keyed as logged."""
        ...

    def state(self) -> Any:
        """Its driver state for a checkpoint (JSON-serialisable)."""
        ...

    def load(self, state: Any) -> None:
        """Restore what :meth:`state` returned."""
        ...

    def reset(self) -> None:
        """Back to its initial state (a restart of every actor before the first checkpoint)."""
        ...


class Recipe(Protocol):
    """What a pipeline supplies to the Runner. A recipe may also hold ``phases`` (a sequence of :class:`Phase`, set
    by :meth:`prepare`; none when absent) whose steps run before its own and count in :meth:`prepare`'s steps."""

    family: str
    label: str  # progress bar label
    progress_keys: tuple[str, ...]  # metrics shown on the bar
    init_origin: dict[str, str] | None  # set by prepare under checkpoint.init_from: tracker params (init_from.*)

    def prepare(self) -> StepCount:
        """Tokenizer and data, before any process starts (a bad row stops here); the steps and why."""
        ...

    def setup(self, realized: Any) -> None:
        """Start the actors on the placement (again after a training rank died)."""
        ...

    def initial_eval(self) -> dict[str, float]:
        """Metrics of the untrained model, logged at step 0 (empty: none)."""
        ...

    def step(self, step: int) -> dict[str, float]:
        """One step; metrics keyed as logged (``train/...``, ``eval/...``). Called again for the same step after
        :meth:`recover` succeeded, to carry it on from where it failed."""
        ...

    def recover(self, failure: WorkerFailure) -> bool:
        """Repair ``failure`` in place (restart a rollout engine and bring it up to date); False when only a restart
        of every actor from the last checkpoint can help."""
        ...

    def state(self, step: int) -> dict[str, Any]:
        """The driver's state for a checkpoint (data position, controllers, ...); JSON-serialisable."""
        ...

    def save(self, folder: Path, step: int) -> None:
        """The trained roles' states into ``folder``."""
        ...

    def load(self, folder: Path, state: dict[str, Any]) -> None:
        """Restore what :meth:`save` and :meth:`state` wrote."""
        ...

    def reset(self) -> None:
        """Back to the driver's initial state (a restart of every actor before the first checkpoint)."""
        ...

    def finish(self) -> dict[str, Any]:
        """The final model (and anything else the pipeline writes at the end); fields of the summary."""
        ...

    def teardown(self) -> None:
        """Stop what the recipe started besides the actors (threads, servers); idempotent."""
        ...


class _Background:
    """``fn()`` on a thread of its own; ``result()`` waits for its value. The thread then stays parked until
    ``release()``: Ray's own processes (GCS, raylet) get a parent-death signal tied to the thread that started
    them, so that thread must outlive the cluster. ``discard()`` shuts down what ``fn`` made, then releases."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        import threading

        self._value: Any = None
        self._error: BaseException | None = None
        self._ready, self._done = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fn,), name="rlhf-start-ray", daemon=True)
        _quiet_ray_thread_warning()
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as e:  # handed to whoever waits
            self._error = e
        finally:
            self._ready.set()
        self._done.wait()

    def result(self, stop: Callable[[], object] = lambda: None) -> Any:
        """The value; None as soon as ``stop()`` is true (a signal while Ray starts: an attach that cannot connect
        retries for minutes, and the run must stop when asked, not when Ray gives up)."""
        while not self._ready.wait(0.2):
            if stop():
                return None
        if self._error is not None:
            raise self._error
        return self._value

    def release(self) -> None:
        self._done.set()
        self._thread.join()

    def discard(self, wait_s: float | None = None) -> None:
        """Shut down what ``fn`` made; with ``wait_s``, give up waiting for ``fn`` after that long (the thread is
        a daemon: it ends with the process, a private cluster's processes with their parent and its reaper)."""
        if not self._ready.wait(wait_s):
            return
        value, self._value = self._value, None
        try:
            if value is not None:
                value.shutdown()
        finally:
            self.release()


class _Tracking:
    """``fn()`` on a thread of its own (the trackers opening beside Ray's start and the models' loading);
    ``result()`` waits for its value or raises its error."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        import threading

        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name="rlhf-open-trackers", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as e:  # handed to whoever waits
            self._error = e

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value

    def result_or_none(self) -> tuple[Any, Any]:
        """For the teardown: the value, or (None, None) when opening failed (that error is already on its way)."""
        self._thread.join()
        return (None, None) if self._error is not None else self._value


class _NoThreadSigtermWarning:
    """Ray warns that it set no SIGTERM handler when connected from a thread; ours stays installed (interrupts)."""

    def filter(self, record: Any) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _quiet_ray_thread_warning() -> None:
    import logging

    logger = logging.getLogger("ray._private.worker")
    if not any(isinstance(f, _NoThreadSigtermWarning) for f in logger.filters):
        logger.addFilter(_NoThreadSigtermWarning())


@dataclass
class Restarts:
    """The restart budget of one attempt (``trainer.max_restarts``), and the steps every restart of the run
    happened at (earlier attempts' ride in the checkpoint), which ``train/restarts`` counts."""

    limit: int
    used: int = 0
    history: list[str] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)

    def take(self, failure: WorkerFailure, resume_hint: str, step: int) -> None:
        if not failure.restartable or self.used >= self.limit:
            why = "not a crash or a hang" if not failure.restartable else f"{self.used} restart(s) used of {self.limit}"
            raise RunFailed(f"{failure}\nthe run stops ({why}; trainer.max_restarts); {resume_hint}") from failure
        self.used += 1
        self.steps.append(step)
        self.history.append(f"{failure.role} rank {failure.rank}: {failure.kind}")
        print(f"restart {self.used}/{self.limit}: {str(failure).splitlines()[0]}", file=sys.stderr, flush=True)

    def at(self, step: int) -> int:
        """Restarts at or before ``step``: what step ``step`` logs, the same however often it was redone (a step
        already logged before a restart sent it back keeps its number in the trackers, which never log a step
        twice, and metrics.jsonl gets the same)."""
        return sum(1 for s in self.steps if s <= step)

    @property
    def total(self) -> int:
        return len(self.steps)


class RunFailed(UserError):
    """The run stopped on a failure it could not (or may not) recover from; the message says where to resume."""


class NonFinite(UserError):
    """A loss or gradient norm became NaN or infinite."""


def checkpoint_every(spec: ExperimentSpec, total: int) -> int:
    """Steps between checkpoints: ``checkpoint.save_steps``, or about ten per run when it is null; 0: never
    (only at the end and on interrupt)."""
    n = spec.checkpoint.save_steps
    if n is None:
        return max(math.ceil(total / 10), 1)
    return n


def nonfinite(metrics: dict[str, float]) -> list[tuple[str, float]]:
    """The watched metrics that are NaN or infinite."""
    out = []
    for k, v in metrics.items():
        if k.rsplit("/", 1)[-1] in WATCHED and isinstance(v, float) and not math.isfinite(v):
            out.append((k, v))
    return out


def _headline_evals(metrics: dict[str, float]) -> dict[str, str]:
    """The eval metrics worth a console line (pass@k, loss, accuracy), without the lengths and counts, formatted;
    one with its standard error logged beside it (NAME_se) reads value±se, e.g. eval_add_pass1=0.758±0.022."""
    noise = ("response_length", "truncated", "num_samples", "samples")
    evals = {
        k.removeprefix("eval/"): v
        for k, v in metrics.items()
        if k.startswith("eval/") and not any(n in k for n in noise)
    }
    return {
        k: f"{v:.3f}±{evals[k + '_se']:.3f}" if k + "_se" in evals else f"{v:.3g}"
        for k, v in evals.items()
        if not (k.endswith("_se") and k.removesuffix("_se") in evals)
    }


def resume_command(run_dir: Path) -> str:
    return f"rlhf-run --resume {run_dir}"


def with_hint(error: BaseException, hint: str) -> BaseException:
    """``error`` (the same object: callers catch its type) with ``hint`` at the end of what the user reads: its one-
    line message for a UserError, a note under the traceback for anything else (Python 3.11+; printed before it on
    3.10). Nothing when the message names a resume command already."""
    if "resume with:" in str(error):
        return error
    args = getattr(error, "args", ())
    if isinstance(error, UserError) and len(args) == 1 and isinstance(args[0], str) and str(error) == args[0]:
        error.args = (f"{args[0]}; {hint}",)
    elif hasattr(error, "add_note"):
        error.add_note(hint)
    else:
        print(hint, file=sys.stderr)
    return error


class Runner:
    """Runs a recipe on the plan's placement with the lifecycle above; returns the summary dict."""

    def __init__(
        self,
        spec: ExperimentSpec,
        plan: Any,
        run_dir: Path,
        realize: Callable[[ExperimentSpec, Any], Any],
        recipe: Recipe,
    ) -> None:
        self.spec, self.plan, self.realize, self.recipe = spec, plan, realize, recipe
        self.run_dir = Path(run_dir)
        root = Path(spec.checkpoint.dir)
        self.ckpt = CheckpointManager(
            root if root.is_absolute() else self.run_dir / root, spec.checkpoint.max_keep, spec.checkpoint.verify
        )
        self.restarts = Restarts(max_restarts(spec))
        self.attempt: attempts.Attempt | None = None
        self.tracker: Any = None  # rlhf.tracking.Tracking, once the trackers are open (before the step-0 eval)
        self.realized: Any = None
        self.last_ckpt: Path | None = None
        self.trackers_ended: str | None = None  # the status the trackers' runs were ended with
        self.skipped_in_a_row = 0
        self.skipped = 0
        self.phases: tuple[Phase, ...] = ()
        self.step_now = 0  # the step the loop is in (a second Ctrl-C says the steps done before it)

    # -- steps ----------------------------------------------------------------------------------------------------
    def _step(self, step: int) -> dict[str, float]:
        """Run step ``step``: the phase it falls in, else the recipe's own."""
        first = 1
        for phase in self.phases:
            if step < first + phase.steps:
                return phase.step(step)
            first += phase.steps
        return self.recipe.step(step)

    def _load(self, folder: Path, state: dict[str, Any]) -> None:
        self.recipe.load(folder, state)
        for phase in self.phases:
            if phase.state_key in state:
                phase.load(state[phase.state_key])

    def _reset(self) -> None:
        self.recipe.reset()
        for phase in self.phases:
            phase.reset()

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def _save(self, step: int) -> Path:
        driver = {**self.recipe.state(step), "step": step, "family": self.recipe.family}
        driver.update({p.state_key: p.state() for p in self.phases})
        driver["trackers"] = self.tracker.records()
        driver["restarts"] = list(self.restarts.steps)
        tmp = self.ckpt.begin(step)
        try:
            self.recipe.save(tmp, step)
            path = self.ckpt.commit(tmp, step, driver)
        except BaseException as e:
            self.ckpt.abort(tmp, e, step)  # removes the partial folder; a full disk raises DiskFull naming the sizes
            raise
        self.last_ckpt, self.last_save_time = path, time.monotonic()
        return path

    def _due(self, step: int, total: int) -> bool:
        every = checkpoint_every(self.spec, total)
        if step == total:
            return True
        if every and step % every == 0:
            return True
        minutes = self.spec.checkpoint.every_minutes
        return minutes is not None and time.monotonic() - self.last_save_time >= minutes * 60

    def _trackers_state(self) -> str:
        """What the trackers record for this run now, for a message written while it stops."""
        if self.trackers_ended:
            return f"the trackers' runs are marked {self.trackers_ended}"
        if self.tracker is None:
            return "no tracker run was opened yet"
        return "the trackers' runs are left RUNNING until the reaper marks them FAILED"

    def _resume_hint(self) -> str:
        where = f"the last checkpoint is {self.last_ckpt}" if self.last_ckpt else "no checkpoint was written yet"
        return f"{where}; resume with: {resume_command(self.run_dir)}"

    def _open_tracking(self, state: dict[str, Any], params: dict[str, Any], total: int) -> tuple[Any, Any]:
        """The run's trackers (a continued run's records from its checkpoint), its attempt begun, the metrics file
        rewound to the checkpoint's step and the run's artifacts logged."""
        from rlhf.tracking import Tracking

        tracker = Tracking(self.spec, self.run_dir, records=state.get("trackers"), params=params)
        attempt = attempts.begin(self.run_dir, total, self.ckpt.root)
        origin = getattr(self.recipe, "init_origin", None)  # checkpoint.init_from: where the weights came from
        if origin:
            tracker.log_params(origin)
        tracker.rewind(int(state["step"]) if state else -1)  # a fresh run: an empty metrics.jsonl
        tracker.log_artifacts(run_artifacts(self.spec, self.plan, self.run_dir))
        return tracker, attempt

    # -- the run --------------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """The run, its folder held from the first line to the last (one run per folder; rlhf-run's job holds it
        already, a run started from Python takes it here)."""
        from rlhf.pipelines.folder_lock import hold

        with hold(self.run_dir):
            return self._run()

    def _run(self) -> dict[str, Any]:
        """The run's steps, each named below: what is checked before any process starts, the data built while Ray
        starts, the processes and trackers taken over, the resume or the step-0 eval, the training loop, the
        summary; the teardown whatever happened."""
        from rlhf.tracking import summary_lines

        t_start = time.time()
        clock = StartupClock(getattr(self.plan, "executor", ""))
        resume_from, state = self._checked_before_processes()
        # Our Ctrl-C/SIGTERM handlers go in before Ray starts: a signal while the data builds (Ray already
        # starting or attaching beside it) then stops the run at step 0 instead of killing the process outright.
        signals = ExitStack()
        interrupts = signals.enter_context(Interrupts(self._resume_hint, self._trackers_state))
        # Ray starts (its own processes, and its idle workers importing what the actors need) while this process
        # tokenises the data; what only the data build finds stops the cluster it started.
        starting = _Background(lambda: self.realize(self.spec, self.plan))
        try:
            total, params = self._prepare(state, clock)
        except BaseException:
            signals.close()
            starting.discard()
            raise
        # The trackers open (MLflow's import and store, W&B's service) on a thread of their own while this one waits
        # for Ray and the actors load their models: nothing is logged before the step-0 eval, which waits for them.
        tracking = _Tracking(lambda: self._open_tracking(state, params, total))
        self.last_ckpt, self.last_save_time = resume_from, time.monotonic()
        status = "FAILED"
        self.step_now = 0
        try:
            with signals:  # ours until the teardown, as before the data build
                start = self._take_over(starting, tracking, interrupts, clock, resume_from, state)
                self._train(total, start, interrupts)
                result = self._result(total, t_start)
            for line in summary_lines(result):
                print(line, file=sys.stderr)
            status = "FINISHED"
            return result
        except KeyboardInterrupt as e:  # a second signal: stop at once
            status = "KILLED"
            stopped = RunInterrupted(str(e) or "SIGINT", max(self.step_now - 1, 0), self.last_ckpt, self.run_dir)
            stopped.abandoned = interrupts.abandoned
            raise stopped from None
        except RunInterrupted as e:
            status = "KILLED"
            e.announce()  # before the teardown: a signal sent to the whole process group may have stopped Ray too
            raise
        except DiskFull as e:  # a checkpoint or a model (final, best, critic) did not fit: say what is still good
            where = f"the last good checkpoint is {self.last_ckpt}" if self.last_ckpt else "no checkpoint yet"
            raise e.with_hint(f"{where}; free some space, then resume with: {resume_command(self.run_dir)}") from None
        except Exception as e:  # a dead reward endpoint, a bug: whatever stopped it, say where it can resume from
            if self.last_ckpt is not None:
                with_hint(e, self._resume_hint())
            raise
        finally:
            self._teardown(status, tracking, starting)

    def _checked_before_processes(self) -> tuple[Path | None, dict[str, Any]]:
        """Every row of the local data files, and the checkpoint to resume from verified against its manifest,
        before any process starts: a bad row or a damaged checkpoint is named in seconds, not after Ray and the
        engines are up. Returns the checkpoint (None: a fresh start) and its driver state."""
        from rlhf.data.row_check import check_rows

        self.run_dir.mkdir(parents=True, exist_ok=True)
        check_rows(self.spec)
        resume_from = self.ckpt.resolve_resume(self.spec.checkpoint.resume)
        return resume_from, (self.ckpt.driver_state(resume_from) if resume_from else {})

    def _prepare(self, state: dict[str, Any], clock: StartupClock) -> tuple[int, dict[str, Any]]:
        """The recipe's data and model (while Ray starts); the steps in all and the parameters to log; a dead
        earlier attempt in this folder ended."""
        count = self.recipe.prepare()
        self.phases = tuple(getattr(self.recipe, "phases", ()))
        total = count if isinstance(count, int) else count.steps
        if isinstance(count, StepCount):
            print(count.line(), file=sys.stderr, flush=True)
        clock.mark("data and model")
        for line in attempts.end_if_dead(self.run_dir, "the next rlhf-run in this folder"):
            print(line, file=sys.stderr)
        params = count.params() if isinstance(count, StepCount) else {}
        self.restarts.steps = [int(s) for s in state.get("restarts", [])]
        return total, params

    def _take_over(
        self,
        starting: _Background,
        tracking: _Tracking,
        interrupts: Interrupts,
        clock: StartupClock,
        resume_from: Path | None,
        state: dict[str, Any],
    ) -> int:
        """The started processes and the opened trackers taken over, the recipe's engines set up, then the resume
        (its checkpoint loaded) or the step-0 eval; the step the run continues after."""
        self.realized = starting.result(stop=lambda: interrupts.requested)
        if self.realized is None:  # a signal while Ray was starting: nothing ran, nothing to save
            done = (CheckpointManager.step_of(self.last_ckpt) or 0) if self.last_ckpt else 0
            raise RunInterrupted(interrupts.requested, done, self.last_ckpt, self.run_dir)
        interrupts.reinstall()  # connecting to Ray may have replaced the SIGTERM handler
        clock.mark("waiting for Ray" if clock.executor != "local" else "local executor")
        self.recipe.setup(self.realized)
        clock.mark("engines")
        self.tracker, self.attempt = tracking.result()
        if resume_from is None and self.spec.checkpoint.resume == "auto" and self.tracker.previous_steps():
            print(
                f"no checkpoint in {self.ckpt.root}: starting again from step 1 (the previous attempt "
                f"logged {self.tracker.previous_steps()} step(s); the trackers keep the points they hold)",
                file=sys.stderr,
            )
        clock.mark("tracking")
        start = 0
        if resume_from is not None:
            self._load(resume_from, state)
            start = int(state["step"])
            print(f"resumed from {resume_from} at step {start}", file=sys.stderr)
        else:
            first = self.recipe.initial_eval()
            clock.mark("first eval")
            if first:  # the start-up phases ride along with the step-0 eval (no row of their own)
                self.tracker.log({**first, **clock.metrics()}, 0)
                evals = _headline_evals(first)
                print("step 0: " + ", ".join(f"{k}={v}" for k, v in evals.items()), file=sys.stderr)
        print(clock.line(), file=sys.stderr, flush=True)
        run_command.adopt_staged(self.run_dir)  # started: a changed command is the run's from now on
        return start

    def _train(self, total: int, start: int, interrupts: Interrupts) -> None:
        """Steps ``start + 1`` to ``total``: each logged, checkpointed when due, a failed one recovered in place or
        from the last checkpoint; a signal stops at the step's end with a checkpoint (RunInterrupted)."""
        from rlhf.tracking import Progress

        progress = Progress(total, start, self.recipe.label, self.recipe.progress_keys, self.spec.logging.progress)
        step = self.step_now = start + 1
        while step <= total:
            if interrupts.requested:
                break
            try:
                metrics = self._step(step)
            except WorkerFailure as failure:
                if interrupts.requested:
                    # The signal reached the workers too (Ctrl-C in a terminal, `timeout` and schedulers signal the
                    # whole process group): nothing to restart; stop at the last checkpoint.
                    done = (CheckpointManager.step_of(self.last_ckpt) or 0) if self.last_ckpt else 0
                    raise RunInterrupted(interrupts.requested, done, self.last_ckpt, self.run_dir) from None
                if not self._recover(failure, step):  # else the same step, carried on with the engine restarted
                    step = self.step_now = self._restart_from_checkpoint(progress)
                continue
            self._check_numbers(metrics, step)
            metrics["train/restarts"] = float(self.restarts.at(step))
            self.tracker.log(metrics, step)
            progress.update(metrics)
            evals = _headline_evals(metrics)
            if evals:
                progress.write(f"step {step}: " + ", ".join(f"{k}={v}" for k, v in evals.items()))
            if self._due(step, total) or interrupts.requested:
                self._save(step)
            step = self.step_now = step + 1
        progress.close()
        if interrupts.requested:
            done = step - 1
            if done > 0 and (self.last_ckpt is None or CheckpointManager.step_of(self.last_ckpt) != done):
                self._save(done)
            raise RunInterrupted(interrupts.requested, done, self.last_ckpt, self.run_dir)

    def _result(self, total: int, t_start: float) -> dict[str, Any]:
        return {
            "family": self.recipe.family,
            "steps": total,
            "seconds": time.time() - t_start,
            "checkpoint": str(self.last_ckpt) if self.last_ckpt else None,
            "trackers": self.tracker.locations(),
            "run_dir": str(self.run_dir),
            "restarts": self.restarts.total,
            "skipped_steps": self.skipped,
            **self.recipe.finish(),
        }

    def _teardown(self, status: str, tracking: _Tracking, starting: _Background) -> None:
        """Whatever happened: the recipe's engines released, the trackers and the attempt ended with ``status``,
        the cluster shut down (or, stopped before it was taken over, discarded as it starts)."""
        self.recipe.teardown()
        if self.tracker is None:  # stopped before the step-0 eval: the trackers may still be opening
            self.tracker, self.attempt = tracking.result_or_none()
        if self.tracker is not None:
            self.tracker.finish(status)
            self.trackers_ended = status
        if self.attempt is not None:
            attempts.end(self.run_dir, self.attempt, status)
        if self.realized is not None:
            self.realized.shutdown()
            starting.release()
        else:  # stopped before taking the cluster over (a signal may have come while Ray still starts)
            starting.discard(wait_s=STARTING_GRACE_S if status == "KILLED" else None)

    def _recover(self, failure: WorkerFailure, step: int) -> bool:
        """Spend a restart on ``failure`` (in ``step``) and let the recipe repair it in place; a failure while
        repairing spends another. False: only every actor from the last checkpoint can help."""
        while True:
            self.restarts.take(failure, self._resume_hint(), step)
            try:
                return self.recipe.recover(failure)
            except WorkerFailure as again:
                failure = again

    def _restart_from_checkpoint(self, progress: Any) -> int:
        """Every actor again, from the last checkpoint (or from the start when there is none); the step to run."""
        self.recipe.teardown()
        self.realized.kill_actors()
        self.recipe.setup(self.realized)
        ck = self.ckpt.latest()
        if ck is None:
            print("restarting from step 1 (no checkpoint yet)", file=sys.stderr)
            self._reset()
            back = 0
        else:
            state = self.ckpt.driver_state(ck)
            self._load(ck, state)
            back = int(state["step"])
            print(f"restarted every actor from {ck} (step {back})", file=sys.stderr)
        self.tracker.rewind(back)
        progress.bar.n = back
        return back + 1

    def _check_numbers(self, metrics: dict[str, float], step: int) -> None:
        bad = nonfinite(metrics)
        if not bad:
            self.skipped_in_a_row = 0
            return
        names = ", ".join(f"{k}={v}" for k, v in bad)
        role = "critic" if all("critic" in k for k, _ in bad) else "policy"
        if self.spec.trainer.on_nonfinite == "skip":
            self.skipped += 1
            self.skipped_in_a_row += 1
            metrics["train/skipped_steps"] = float(self.skipped)
            if self.skipped_in_a_row < SKIPS_IN_A_ROW:
                print(f"step {step}: {names} ({role}); the step's update was dropped", file=sys.stderr)
                return
            raise NonFinite(
                f"step {step}, role {role}: {names} for {SKIPS_IN_A_ROW} steps in a row (trainer.on_nonfinite=skip): "
                f"the run stops; lower trainer.lr or check the data; {self._resume_hint()}"
            )
        raise NonFinite(
            f"step {step}, role {role}: {names}: the numbers went bad, the run stops before saving them; lower "
            f"trainer.lr (or set trainer.on_nonfinite=skip to drop such steps); {self._resume_hint()}"
        )

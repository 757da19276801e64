"""The training-engine contract: what a backend of ``trainer.backend`` provides, and nothing else.

Three protocols, whose docstrings are the whole contract (tests/backends/test_train_backends.py runs every registered
backend through them):

* :class:`TrainBackend`: the backend itself, registered under its config string in ``rlhf.spec.registry``. Its
  module imports no torch: the plan (memory) and validation use it on a machine with nothing but the package.
* :class:`TrainEngine`: a trained model on one rank (policy, critic, the SFT/RM/DPO model), as the worker
  (``rlhf.workers.model_worker``), the pipelines and the weight sync call it.
* :class:`FrozenEngine`: a frozen model on one rank (reference, reward model, teacher).

Config: ``trainer.backend`` picks the backend; keys every backend reads stay at ``trainer.*`` (batches, optimizer,
schedule, precision, clipping, ``gradient_checkpointing``); a backend's own keys live in its sub-section
``trainer.<name>.*`` of :class:`rlhf.spec.schema.TrainerSpec` (DeepSpeed's ZeRO keys stay at ``trainer.zero_stage``,
``trainer.offload_*``, where OpenRLHF users know them). A backend's cross-key rules are its
descriptor's ``problems``, which rlhf.spec.validate reaches through the registry line and runs with every other
check (one message, nothing started).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rlhf.spec.mesh import Mesh, data_by_sequence, data_parallel

if TYPE_CHECKING:
    from rlhf.spec.schema import ExperimentSpec

__all__ = ["Mesh"]  # re-exported: the layout a backend declares (rlhf.spec.mesh)

# loss_fn(model, micro_batch, normalizer) -> (scalar loss to backpropagate, {metric: value}); ``model`` is callable
# like the HF module. The normalizer is rlhf.algo.LossNormalizer (None for sequence-level losses).
LossFn = Callable[[Any, dict[str, Any], Any], tuple[Any, dict[str, Any]]]
# load(precision) -> the HF (or peft) model in that precision ("fp32" | "bf16" | "fp16"), on the CPU.
ModelLoader = Callable[[str], Any]


@dataclass(frozen=True)
class ModelStates:
    """Bytes per device of one role's model states, as the plan counts them (activations are the plan's own
    formula: they depend on the model, not on the backend)."""

    weights: float = 0.0  # parameters resident on the device (shards, plus gathered-layer buffers)
    grads: float = 0.0  # gradients on the device
    optimizer: float = 0.0  # master weights, fp32 gradient copies and Adam moments on the device
    host: float = 0.0  # what the backend keeps in host memory instead (offload), per device


@dataclass(frozen=True)
class SavedWeights:
    """One trained role's weights in a step checkpoint, as the backend that wrote it finds them
    (:meth:`TrainBackend.checkpoint_weights`), reading file names only."""

    where: Path  # the files holding them (the role's folder, or the backend's own folder or file inside it)
    problem: str = ""  # why they are not whole, one sentence naming the folder and what is missing ("": complete)


@dataclass(frozen=True)
class TrainTraffic:
    """What a training engine moves besides compute, in seconds, as the cost model (rlhf.planning.cost) counts it."""

    per_micro_batch: float = 0.0  # collectives and host copies of one forward + backward
    per_step: float = 0.0  # collectives of one optimizer step
    optimizer_on_host: bool = False  # the optimizer step runs in host memory (offload)


class Network(Protocol):
    """The cost model's links, as a backend's :meth:`TrainBackend.traffic` uses them (seconds)."""

    def ring(self, nbytes: float, ranks: int, bandwidth: float) -> float:
        """A ring collective moving (N-1)/N of ``nbytes`` per rank (reduce-scatter or all-gather)."""
        ...

    def calls(self, n: int, ranks: int) -> float:
        """The fixed cost of ``n`` collective calls among ``ranks`` ranks."""
        ...

    def host(self, nbytes: float) -> float:
        """Bytes over the host link (offload)."""
        ...


@runtime_checkable
class TrainEngine(Protocol):
    """A trained model on one data-parallel rank. Every method marked *collective* must be called by every rank of
    the role group, in the same order (the worker and the pipelines do)."""

    grad_accum: int  # micro-batches per optimizer step on each rank at a fixed micro-batch size
    global_step: int  # optimizer steps taken (restored by load)
    device: Any  # torch.device of this rank

    @property
    def module(self) -> Any:
        """The model as built (HF or peft), for its config, its tokenizer-independent helpers and save_pretrained."""
        ...

    @property
    def gathers_on_every_rank(self) -> bool:
        """True when the parameters are sharded, so every rank must iterate :meth:`weight_buckets` and
        :meth:`named_weights` (the gathers are collectives); False when rank 0 holds them whole."""
        ...

    def step(
        self,
        micro_batches: list[dict[str, Any]],
        loss_fn: LossFn,
        *,
        mask_key: str | None = "action_mask",
        norm_constant: float | None = None,
    ) -> dict[str, float]:
        """One optimizer step over the micro-batches given (collective): the same number on every rank (checked with
        one all-reduce: a mismatch raises on every rank instead of hanging), ``grad_accum`` of them when micro-batches
        hold a fixed number of samples, any number with token-budget micro-batches. ``loss_fn`` gets the step-window
        normaliser built from ``micro_batch[mask_key]`` of every micro-batch on every rank (None when ``mask_key`` is
        None), so the gradient is that of one token mean over the whole step; the engine divides each micro-batch's
        loss by the step's micro-batch count and averages gradients over the ranks. Gradients are clipped to
        ``trainer.max_norm`` (0: not clipped); a step whose gradient norm is not finite changes nothing. Returns the
        loss metrics averaged over micro-batches and ranks, ``grad_norm`` (before clipping, NaN/inf when the step was
        dropped) and the ``lr`` the step used; the schedule then moves on."""
        ...

    def forward_no_grad(self, fn: Callable[[Any, dict[str, Any]], Any], batch: dict[str, Any]) -> Any:
        """``fn(model, batch)`` in eval mode without gradients, the batch on this rank's device (collective when
        sharded: every rank runs the same number of forwards)."""
        ...

    def set_peak_lr(self, lr: float) -> None:
        """The schedule's peak learning rate from the next step on (its shape kept): the SFT warm-up's own rate."""
        ...

    def save(self, path: str, client_state: dict[str, Any] | None = None) -> None:
        """Model, optimizer, schedule, ``client_state`` and this rank's RNG state into the folder ``path``
        (collective; the folder is a temporary one of rlhf.run_files.checkpoint, renamed into place after every rank
        returned). :meth:`load` of it continues bit-exactly."""
        ...

    def load(self, path: str) -> dict[str, Any]:
        """Restore what :meth:`save` wrote (collective); returns the client state given to it."""
        ...

    def save_hf(self, path: str, tokenizer: Any = None, config_updates: dict[str, Any] | None = None) -> None:
        """A Hugging Face folder plain transformers loads, in the training precision, written by rank 0 (collective);
        a peft model writes its adapters only. ``config_updates`` are set on config.json (RM mean/std)."""
        ...

    def named_weights(self, keep: bool = True, adapter: bool = False) -> Iterator[tuple[str, Any]]:
        """Full weights under plain HF names (gathered, LoRA merged), for the object-store weight sync. Collective
        when :attr:`gathers_on_every_rank`; ranks with ``keep=False`` take part and get nothing. ``adapter``
        (rollout.weight_sync_lora=adapter, a LoRA model only): the LoRA adapter tensors alone, under the peft
        model's own parameter names (rlhf.backends.shared.weights.lora_adapter_weights)."""
        ...

    def weight_buckets(
        self, bucket_bytes: int, keep: bool = True, adapter: bool = False
    ) -> Iterator[list[tuple[str, Any]] | None]:
        """The weights of :meth:`named_weights` in buckets of about ``bucket_bytes`` (a larger tensor alone), as the
        rollout engines load them (rollout precision, on this rank's device), gathered one bucket at a time: no rank
        ever holds more than one bucket of full weights. Consume a bucket before asking for the next. Ranks with
        ``keep=False`` get ``None`` per bucket (they still take part in the gathers)."""
        ...

    def largest_weight_bytes(self) -> int:
        """Bytes of the largest single weight as :meth:`weight_buckets` yields it: a sync buffer must hold it."""
        ...

    def trainable_params(self) -> int:
        """Trained parameters (full count, not this rank's shard; LoRA: the adapters)."""
        ...

    def offload_states(self) -> None:
        """Parameters and optimizer states to host memory while the colocated rollout engine generates (GPUs; a
        no-op where they already live there)."""
        ...

    def reload_states(self) -> None:
        """Undo :meth:`offload_states` before training."""
        ...


@runtime_checkable
class FrozenEngine(Protocol):
    """A frozen model on one rank (reference, reward, teacher): forward only, no gradients."""

    device: Any

    @property
    def module(self) -> Any: ...

    def forward(self, fn: Callable[[Any, dict[str, Any]], Any], batch: dict[str, Any]) -> Any:
        """``fn(model, batch)`` without gradients on this rank's device (collective when sharded)."""
        ...

    def offload_states(self) -> None: ...

    def reload_states(self) -> None: ...


@runtime_checkable
class TrainBackend(Protocol):
    """A training backend: ``trainer.backend=<name>``. Its folder rlhf/backends/train/<name>/ defines it in
    ``descriptor.py`` without importing torch at module level; ``rlhf.spec.registry.TRAIN_BACKENDS`` names it;
    conf/trainer/backend/<name>.yaml selects it as a group option (``trainer/backend=<name>``, the same as
    ``trainer.backend=<name>``).

    Memory (the plan, ``rlhf-plan``): :meth:`trained_states` and :meth:`frozen_states` per role and device;
    :meth:`gathers_on_every_rank` for the weight sync's buffers. Validation: see the module docstring (the
    sub-section ``trainer.<name>`` and its ``problems``). Weights reach the rollout
    engines through :meth:`TrainEngine.weight_buckets`, sent by the worker's weight-sync sender on rank 0.

    Checkpoints: the backend owns the layout its :meth:`TrainEngine.save` writes into a trained role's folder of a
    step checkpoint (rlhf.run_files.checkpoint: an RL checkpoint's ``policy/`` and ``critic/``, an SFT/RM/DPO
    checkpoint's folder itself). The run's ``resolved_config.yaml`` (``trainer.backend``) says which backend wrote
    a checkpoint, and ``checkpoint.init_from`` and ``rlhf-run --resume`` ask that backend:
    :meth:`checkpoint_weights` (the preflight, no torch), :meth:`checkpoint_state_dict` (the pipeline, with torch),
    :meth:`checkpoint_bound_keys` and :meth:`optimizer_bound_to_ranks` (what a resume may not change).
    """

    name: str

    def describe(self, spec: ExperimentSpec) -> str:
        """One line for the plan: how the trained and frozen models are held (sharding, precision, offload)."""
        ...

    def mesh(self, spec: ExperimentSpec, ranks: int) -> Mesh:
        """How a model role's ``ranks`` are laid out under ``spec``: data x sequence (x tensor x pipeline), the
        product ``ranks``. Everything that counts samples or memory per rank reads it (rlhf.spec.derive: gradient
        accumulation from ``data``; the plan's activations per rank from ``sequence``), so nothing outside the backend
        assumes every rank is data-parallel."""
        ...

    def init_distributed(self, accelerator: str, timeout_s: float = 600.0) -> None:
        """Join this rank's role group (RANK / WORLD_SIZE / MASTER_* in the environment): gloo on CPU, nccl on
        GPUs. Idempotent."""
        ...

    def leave(self) -> None:
        """Leave the role group and drop whatever the backend set for the whole process (DeepSpeed: transformers'
        ZeRO-3 model construction), so that the process can host another job: the local executor's process is the
        driver's, and outlives the job. Idempotent; a no-op for a rank that never joined."""
        ...

    def build_trained(
        self, load: ModelLoader, spec: ExperimentSpec, *, lr: float, total_steps: int, grad_accum: int
    ) -> TrainEngine:
        """The engine of a trained model: ``load(precision)`` called in whatever context the backend needs (e.g.
        ZeRO-3's partitioned init), the optimizer (``trainer.optimizer``, ``betas``, ``eps``, ``weight_decay``) and
        schedule (``trainer.lr_scheduler`` over ``total_steps``) built, ``trainer.gradient_checkpointing`` and LoRA
        already applied by the loader. Collective."""
        ...

    def build_frozen(self, load: ModelLoader, spec: ExperimentSpec, *, offload: bool) -> FrozenEngine:
        """The engine of a frozen model in ``trainer.precision``; ``offload``: its weights in host memory
        (reference.offload, reward.offload, teacher.offload). Collective."""
        ...

    def trained_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, trainable: int | None = None
    ) -> ModelStates:
        """Per-device bytes of a trained role with ``params`` parameters (``trainable`` of them trained; None: all)
        over ``dp`` ranks; ``largest_layer``: parameters of the largest block gathered at once."""
        ...

    def frozen_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, offload: bool
    ) -> ModelStates:
        """Per-device bytes of a frozen role."""
        ...

    def gathers_on_every_rank(self, spec: ExperimentSpec) -> bool:
        """Whether the policy's parameters are sharded under ``spec`` (every rank gathers each weight-sync bucket,
        so each holds one bucket during a sync); the engine's :attr:`TrainEngine.gathers_on_every_rank` agrees."""
        ...

    # What the planner asks (rlhf.planning.cost, rlhf.planning.auto, rlhf-plan --auto): nothing outside the backend's
    # module compares its name.

    def shards_optimizer_states(self, spec: ExperimentSpec) -> bool:
        """Whether the optimizer states are split over the role's ranks (each rank steps its shard)."""
        ...

    def gathered_units(self, spec: ExperimentSpec) -> int:
        """How many separate gathers a sharded engine makes per pass (its hooks' fixed cost is paid per unit)."""
        ...

    def module_cost(self, constants: Any) -> Any:
        """The cost model's fixed cost per gathered unit for this engine (a ``rlhf.planning.cost.ModuleCost`` field of
        ``constants``)."""
        ...

    def traffic(
        self,
        spec: ExperimentSpec,
        net: Network,
        *,
        ranks: int,
        link: float,
        weight_bytes: float,
        grad_bytes: float,
        trained: float,
        units: int,
        buckets: int,
        hidden: float,
        gpu: bool,
    ) -> TrainTraffic:
        """Gradient and parameter traffic of one trained role: ``weight_bytes`` of weights and ``grad_bytes`` of
        16-bit gradients of ``trained`` parameters over ``ranks`` ranks at ``link``, in ``units`` gathers or
        ``buckets`` reduce buckets; ``hidden``: the share of it not overlapped by compute."""
        ...

    def offloads_frozen(self, spec: ExperimentSpec) -> bool:
        """Whether ``reference.offload`` (and the reward model's, the teacher's) really moves a frozen model to host
        memory (``--auto`` offers it only then)."""
        ...

    def auto_defaults(self) -> dict[str, Any]:
        """This backend's own keys at the values ``--auto`` resets them to when it tries another backend."""
        ...

    def auto_options(self, spec: ExperimentSpec, *, gpu: bool, turns: bool, lora: bool) -> list[dict[str, Any]]:
        """The configurations of this backend ``--auto`` tries (its keys only; ``turns``: the hybrid engine's
        sleep/wake around generation; ``lora``: a LoRA policy); the planner adds ``trainer.backend`` and the other
        backends' :meth:`auto_defaults`."""
        ...

    def label(self, spec: ExperimentSpec) -> str:
        """A few characters for ``--auto``'s table (e.g. ``ZeRO-3 off-optim``)."""
        ...

    def layout_keys(self, values: dict[str, Any]) -> list[str]:
        """Of a chosen layout's ``values``, the keys of this backend a written recipe shows."""
        ...

    def preload_modules(self) -> tuple[str, ...]:
        """Modules a Ray worker imports ahead of a CPU job's actors, beyond torch and transformers."""
        ...

    # -- its rules, asked by rlhf.spec (validation, the executor choice, resume) through the registry line --
    def problems(self, spec: ExperimentSpec, d: Any) -> list[tuple[str, Any, str]]:
        """What this backend refuses of ``spec`` (``d``: rlhf.spec.derive.Derived), as ``(full key, value, fix)``
        triples reported with every other validation error before anything starts."""
        ...

    def weights_split(self, spec: ExperimentSpec) -> tuple[str, Any, str] | None:
        """``(key, value, what splits them)`` when no rank holds the whole weights between passes (so a rank cannot
        generate with the module it trains), else None."""
        ...

    def beside_an_engine(self, spec: ExperimentSpec) -> list[tuple[str, Any, str]]:
        """``(key, value, why)`` for what keeps this backend from sharing its process with a rollout engine (the
        local executor hosts both in one process)."""
        ...

    def optimizer_bound_to_ranks(self, flat: dict[str, Any]) -> bool:
        """Whether a checkpoint written under the flattened config ``flat`` holds optimizer state split over as many
        ranks as saved it, so it cannot resume on another rank count."""
        ...

    # -- its checkpoints, asked by rlhf.run_files.init_source (preflight), rlhf.pipelines.init_from and
    # rlhf.spec.resume_rules through the registry line of the backend the checkpoint's run names --

    def checkpoint_weights(self, folder: Path) -> SavedWeights:
        """Where ``folder``, one trained role's folder of a step checkpoint this backend's :meth:`TrainEngine.save`
        wrote, holds that role's whole weights, and whether they are all there (:attr:`SavedWeights.problem`, said
        under ``checkpoint.init_from`` as it is: name the folder and the files missing). File names only, no torch:
        the preflight asks it before anything starts."""
        ...

    def checkpoint_state_dict(self, folder: Path) -> dict[str, Any]:
        """The full state dict of the model saved in ``folder`` (as :meth:`checkpoint_weights`): the module's own
        parameter names (a peft model's for LoRA), CPU tensors in the precision the optimizer steps (the fp32
        master weights where there are some), consolidated from however many ranks saved it, in a process with no
        process group (``checkpoint.init_from`` writes it into a Hugging Face folder before any rank starts).
        Imports torch inside."""
        ...

    def checkpoint_bound_keys(self) -> tuple[str, ...]:
        """The config keys (flattened, ``section.key``) a checkpoint of this backend is laid out by, so that a resume
        may not change them, beyond those of every backend (rlhf.spec.resume_rules.TRAINED_KEYS:
        ``trainer.backend``, ``trainer.optimizer``, the model, ...); the rank count is
        :meth:`optimizer_bound_to_ranks`'s."""
        ...


class TrainBackendBase:
    """What a training backend inherits so that it writes only what is its own: every member of
    :class:`TrainBackend` that has a sensible default has it here, documented by the Protocol. A subclass sets
    ``name`` and writes how it builds its engines (:meth:`build_trained`, :meth:`build_frozen`), its memory model
    (:meth:`trained_states`, :meth:`frozen_states`), its traffic and fixed cost for the cost model (:meth:`traffic`,
    :meth:`module_cost`) and where its checkpoints hold the weights (:meth:`checkpoint_weights`,
    :meth:`checkpoint_state_dict`). A backend whose forwards split each sample's tokens over ranks (Ulysses: the
    engines run rlhf.models.sequence_parallel) sets ``splits_sequences = True``: its :meth:`mesh` is then data x
    sequence by ``trainer.sequence_parallel_size``; one that does not writes nothing for it, and validation refuses
    a sequence size above 1 for it."""

    name: str = ""
    #: its engines split each sample's tokens over ``trainer.sequence_parallel_size`` ranks
    splits_sequences: bool = False

    def describe(self, spec: ExperimentSpec) -> str:
        return self.name

    def mesh(self, spec: ExperimentSpec, ranks: int) -> Mesh:
        if self.splits_sequences:
            return data_by_sequence(ranks, spec.trainer.sequence_parallel_size)
        return data_parallel(ranks)

    def init_distributed(self, accelerator: str, timeout_s: float = 600.0) -> None:
        from rlhf.backends.shared.distributed import init_process_group

        init_process_group("nccl" if accelerator == "gpu" else "gloo", accelerator, timeout_s)

    def leave(self) -> None:
        from rlhf.backends.shared.distributed import shutdown_distributed

        shutdown_distributed()

    def build_trained(
        self, load: ModelLoader, spec: ExperimentSpec, *, lr: float, total_steps: int, grad_accum: int
    ) -> TrainEngine:
        raise NotImplementedError(f"training backend {self.name!r}: build_trained")

    def build_frozen(self, load: ModelLoader, spec: ExperimentSpec, *, offload: bool) -> FrozenEngine:
        raise NotImplementedError(f"training backend {self.name!r}: build_frozen")

    def trained_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, trainable: int | None = None
    ) -> ModelStates:
        raise NotImplementedError(f"training backend {self.name!r}: trained_states")

    def frozen_states(
        self, spec: ExperimentSpec, *, params: int, largest_layer: int, dp: int, offload: bool
    ) -> ModelStates:
        raise NotImplementedError(f"training backend {self.name!r}: frozen_states")

    def gathers_on_every_rank(self, spec: ExperimentSpec) -> bool:
        return False

    def shards_optimizer_states(self, spec: ExperimentSpec) -> bool:
        return False

    def gathered_units(self, spec: ExperimentSpec) -> int:
        return 0

    def module_cost(self, constants: Any) -> Any:
        raise NotImplementedError(f"training backend {self.name!r}: module_cost")

    def traffic(
        self,
        spec: ExperimentSpec,
        net: Network,
        *,
        ranks: int,
        link: float,
        weight_bytes: float,
        grad_bytes: float,
        trained: float,
        units: int,
        buckets: int,
        hidden: float,
        gpu: bool,
    ) -> TrainTraffic:
        raise NotImplementedError(f"training backend {self.name!r}: traffic")

    def offloads_frozen(self, spec: ExperimentSpec) -> bool:
        return False

    def auto_defaults(self) -> dict[str, Any]:
        return {}

    def auto_options(self, spec: ExperimentSpec, *, gpu: bool, turns: bool, lora: bool) -> list[dict[str, Any]]:
        return [{}]  # the backend as the recipe configures it

    def label(self, spec: ExperimentSpec) -> str:
        return self.name

    def layout_keys(self, values: dict[str, Any]) -> list[str]:
        return [k for k in values if k.startswith(f"trainer.{self.name}.")]

    def preload_modules(self) -> tuple[str, ...]:
        return ()

    def problems(self, spec: ExperimentSpec, d: Any) -> list[tuple[str, Any, str]]:
        return []

    def weights_split(self, spec: ExperimentSpec) -> tuple[str, Any, str] | None:
        return None

    def beside_an_engine(self, spec: ExperimentSpec) -> list[tuple[str, Any, str]]:
        return []

    def optimizer_bound_to_ranks(self, flat: dict[str, Any]) -> bool:
        return False

    def checkpoint_weights(self, folder: Path) -> SavedWeights:
        raise NotImplementedError(f"training backend {self.name!r}: checkpoint_weights")

    def checkpoint_state_dict(self, folder: Path) -> dict[str, Any]:
        raise NotImplementedError(f"training backend {self.name!r}: checkpoint_state_dict")

    def checkpoint_bound_keys(self) -> tuple[str, ...]:
        return ()

